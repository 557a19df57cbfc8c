"""The analytic side: per-window delays, expected maxima, and the knee.

In a bulk-synchronous step every process computes for W and then waits for the
slowest, so the step costs W plus the largest of P per-window delays. The
delay D of one window of length W -- the detours starting inside it, what a
fixed-work-quantum sample of length W loses -- is read off the trace itself at
evenly spread offsets (the empirical distribution of D, i.e. its measured
quantiles); its mean is exactly the noise fraction times W. The expected
maximum over P processes is then an order statistic,

    E[max] = integral over x of (1 - prod_j F_j(x)^P_j)

where F_j is the distribution of D on trace j and P_j the processes replaying
it; with co-scheduled noise all processes draw the same D. Noise in the
collective, detours in progress when a process resumes after waiting, and
delays carried over between steps are left out: those are what the simulation
adds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .replay import TraceAxis
from .traces import SECOND, NoiseTrace

DELAY_SAMPLES = 1 << 16
BAND_FLOORS_NS = (1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000)


def spread_offsets(span_ns: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random offset in each of `samples` equal slices of [0, span)."""
    count = min(samples, span_ns)
    return ((np.arange(count) + rng.random(count)) * (span_ns / count)).astype(np.int64)


def window_delays(traces: list[NoiseTrace], window_ns: int, offsets: np.ndarray
                  ) -> list[np.ndarray]:
    """Per trace, the detours starting inside a window of `window_ns` at each offset
    (offsets wrap around each trace's span)."""
    line = TraceAxis(traces)
    delays = []
    for index, trace in enumerate(traces):
        if trace.detours == 0:
            delays.append(np.zeros(len(offsets), np.int64))
            continue
        at = line.origin[index] + offsets % trace.span_ns
        delays.append(line.window(at, window_ns, line.span[index], line.total[index],
                                  in_progress=False))
    return delays


def expected_maximum(samples: list[np.ndarray], counts: list[int]) -> float:
    """E[max] of sum(counts) independent draws, counts[j] of them from the empirical
    distribution of samples[j]."""
    used = [(np.sort(s), n) for s, n in zip(samples, counts, strict=True) if n > 0 and len(s)]
    if not used:
        return 0.0
    values = np.unique(np.concatenate([s for s, _ in used]))
    log_cdf = np.zeros(len(values))
    with np.errstate(divide="ignore"):
        for sorted_samples, n in used:
            below = np.searchsorted(sorted_samples, values, side="right") / len(sorted_samples)
            log_cdf += n * np.log(below)
    cdf_of_max = np.exp(log_cdf)
    return float(values[0] + np.sum(np.diff(values) * (1.0 - cdf_of_max[:-1])))


def processes_per_trace(procs: int, traces: int) -> list[int]:
    """Round-robin assignment: rank r replays trace r mod traces."""
    return [procs // traces + (1 if j < procs % traces else 0) for j in range(traces)]


@dataclass(frozen=True)
class Knee:
    """P* = 1 / (rate x W): beyond about P* processes, almost every step has at least
    one process hit by a detour of this class, so its length is paid every step."""

    source: str
    detours: str  # "periodic" (a synthetic source) or "at_least" (measured, length >= length_ns)
    length_ns: int  # the periodic source's length, or the shortest detour counted
    rate_hz: float
    mean_ns: float
    noise_fraction: float
    procs: float | None  # None when W = 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Knee:
        return cls(**data)


def knee(rate_hz: float, window_ns: int) -> float | None:
    if window_ns <= 0 or rate_hz <= 0:
        return None
    return SECOND / (rate_hz * window_ns)


def knees(traces: list[NoiseTrace], window_ns: int) -> list[Knee]:
    """Per source: each periodic component of a synthetic trace; for measured traces,
    the detours at or above 1 us, 10 us, 100 us, ... (rarer, longer detours have
    later knees and cost more each time)."""
    rows = []
    for trace in traces:
        seconds = trace.span_ns / SECOND
        if trace.periodic:
            for source in trace.periodic:
                rows.append(Knee(trace.name, "periodic", source.length_ns, source.rate_hz,
                                 float(source.length_ns),
                                 source.rate_hz * source.length_ns / SECOND,
                                 knee(source.rate_hz, window_ns)))
            continue
        durations = trace.durations_ns
        for floor in BAND_FLOORS_NS:
            chosen = durations[durations >= floor]
            if not len(chosen):
                break
            rate = len(chosen) / seconds
            rows.append(Knee(trace.name, "at_least", floor, rate,
                             float(chosen.mean()), float(chosen.sum()) / trace.span_ns,
                             knee(rate, window_ns)))
    return rows
