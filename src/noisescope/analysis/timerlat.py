"""Timer-latency series as intervals of lost time, for explaining late wakeups.

A wakeup with latency L at time W means the thread should have run from
W - L (its deadline) but could not until W: the same shape as a detour
(cpu, start_ns, duration_ns) on the same timeline (the measurement clock), so
whatever explains detours (trace events inside the interval) explains late
wakeups too.
"""

from __future__ import annotations

import numpy as np

from ..tables import Table


def late_wakeups(series: Table, threshold_ns: int) -> Table:
    """The wakeups of a `timerlat` table at least `threshold_ns` late, as
    detour-shaped rows: cpu, start_ns (the deadline), duration_ns (the latency)."""
    late = series.filter(series["latency_ns"] >= threshold_ns)
    return Table({
        "cpu": late["cpu"].astype(np.int32),
        "start_ns": late["wakeup_ns"] - late["latency_ns"],
        "duration_ns": late["latency_ns"],
    })
