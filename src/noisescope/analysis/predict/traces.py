"""Noise traces: what a CPU lost, as detours (start, duration) on a timeline that repeats.

A trace comes from a bundle (one per measured CPU: the detour probe's windows
joined end to end, so unmeasured time between windows is left out), from a
synthetic spec such as `250Hz:2us+1Hz:200us` (periodic sources with random
phases), or from a text file in the format netgauge writes and LogGOPSim
reads: one detour per line, `start_ns<TAB>duration_ns`, `#` comments.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...diagnostics import Code, Diagnostic
from ...errors import UsageError, unwritable
from ...tables import SpooledTable, Table, cpu_batches
from ...units import format_duration, parse_noise_spec

SECOND = 1_000_000_000
# A synthetic trace repeats after the least common multiple of its periods
# when that is at most this long, so every source stays exactly periodic.
MAX_SYNTHETIC_SPAN_NS = 100 * SECOND
MAX_SYNTHETIC_DETOURS = 5_000_000
SPAN_KEY = "span_ns="
BUSY_FRACTION = 0.01  # the sampler waited longer than this for other tasks: say so
TRACE_FORMAT_HINT = ("each line must be START_NS<TAB>DURATION_NS in nanoseconds "
                     "(the netgauge/LogGOPSim noise trace format); '#' starts a comment")


@dataclass(frozen=True)
class PeriodicSource:
    """One component of a synthetic spec: `rate_hz` detours of `length_ns` each."""

    rate_hz: float
    length_ns: int

    def to_dict(self) -> dict:
        return {"rate_hz": self.rate_hz, "length_ns": self.length_ns}


@dataclass(frozen=True, eq=False)
class NoiseTrace:
    """Detours on [0, span_ns); a process replaying it wraps around at span_ns."""

    name: str
    starts_ns: np.ndarray  # int64, sorted
    durations_ns: np.ndarray  # int64, >= 0
    span_ns: int
    kind: str  # "bundle", "synthetic" or "file"
    cpu: int | None = None
    periodic: tuple[PeriodicSource, ...] = ()  # synthetic traces: the sources they were built from
    diagnostics: tuple[Diagnostic, ...] = ()  # how far to trust it (from the measurement)

    def __post_init__(self):
        starts = np.asarray(self.starts_ns, dtype=np.int64)
        durations = np.asarray(self.durations_ns, dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        object.__setattr__(self, "starts_ns", starts[order])
        object.__setattr__(self, "durations_ns", durations[order])
        if self.span_ns <= 0:
            raise UsageError(f"noise trace {self.name} spans no time", "give a trace with detours")
        if len(starts) and (starts.min() < 0 or starts.max() >= self.span_ns
                            or durations.min() < 0):
            raise ValueError(f"trace {self.name}: detours outside [0, span) or negative")

    @property
    def detours(self) -> int:
        return len(self.starts_ns)

    @property
    def rate_hz(self) -> float:
        return self.detours / (self.span_ns / SECOND)

    @property
    def noise_fraction(self) -> float:
        return float(self.durations_ns.sum()) / self.span_ns

    def describe(self) -> dict:
        """What a result keeps about the trace (no arrays)."""
        durations = self.durations_ns
        return {
            "name": self.name,
            "kind": self.kind,
            "cpu": self.cpu,
            "span_ns": int(self.span_ns),
            "detours": self.detours,
            "rate_hz": self.rate_hz,
            "noise_fraction": self.noise_fraction,
            "mean_ns": float(durations.mean()) if len(durations) else None,
            "max_ns": int(durations.max()) if len(durations) else None,
            "periodic": [p.to_dict() for p in self.periodic],
            "warnings": [d.to_dict() for d in self.diagnostics],
        }


# -- sources ------------------------------------------------------------------

def load_noise(source: str, *, seed: int = 1) -> list[NoiseTrace]:
    """SOURCE as the CLI takes it: a bundle directory, a trace file or a synthetic spec."""
    path = Path(source)
    if path.is_dir():
        from ...bundle import load

        return traces_from_bundle(load(path))
    if path.is_file():
        return [read_trace_file(path)]
    if ":" in source:
        return [synthetic_trace(source, seed=seed)]
    raise UsageError(f"noise source {source!r} is not a bundle, a trace file or a noise spec",
                     "give a bundle from 'noisescope scan', a start_ns<TAB>duration_ns file, "
                     "or a spec such as 250Hz:2us+1Hz:200us")


def traces_from_bundle(bundle) -> list[NoiseTrace]:
    """One trace per CPU the detour probe measured, its windows joined end to end."""
    if not bundle.has_table("detours") or not bundle.has_table("windows"):
        raise UsageError(f"bundle {bundle.name} has no detour data",
                         "measure with 'noisescope scan --probes detour' (the default probes "
                         "include it)")
    windows = bundle.table("windows")
    windows = windows.filter(np.asarray(windows["probe"]) == "detour")
    if windows.rows == 0:
        raise UsageError(f"bundle {bundle.name} has no detour windows (nothing was measured)",
                         "measure with 'noisescope scan --probes detour'")
    # the two columns a trace keeps, a CPU at a time (the whole table's strings took ~140 B
    # a detour: gigabytes for an hour's)
    detours = bundle.table_by_cpu("detours", ("start_ns", "duration_ns"))
    summaries = {s["cpu"]: s for s in bundle.summaries.get("detour", [])}
    traces = []
    for cpu in np.unique(windows["cpu"]):
        mine = windows.where(cpu=cpu)
        order = np.argsort(mine["start_ns"])
        begin = mine["start_ns"][order].astype(np.int64)
        end = mine["end_ns"][order].astype(np.int64)
        measured = end - begin
        offset = np.cumsum(measured) - measured  # where each window starts on the joined axis
        start, lengths = _cpu_columns(detours, int(cpu), ("start_ns", "duration_ns"))
        window = np.searchsorted(begin, start, side="right") - 1
        inside = (window >= 0) & (start < end[np.maximum(window, 0)])
        local = start[inside] - begin[window[inside]] + offset[window[inside]]
        durations = lengths[inside]
        span = int(measured.sum())
        name = f"{bundle.name} cpu {int(cpu)}"
        summary = summaries.get(int(cpu), {})
        notes = []
        if summary.get("overflow") and len(local):
            # Detours beyond the buffer were counted but not stored: keep only the
            # stretch the stored ones cover, so the rate stays right.
            span = int(min(span, (local + durations).max() + 1))
            notes.append(Diagnostic(Code.BUFFER_OVERFLOW, f"{name}: {summary['overflow']} detours "
                                    f"were not stored; the trace is cut at "
                                    f"{format_duration(span)}"))
        if summary.get("run_delay_ns", 0) > BUSY_FRACTION * span:
            notes.append(Diagnostic(Code.MACHINE_BUSY, f"{name}: the sampler waited "
                                    f"{100 * summary['run_delay_ns'] / span:.1f}% of the time for "
                                    f"other tasks; their time is noise in this trace"))
        traces.append(NoiseTrace(name, local, durations, span, "bundle", cpu=int(cpu),
                                 diagnostics=tuple(notes)))
    return traces


def _cpu_columns(table: Table | SpooledTable, cpu: int, names: tuple[str, ...]
                 ) -> list[np.ndarray]:
    """One CPU's columns of a table read batch by batch, as int64 arrays."""
    batches = list(cpu_batches(table, cpu, "start_ns"))
    return [np.concatenate([np.zeros(0, np.int64), *(b[name] for b in batches)]).astype(np.int64)
            for name in names]


def parse_synthetic(spec: str) -> tuple[PeriodicSource, ...]:
    """'250Hz:2us+1Hz:200us' -> its periodic sources."""
    parts = [p for p in spec.split("+") if p.strip()]
    if not parts:
        raise UsageError(f"cannot read noise spec {spec!r}", "write e.g. 250Hz:2us+1Hz:200us")
    return tuple(PeriodicSource(*parse_noise_spec(p.strip())) for p in parts)


def synthetic_span_ns(sources: tuple[PeriodicSource, ...]) -> int:
    """At least 1 s (a trace others can replay too): a whole number of the periods'
    least common multiple if that keeps every source exactly periodic, else a whole
    number of the longest period (and at least 10 of them)."""
    periods = [SECOND / s.rate_hz for s in sources]
    if all(abs(p - round(p)) < 1e-6 for p in periods):
        common = 1
        for p in periods:
            common = math.lcm(common, int(round(p)))
        span = common * math.ceil(SECOND / common)
        events = sum(s.rate_hz * span / SECOND for s in sources)
        if span <= MAX_SYNTHETIC_SPAN_NS and events <= MAX_SYNTHETIC_DETOURS:
            return span
    longest = max(periods)
    return int(math.ceil(max(SECOND, 10 * longest) / longest) * longest)


def synthetic_trace(spec: str, *, seed: int = 1) -> NoiseTrace:
    sources = parse_synthetic(spec)
    span = synthetic_span_ns(sources)
    if sum(s.rate_hz * span / SECOND for s in sources) > MAX_SYNTHETIC_DETOURS:
        raise UsageError(f"noise spec {spec!r} needs too many detours per trace",
                         "use lower rates (at most a few hundred kHz in total)")
    rng = np.random.default_rng(seed)
    starts, durations = [], []
    for source in sources:
        period = SECOND / source.rate_hz
        phase = rng.random() * period  # sources are independent of each other
        count = int(math.ceil((span - phase) / period))
        starts.append(np.floor(phase + period * np.arange(count)).astype(np.int64))
        durations.append(np.full(count, source.length_ns, np.int64))
    start = np.concatenate(starts)
    keep = start < span
    return NoiseTrace(spec, start[keep], np.concatenate(durations)[keep], span, "synthetic",
                      periodic=sources)


# -- netgauge / LogGOPSim trace files ------------------------------------------

def read_trace_file(path: str | os.PathLike[str]) -> NoiseTrace:
    """Read `start_ns<TAB>duration_ns` lines; `# span_ns=N` (written by noisescope)
    gives the measured span, else the trace ends with its last detour."""
    path = Path(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a text noise trace", TRACE_FORMAT_HINT) from None
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror}", "check the path") from None
    starts: list[float] = []
    durations: list[float] = []
    span: int | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.strip()
        if content.startswith("#"):
            if SPAN_KEY in content:
                span = _span_from_comment(content, path, number)
            continue
        if not content:
            continue
        fields = content.split()
        try:
            start, duration = float(fields[0]), float(fields[1])
        except (ValueError, IndexError):
            raise UsageError(f"{path}, line {number}: cannot read {content[:40]!r}",
                             TRACE_FORMAT_HINT) from None
        if not (math.isfinite(start) and math.isfinite(duration)) or start < 0 or duration < 0:
            raise UsageError(f"{path}, line {number}: start and duration must be finite and "
                             f"not negative, got {content[:40]!r}", TRACE_FORMAT_HINT)
        starts.append(start)
        durations.append(duration)
    if not starts:
        raise UsageError(f"{path} holds no detours", TRACE_FORMAT_HINT)
    start_ns = np.round(np.array(starts)).astype(np.int64)
    duration_ns = np.round(np.array(durations)).astype(np.int64)
    last_end = int((start_ns + duration_ns).max())
    if span is None:
        span = max(last_end, int(start_ns.max()) + 1)
    elif span <= start_ns.max():
        raise UsageError(f"{path}: span_ns={span} ends before the last detour starts",
                         "fix or remove the '# span_ns=' line")
    return NoiseTrace(path.name, start_ns, duration_ns, span, "file")


def _span_from_comment(content: str, path: Path, number: int) -> int:
    value = (content.split(SPAN_KEY, 1)[1].split() or [""])[0]
    if not value.isdigit() or int(value) <= 0:
        raise UsageError(f"{path}, line {number}: cannot read the span in {content[:60]!r}",
                         "write '# span_ns=N' with N > 0 nanoseconds, or remove the line")
    return int(value)


def check_trace_output(path: str | os.PathLike[str]) -> Path:
    """Refuse an output that exists (a dangling symbolic link included) or has no directory."""
    destination = Path(path)
    if os.path.lexists(destination):
        raise UsageError(f"{destination} already exists", "remove it or choose another -o")
    if not destination.parent.is_dir():
        raise UsageError(f"cannot write {destination}: directory {destination.parent} does not "
                         f"exist", "create it first or choose another -o")
    return destination


def write_trace_file(trace: NoiseTrace, path: str | os.PathLike[str]) -> Path:
    """Write `trace` for netgauge/LogGOPSim (atomically; `path` must not exist)."""
    destination = check_trace_output(path)
    partial = destination.parent / f".{destination.name}.partial-{os.getpid()}"
    header = (f"# noisescope noise trace: start_ns<TAB>duration_ns (netgauge/LogGOPSim format)\n"
              f"# source: {trace.name}\n# {SPAN_KEY}{trace.span_ns}\n")
    rows = np.column_stack([trace.starts_ns, trace.durations_ns])
    try:
        out = open(partial, "x")
    except OSError as error:
        raise unwritable(destination.parent, error) from None
    try:
        with out:
            out.write(header)
            np.savetxt(out, rows, fmt="%d", delimiter="\t")
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, destination)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return destination
