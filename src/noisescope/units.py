"""The one place that parses and formats durations, rates and CPU lists.

Files hold integers (nanoseconds, Hz); text is for people. Parsers raise
UsageError with a hint, so every command reports bad values the same way.
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
_RATE_UNITS = {"hz": 1.0, "khz": 1e3, "mhz": 1e6}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_DURATION_RE = re.compile(rf"^\s*({_NUMBER})\s*([a-zµ]*)\s*$")
_RATE_RE = re.compile(rf"^\s*({_NUMBER})\s*([a-zA-Z]*)\s*$")


def parse_duration(text: str | int | float, *, what: str = "duration",
                   default_unit: str = "s") -> int:
    """'10s', '1.5ms', '20us', '250' (in default_unit) -> integer nanoseconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(round(text * _DURATION_UNITS[default_unit]))
    if str(text).strip().startswith("-"):
        raise UsageError(f"{what} {text!r} is negative", "give a time of 0 or more, e.g. 10s")
    match = _DURATION_RE.match(str(text).lower())
    unit = match.group(3) if match else ""
    if not match or (unit and unit not in _DURATION_UNITS):
        raise UsageError(
            f"cannot read {what} {text!r}",
            "write a number with a unit: ns, us, ms, s, m or h (e.g. 10s, 20us)",
        )
    value = float(match.group(1))
    if not math.isfinite(value):
        raise UsageError(f"{what} {text!r} is not a finite number", "e.g. 10s")
    return int(round(value * _DURATION_UNITS[unit or default_unit]))


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
    return hz


def format_rate(hz: float | None) -> str:
    if hz is None or math.isnan(hz):
        return "-"
    if hz >= 1e6:
        return f"{hz / 1e6:.3g} MHz"
    if hz >= 1e3:
        return f"{hz / 1e3:.3g} kHz"
    return f"{hz:.3g} Hz"


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11), sorted and unique (the kernel's format)."""
    cpus: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise UsageError(f"cannot read CPU list {text!r}", "write e.g. 0-3,8 or 1")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise UsageError(f"CPU range {part!r} runs backwards", f"write {last}-{first}")
        cpus.update(range(first, last + 1))
    if not cpus:
        raise UsageError(f"CPU list {text!r} is empty", "write e.g. 0-3,8 or 1")
    return tuple(sorted(cpus))


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
    rate = parse_rate(rate_text, what="noise rate")
    length = parse_positive_duration(length_text, what="noise length", default_unit="ns")
    if length * rate >= 1e9:
        raise UsageError(
            f"noise {text!r} would take the whole CPU ({length} ns every {1e9 / rate:.0f} ns)",
            "make the length shorter than the period",
        )
    return rate, length


# Process counts use binary prefixes, the HPC habit: 1k = 1024, 1M = 1048576.
_COUNT_PREFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_COUNT_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)\s*$|^\s*2\s*\^\s*(\d+)\s*$")


def parse_count(text: str | int, *, what: str = "count") -> int:
    """'1k' -> 1024, '1M' -> 1048576, '2^20' -> 1048576, '1000' -> 1000 (binary prefixes)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    match = _COUNT_RE.match(str(text).lower())
    if not match:
        raise UsageError(f"cannot read {what} {text!r}",
                         "write a whole number, optionally with k (1024), M (1024^2) or 2^N")
    if match.group(3) is not None:
        return 1 << int(match.group(3))
    return int(match.group(1)) * _COUNT_PREFIXES[match.group(2)]


def parse_count_list(text: str, *, what: str = "count") -> tuple[int, ...]:
    """'1k,16k,1M' -> (1024, 16384, 1048576), sorted and unique."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise UsageError(f"{what} list {text!r} is empty", "write e.g. 1k,16k,1M")
    return tuple(sorted({parse_count(p, what=what) for p in parts}))


def format_count(n: int) -> str:
    """1048576 -> '1M', 16384 -> '16k', 1000 -> '1000' (exact binary multiples only)."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("k", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


_SIZE_UNITS = {"": 1024, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2,
               "mib": 1024**2, "g": 1024**3, "gb": 1024**3, "gib": 1024**3}


def parse_size_kib(text: str, *, what: str = "size") -> int:
    """'64M', '512KiB', '1G', '2048' (KiB, like tracefs' buffer_size_kb) -> KiB (> 0).
    Units are powers of two."""
    match = re.fullmatch(rf"\s*({_NUMBER})\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(3).lower() if match else ""
    if not match or unit not in _SIZE_UNITS:
        raise UsageError(f"cannot read {what} {text!r}", "write a size such as 64M, 512K or 1G")
    kib = int(float(match.group(1)) * _SIZE_UNITS[unit] // 1024)
    if kib <= 0:
        raise UsageError(f"{what} {text!r} is too small", "use at least 1K")
    return kib
