"""Charging noise to busy windows, for all processes at once (LogGOPSim semantics).

Each process replays a noise trace from its own offset (the same offset for all
with co-scheduled noise). A busy window [t, t + d) -- computing, or paying a
message overhead -- is extended by the remainder of the last detour starting
at or before t (if it is still in progress) plus every detour starting inside
(t, t + d). A detour starting exactly as the window ends does not delay it.
Waiting is never charged.

Speed comes from two observations:

* Detours are rare next to the windows, so each process keeps one number: when
  the first detour at or after the end of its last busy window starts
  (`next_start`). A window that ends before it has no noise, which costs one
  comparison; only the other processes (a detour starts inside, or the process
  waited across one) need the exact lookup, in cache-sized batches.
* The exact lookup finds "the last detour starting at or before x" through a
  bucket table over one global time axis that holds every trace, which is an
  order of magnitude faster than a binary search for unsorted queries.
"""

from __future__ import annotations

import numpy as np

from .traces import NoiseTrace

FAR = np.int64(1 << 62)  # "never": later than any simulated time
MAX_BUCKETS = 1 << 22
MAX_STEPS = 8  # bucket walk steps before falling back to a binary search
CHUNK = 1 << 15  # processes per exact-lookup batch (about 256 kB per int64 column)


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
        # views indexed by a detour: the next one's start, the sum up to and including it
        self.next_starts = self.starts[1:]
        self.cumulative_through = self.cumulative[1:]
        self.origin = np.array(origins, np.int64)
        self.span = np.array(spans, np.int64)
        self.total = np.array(totals, np.int64)
        # Buckets of 2^shift ns holding about half a detour each on average.
        target = max(cursor // max(2 * len(start), 1), 1)
        self.shift = int(target).bit_length() - 1
        while (cursor >> self.shift) + 2 > MAX_BUCKETS:
            self.shift += 1
        edges = np.arange((cursor >> self.shift) + 2, dtype=np.int64) << self.shift
        self.first = np.searchsorted(self.starts, edges, side="left").astype(np.int32)

    def last_at_or_before(self, x: np.ndarray) -> np.ndarray:
        """Index of the last detour starting at or before each global time x."""
        index = self.first[x >> self.shift].astype(np.int64)  # every start before it is < x
        todo = np.flatnonzero(self.starts[index] <= x)
        for _ in range(MAX_STEPS):
            if not todo.size:
                return index - 1
            index[todo] += 1
            todo = todo[self.starts[index[todo]] <= x[todo]]
        if todo.size:
            index[todo] = np.searchsorted(self.starts, x[todo], side="right")
        return index - 1

    def window(self, at: np.ndarray, busy_ns: int, span=None, total=None, *,
               in_progress: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | int]:
        """Noise charged to busy windows [at, at + busy_ns) (global times inside the first
        period of their block): the rest of a detour in progress at `at` (unless
        in_progress=False) plus every detour starting inside. span and total (their
        traces' span and summed detours) are needed only for windows longer than the
        shortest trace.
        Returns (noise, start of the first detour at or after the window end, whole
        trace periods the window covers)."""
        periods = busy_ns // span if busy_ns >= self.span.min() else 0
        first = self.last_at_or_before(at)
        if in_progress:
            noise = self.ends[first] - at
            np.maximum(noise, 0, out=noise)
        else:
            noise = np.zeros(len(at), np.int64)
        following = self.next_starts[first]
        finish = at + (busy_ns - periods * span) if np.any(periods) else at + busy_ns
        inside = np.flatnonzero(following < finish)  # detours starting inside the window
        if inside.size:
            last = self.last_at_or_before(finish[inside] - 1)
            noise[inside] += (self.cumulative_through[last]
                              - self.cumulative_through[first[inside]])
            following[inside] = self.next_starts[last]
        if np.any(periods):  # a window longer than the trace sees all of it each time
            noise += periods * total
        return noise, following, periods


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
        self.trace_of = trace_of.astype(np.int32)
        self.single_trace = len(traces) == 1
        span = line.span[self.trace_of]
        if offsets is not None:  # given: where in its trace each process starts
            phase = np.asarray(offsets, np.int64) % span
        elif synchronized:
            phase = np.int64(rng.integers(0, line.span.max())) % span
        else:
            phase = (rng.random(procs) * span).astype(np.int64)
        # global time on the timeline = simulated time + shift
        self.shift = line.origin[self.trace_of] + phase
        self.period_end = (line.origin[0] + line.span[0] if self.single_trace
                           else line.origin[self.trace_of] + span)
        noisy = np.array([t.detours > 0 for t in traces])[self.trace_of]
        self.next_start = np.where(noisy, -FAR, FAR)  # quiet traces are never charged

    def finish(self, start: np.ndarray, busy_ns: int, procs: slice) -> np.ndarray:
        """End of busy windows [start, start + busy_ns) of processes `procs` (a slice),
        noise included."""
        end = start + busy_ns
        # an empty window is hit only by a detour starting at or before it
        hit = np.flatnonzero(np.less(self.next_start[procs], end) if busy_ns
                             else np.less_equal(self.next_start[procs], end))
        first = procs.start or 0
        # in chunks that stay in the CPU cache: the exact path is many small steps
        for chunk in range(0, hit.size, CHUNK):
            some = hit[chunk:chunk + CHUNK]
            end[some] += self._charge(start[some], busy_ns, some + first if first else some)
        return end

    def _geometry(self, procs: np.ndarray):
        """Block origin, span and summed detours of each process's trace."""
        line = self.timeline
        if self.single_trace:
            return line.origin[0], line.span[0], line.total[0]
        trace = self.trace_of[procs]
        return line.origin[trace], line.span[trace], line.total[trace]

    def _charge(self, start: np.ndarray, busy_ns: int, procs: np.ndarray) -> np.ndarray:
        """Exact noise for the windows of `procs`; moves their caches to the window end."""
        shift = self.shift[procs]
        at = start + shift  # where the window starts on the timeline
        period_end = self.period_end if self.single_trace else self.period_end[procs]
        wrapped = np.flatnonzero(at >= period_end)
        if wrapped.size:  # past the end of the trace's first period: it repeats
            origin, span, _ = self._geometry(procs[wrapped])
            back = (at[wrapped] - origin) // span * span
            at[wrapped] -= back
            shift[wrapped] -= back
            self.shift[procs[wrapped]] = shift[wrapped]
        long_window = busy_ns >= self.timeline.span.min()
        _, span, total = self._geometry(procs) if long_window else (None, None, None)
        noise, following, periods = self.timeline.window(at, busy_ns, span, total)
        if np.any(periods):  # keep the window's end inside [0, 2 span) of its block
            shift -= periods * span
            self.shift[procs] = shift
        following -= shift
        self.next_start[procs] = following
        return noise
