"""Charging noise to busy windows, for all processes at once (LogGOPSim semantics).

Each process replays a noise trace from its own offset (the same offset for all
with co-scheduled noise). A busy window [t, t + d) -- computing, or paying a
message overhead -- is extended by the remainder of the last detour starting
at or before t (if it is still in progress) plus every detour starting inside
(t, t + d). A detour starting exactly as the window ends does not delay it.
Waiting is never charged.

The windows are charged by the native core (`_native/predict.c`, one loop over
the processes); this module lays out the data it reads. Speed comes from two
observations:

* Detours are rare next to the windows, so each process keeps one number: when
  the first detour at or after the end of its last busy window starts
  (`next_start`). A window that ends before it has no noise, which costs one
  comparison; only the other processes (a detour starts inside, or the process
  waited across one) need the exact lookup.
* The exact lookup finds "the last detour starting at or before x" through a
  bucket table over one global time axis that holds every trace, a few steps
  from the bucket's first detour (a binary search after MAX_STEPS).
"""

from __future__ import annotations

import numpy as np

from ... import _native
from .traces import NoiseTrace

FAR = np.int64(1 << 62)  # "never": later than any simulated time
MAX_BUCKETS = 1 << 22
MAX_STEPS = 8  # bucket walk steps before falling back to a binary search


class TraceAxis:
    """Every trace on one axis: block j holds the last detour of the previous period,
    two periods of trace j and the first detour of the period after, so a query
    anywhere in [0, 2 span) of block j stays inside the block."""

    def __init__(self, traces: list[NoiseTrace]):
        starts, durations = [], []
        origins, spans, totals = [], [], []
        cursor = 0
        for trace in traces:
            span = trace.span_ns
            origin = cursor + span  # block j covers (origin - span, origin + 3 span)
            s, d = trace.starts_ns, trace.durations_ns
            if len(s):
                starts.append(origin + np.concatenate([[s[-1] - span], s, s + span,
                                                       [s[0] + 2 * span]]))
                durations.append(np.concatenate([[d[-1]], d, d, [d[0]]]))
            origins.append(origin)
            spans.append(span)
            totals.append(int(d.sum()))
            cursor = origin + 3 * span + 1
        start = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        duration = np.concatenate(durations) if durations else np.zeros(0, np.int64)
        self.starts = np.append(start, FAR)  # the sentinel ends every bucket walk
        self.ends = np.append(start + duration, FAR)
        self.cumulative = np.concatenate([[0], np.cumsum(duration)]).astype(np.int64)
        self.origin = np.array(origins, np.int64)
        self.span = np.array(spans, np.int64)
        self.total = np.array(totals, np.int64)
        # Buckets of 2^shift ns holding about half a detour each on average.
        target = max(cursor // max(2 * len(start), 1), 1)
        self.shift = int(target).bit_length() - 1
        while (cursor >> self.shift) + 2 > MAX_BUCKETS:
            self.shift += 1
        edges = np.arange((cursor >> self.shift) + 2, dtype=np.int64) << self.shift
        self.first = np.searchsorted(self.starts, edges, side="left").astype(np.int64)

    def native(self) -> tuple:
        """What the native core reads (predict.h: struct ns_trace_axis)."""
        return (self.starts, self.ends, self.cumulative, self.first, self.shift, MAX_STEPS,
                self.origin, self.span, self.total)

    def window(self, at: np.ndarray, busy_ns: int, span: int, total: int, *,
               in_progress: bool = True) -> np.ndarray:
        """Noise charged to busy windows [at, at + busy_ns) (global times inside the first
        period of their block) of one trace of `span` ns with `total` ns of detours: the
        rest of a detour in progress at `at` (unless in_progress=False) plus every detour
        starting inside."""
        at = np.ascontiguousarray(at, np.int64)
        noise = np.empty(len(at), np.int64)
        _native.predict_windows(self.native(), at, int(busy_ns), int(span), int(total),
                                in_progress, noise)
        return noise


class NoiseReplay:
    """Per-process replay state for P processes; process k replays trace trace_of[k].

    The cache per process is `next_start`, the simulated time at which the first
    detour at or after the end of its last busy window starts. A window that ends
    at or before it has no noise: no detour starts inside, and the last one
    starting before it was already seen and ended before the previous window did
    (its whole length, or its rest, was charged to that window). Caches start
    stale (-FAR) so that every process's first window takes the exact path.
    """

    def __init__(self, traces: list[NoiseTrace], trace_of: np.ndarray,
                 rng: np.random.Generator, *, synchronized: bool = False,
                 offsets: np.ndarray | None = None):
        self.timeline = line = TraceAxis(traces)
        procs = len(trace_of)
        noisy = np.array([t.detours > 0 for t in traces])
        if len(traces) == 1:  # no per-process trace numbers (millions of processes)
            self.trace_of = None
            span, origin, noisy = line.span[0], line.origin[0], noisy[0]
        else:
            self.trace_of = np.asarray(trace_of, np.int64)
            span, origin = line.span[self.trace_of], line.origin[self.trace_of]
            noisy = noisy[self.trace_of]
        if offsets is not None:  # given: where in its trace each process starts
            phase = np.asarray(offsets, np.int64) % span
        elif synchronized:
            phase = np.int64(rng.integers(0, line.span.max())) % span
        else:
            phase = (rng.random(procs) * span).astype(np.int64)
        # global time on the timeline = simulated time + shift
        self.shift = np.empty(procs, np.int64)
        np.add(origin, phase, out=self.shift)
        self.next_start = np.empty(procs, np.int64)
        self.next_start[:] = np.where(noisy, -FAR, FAR)  # quiet traces are never charged

    def native(self) -> tuple:
        """What the native core reads and updates (predict.h: struct ns_replay)."""
        return (self.timeline.native(), self.shift, self.next_start, self.trace_of)

    def finish(self, start: np.ndarray, busy_ns: int, procs: slice) -> np.ndarray:
        """End of busy windows [start, start + busy_ns) of processes `procs` (a slice),
        noise included (a new array)."""
        start = np.ascontiguousarray(start, np.int64)
        end = np.empty_like(start)
        _native.predict_finish(self.native(), start, end, procs.start or 0, int(busy_ns))
        return end
