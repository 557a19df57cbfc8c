"""The one place that parses and formats durations, rates and CPU lists.

Files hold integers (nanoseconds, Hz); text is for people. Parsers raise
UsageError with a hint, so every command reports bad values the same way,
and bound what they accept before anything is allocated from it: durations
up to MAX_DURATION_NS, CPU numbers below MAX_CPUS, counts and sizes up to
the caller's maximum.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from .errors import UsageError

_DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "min": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_RATE_UNITS = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
MAX_RATE_HZ = 1e9  # a period of one nanosecond
SECOND = 1_000_000_000  # ns
# The longest duration any option takes: longer runs are not what a noise tool
# measures in one go, and every time stays far inside int64 nanoseconds.
MAX_DURATION_NS = 366 * 24 * 3_600_000_000_000
# The kernel's largest NR_CPUS (x86-64 with CONFIG_MAXSMP): no CPU number reaches it.
MAX_CPUS = 8192
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_DURATION_RE = re.compile(rf"^\s*({_NUMBER})\s*([a-zµ]*)\s*$")
_RATE_RE = re.compile(rf"^\s*({_NUMBER})\s*([a-zA-Z]*)\s*$")


def parse_duration(text: str | int | float, *, what: str = "duration",
                   default_unit: str = "s") -> int:
    """'10s', '1.5ms', '20us', '250' (in default_unit) -> integer nanoseconds,
    0 to MAX_DURATION_NS."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), default_unit
    else:
        if str(text).strip().startswith("-"):
            raise UsageError(f"{what} {text!r} is negative", "give a time of 0 or more, e.g. 10s")
        match = _DURATION_RE.match(str(text).lower())
        unit = match.group(3) if match else ""
        if not match or (unit and unit not in _DURATION_UNITS):
            raise UsageError(
                f"cannot read {what} {text!r}",
                "write a number with a unit: ns, us, ms, s, m or h (e.g. 10s, 20us)",
            )
        value, unit = float(match.group(1)), unit or default_unit
    ns = value * _DURATION_UNITS[unit]
    if value < 0:
        raise UsageError(f"{what} {text!r} is negative", "give a time of 0 or more, e.g. 10s")
    if not math.isfinite(ns) or ns > MAX_DURATION_NS:
        raise UsageError(f"{what} {text!r} is too long",
                         f"give at most {MAX_DURATION_NS // _DURATION_UNITS['h']}h (366 days)")
    return int(round(ns))


def parse_positive_duration(text: str | int | float, *, what: str = "duration",
                            default_unit: str = "s") -> int:
    ns = parse_duration(text, what=what, default_unit=default_unit)
    if ns <= 0:
        raise UsageError(f"{what} must be greater than zero, got {text!r}", "e.g. 10s")
    return ns


def format_duration(ns: float | int | None, *, precision: int = 3) -> str:
    """Nanoseconds -> '1.23 ms', choosing the unit that keeps the number readable."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    value = float(ns)
    magnitude = abs(value)
    if magnitude >= 1000e9:  # hours (or days) rather than '3.6e+03 s'
        hours = value / 3.6e12
        if abs(hours) < 1000:
            return f"{hours:.{precision}g} h"
        return f"{hours / 24:.{precision}g} d"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if magnitude >= scale:
            return f"{value / scale:.{precision}g} {unit}"
    return f"{value:.{precision}g} ns"


def parse_rate(text: str | float, *, what: str = "rate") -> float:
    """'1kHz', '250Hz', '333', '2.5 kHz' -> Hz (float, > 0)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        match = _RATE_RE.match(str(text))
        if not match or match.group(3).lower() not in ("", *_RATE_UNITS):
            raise UsageError(f"cannot read {what} {text!r}", "write e.g. 1kHz, 250Hz or 333")
        value, unit = float(match.group(1)), match.group(3).lower()
    hz = value * _RATE_UNITS.get(unit, 1.0)
    if not (math.isfinite(hz) and hz > 0):
        raise UsageError(f"{what} must be greater than zero, got {text!r}", "e.g. 1kHz")
    if hz > MAX_RATE_HZ:
        raise UsageError(f"{what} {text!r} is too high (a period under 1 ns)",
                         "give at most 1GHz, e.g. 1kHz")
    return hz


def format_rate(hz: float | None) -> str:
    if hz is None or math.isnan(hz):
        return "-"
    if hz >= 1e6:
        return f"{hz / 1e6:.3g} MHz"
    if hz >= 1e3:
        return f"{hz / 1e3:.3g} kHz"
    return f"{hz:.3g} Hz"


def parse_cpu_list(text: str, *, what: str = "CPU list", limit: int = MAX_CPUS) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11), sorted and unique (the kernel's format).
    Every number is below `limit` (checked before a range is expanded)."""
    ranges: list[tuple[int, int]] = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise UsageError(f"cannot read {what} {text!r}", "write e.g. 0-3,8 or 1")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise UsageError(f"CPU range {part!r} runs backwards", f"write {last}-{first}")
        if last >= limit:
            raise UsageError(f"{what} {text!r} names {last}, beyond the largest possible "
                             f"({limit - 1})", "write e.g. 0-3,8 or 1")
        ranges.append((first, last))
    if not ranges:
        raise UsageError(f"{what} {text!r} is empty", "write e.g. 0-3,8 or 1")
    return tuple(sorted({n for first, last in ranges for n in range(first, last + 1)}))


def cpumask_text(cpus: tuple[int, ...] | list[int]) -> str:
    """A kernel cpumask (tracing_cpumask, the workqueue cpumask, smp_affinity): hex,
    comma-separated groups of 32 CPUs."""
    mask = 0
    for cpu in cpus:
        mask |= 1 << cpu
    groups = []
    while True:
        groups.append(mask & 0xFFFFFFFF)
        mask >>= 32
        if not mask:
            break
    return ",".join([f"{groups[-1]:x}"] + [f"{g:08x}" for g in reversed(groups[:-1])])


def format_cpu_list(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ordered:
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def parse_noise_spec(text: str) -> tuple[float, int]:
    """'1kHz:20us' -> (rate in Hz, length in ns): periodic noise of a given length."""
    rate_text, sep, length_text = str(text).partition(":")
    if not sep:
        raise UsageError(f"cannot read noise {text!r}", "write RATE:LENGTH, e.g. 1kHz:20us")
    return parse_noise(rate_text, length_text)


def parse_noise(rate_text: str | float, length_text: str | int, *, rate_what: str = "noise rate",
                length_what: str = "noise length") -> tuple[float, int]:
    """A rate and a length of periodic noise -> (Hz, ns); the length must be
    shorter than the period, or the noise would take the whole CPU."""
    rate = parse_rate(rate_text, what=rate_what)
    length = parse_positive_duration(length_text, what=length_what, default_unit="ns")
    if length * rate >= 1e9:
        raise UsageError(
            f"noise {rate_text}:{length_text} would take the whole CPU ({length} ns every "
            f"{1e9 / rate:.0f} ns)", "make the length shorter than the period")
    return rate, length


# Process counts use binary prefixes, the HPC habit: 1k = 1024, 1M = 1048576.
_COUNT_PREFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_COUNT_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)\s*$|^\s*2\s*\^\s*(\d+)\s*$")
_MAX_COUNT_DIGITS = 30


def parse_count(text: str | int, *, what: str = "count", maximum: int | None = None) -> int:
    """'1k' -> 1024, '1M' -> 1048576, '2^20' -> 1048576, '1000' -> 1000 (binary prefixes);
    at most `maximum` when given."""
    if isinstance(text, int) and not isinstance(text, bool):
        count = text
    else:
        match = _COUNT_RE.match(str(text).lower())
        if not match:
            raise UsageError(f"cannot read {what} {text!r}",
                             "write a whole number, optionally with k (1024), M (1024^2) or 2^N")
        digits = match.group(3) if match.group(3) is not None else match.group(1)
        if len(digits) > _MAX_COUNT_DIGITS:
            count = None  # far beyond any maximum; not converted (Python limits int(str))
        elif match.group(3) is not None:
            count = 1 << int(digits) if int(digits) < 64 else None
        else:
            count = int(digits) * _COUNT_PREFIXES[match.group(2)]
    if count is None or (maximum is not None and count > maximum):
        limit = f"at most {format_count(maximum)}" if maximum is not None else "a smaller number"
        raise UsageError(f"{what} {text!r} is too large", f"give {limit}")
    return count


def parse_count_list(text: str, *, what: str = "count",
                     maximum: int | None = None) -> tuple[int, ...]:
    """'1k,16k,1M' -> (1024, 16384, 1048576), sorted and unique."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise UsageError(f"{what} list {text!r} is empty", "write e.g. 1k,16k,1M")
    return tuple(sorted({parse_count(p, what=what, maximum=maximum) for p in parts}))


def format_count(n: int) -> str:
    """1048576 -> '1M', 16384 -> '16k', 1000 -> '1000' (exact binary multiples only)."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("k", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


_SIZE_UNITS = {"": 1024, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2,
               "mib": 1024**2, "g": 1024**3, "gb": 1024**3, "gib": 1024**3}


def parse_size_kib(text: str, *, what: str = "size", maximum_kib: int | None = None) -> int:
    """'64M', '512KiB', '1G', '2048' (KiB, like tracefs' buffer_size_kb) -> KiB (> 0),
    at most `maximum_kib` when given. Units are powers of two."""
    match = re.fullmatch(rf"\s*({_NUMBER})\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(3).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise UsageError(f"cannot read {what} {text!r}", "write a size such as 64M, 512K or 1G")
    kib = float(match.group(1)) * _SIZE_UNITS[unit] / 1024
    if maximum_kib is not None and not kib <= maximum_kib:
        raise UsageError(f"{what} {text!r} is too large",
                         f"give at most {format_size_kib(maximum_kib)}")
    if not math.isfinite(kib):
        raise UsageError(f"{what} {text!r} is too large", "write a size such as 64M, 512K or 1G")
    if int(kib) <= 0:
        raise UsageError(f"{what} {text!r} is too small", "use at least 1K")
    return int(kib)


def format_size_kib(kib: float) -> str:
    """65536 -> '64M', 5767168.5 -> '5.5G': a size parse_size_kib reads back, rounded down."""
    for suffix, scale in (("G", 1 << 20), ("M", 1 << 10)):
        if kib >= scale:
            return f"{math.floor(kib / scale * 10) / 10:g}{suffix}"
    return f"{math.floor(kib):d}K"
