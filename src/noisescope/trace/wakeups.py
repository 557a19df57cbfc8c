"""Late timer wakeups explained: what held a CPU between a timerlat deadline
and the moment the measuring thread ran again.

A wakeup L late at W is the span [W - L, W] of its CPU (`late_wakeups`:
shaped like a detour, on the same timeline). The measuring thread sleeps
through it, so the spans are attributed with it as their owner (its tid is in the
timerlat summaries): the timer interrupt that woke it, other interrupts and
softirqs, the task that held the CPU at the deadline or took it before the
thread could run, and the idle task (see `attribute`). The results have the
shape of the detours': an annotated table, the split per cause, and one
summary row per CPU rendered by the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UsageError, option
from ..tables import Table
from .attribute import attribute
from .explain import WORST_PER_CPU, attribution_summary
from .store import EventSource

DEFAULT_THRESHOLD_NS = 50_000  # wakeups at least this late are explained by default
COUNT_KEY, TOTAL_KEY = "wakeups", "latency_ns"  # the summary's names for count and total


def late_wakeups(series: Table, threshold_ns: int) -> Table:
    """The wakeups of a `timerlat` table at least `threshold_ns` late, as
    detour-shaped rows: cpu, start_ns (the deadline), duration_ns (the latency).

    A wakeup with latency L at time W means the thread should have run from
    W - L (its deadline) but could not until W: whatever explains detours (trace
    events inside the interval) explains late wakeups too."""
    late = series.filter(series["latency_ns"] >= threshold_ns)
    return Table({
        "cpu": late["cpu"].astype(np.int32),
        "start_ns": late["wakeup_ns"] - late["latency_ns"],
        "duration_ns": late["latency_ns"],
    })


@dataclass
class LateWakeups:
    spans: Table  # cpu, start_ns (deadline), duration_ns (latency), cause, cause_detail, trace_events
    causes: Table  # cpu, start_ns, cause, detail, duration_ns
    summary: list[dict]  # summaries["late_wakeups"]: one row per measured CPU


def measuring_threads(timerlat_summaries: list[dict]) -> dict[int, int]:
    """{cpu: tid of its timerlat thread} (the owner of its late wakeups)."""
    owners = {s["cpu"]: s["tid"] for s in timerlat_summaries if s.get("tid")}
    if len(owners) < len(timerlat_summaries):
        raise UsageError("the timerlat summaries do not name their threads (the bundle was "
                         "written by an older noisescope)", "measure again to explain late wakeups")
    return owners


def explain_late_wakeups(series: Table, threshold_ns: int, timerlat_summaries: list[dict],
                         trace: EventSource, coverage: Table,
                         worst: int = WORST_PER_CPU) -> LateWakeups:
    """Attribute every wakeup of `series` (the timerlat table) at least
    `threshold_ns` late; summary rows for every CPU of the summaries."""
    if threshold_ns < 0:
        raise UsageError(f"the trace threshold must not be negative, got {threshold_ns} ns",
                         f"e.g. {option('trace_threshold', '50us')}")
    spans = late_wakeups(series, threshold_ns)
    attribution = attribute(spans, trace, coverage, measuring_threads(timerlat_summaries))
    annotated = attribution.annotate(spans)
    rows = wakeup_summary(annotated, attribution.causes, trace, [s["cpu"] for s in timerlat_summaries],
                          threshold_ns, worst)
    return LateWakeups(annotated, attribution.causes, rows)


def wakeup_summary(spans: Table, causes: Table, trace: EventSource, cpus: list[int],
                   threshold_ns: int, worst: int = WORST_PER_CPU) -> list[dict]:
    """summaries["late_wakeups"]: per CPU, the wakeups explained, their
    latency in all, the causes and the worst ones with their events."""
    rows = attribution_summary(spans, causes, trace, worst, cpus=cpus, count_key=COUNT_KEY,
                               total_key=TOTAL_KEY)
    return [{**row, "threshold_ns": threshold_ns} for row in rows]
