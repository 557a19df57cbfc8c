"""Timer latency (the cyclictest measurement): a thread per CPU sleeps to
periodic absolute CLOCK_MONOTONIC deadlines and records how late it woke.

Unlike cyclictest, periods the thread overslept entirely are counted as
`missed` (a sample whose latency is L >= interval skipped floor(L / interval)
deadlines). Every latency goes into a histogram of 1 us buckets up to
`histogram_ns` (beyond it: an overflow count); the series, when kept, stores
each latency with its wakeup time on the same timeline as detours and trace
events.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UsageError
from ..tables import Table
from ..units import format_duration
from .base import ProbeContext, ProbeResult, execute, overflow_diagnostics, thread_statistics
from .summary import timerlat_summary

DEFAULT_INTERVAL_NS = 1_000_000  # cyclictest's default
DEFAULT_HISTOGRAM_NS = 10_000_000  # 10,000 buckets of 1 us (80 kB per CPU)
BUCKET_NS = 1_000
MAX_HISTOGRAM_NS = 1_000_000_000
MIN_INTERVAL_NS = 10_000  # below this the thread does little but wake up
TOTAL_SERIES_BUDGET = 4_000_000  # stored samples over all CPUs by default (64 MB)


def check_interval(interval_ns: int) -> None:
    if interval_ns < MIN_INTERVAL_NS:
        raise UsageError(f"interval {format_duration(interval_ns)} is too short",
                         f"use --interval {MIN_INTERVAL_NS // 1000}us or more")


def check_histogram(histogram_ns: int) -> None:
    if not BUCKET_NS <= histogram_ns <= MAX_HISTOGRAM_NS:
        raise UsageError(f"histogram limit {format_duration(histogram_ns)} is out of range",
                         "use 1us to 1s, e.g. --histogram 1000 (us, as cyclictest -h)")


def series_capacity(measured_ns: int, interval_ns: int, ncpus: int) -> int:
    """Room for every sample of the run, within the memory budget."""
    expected = math.ceil(measured_ns / interval_ns) + 16
    return min(expected, TOTAL_SERIES_BUDGET // max(ncpus, 1))


def run(ctx: ProbeContext, *, interval_ns: int = DEFAULT_INTERVAL_NS,
        histogram_ns: int = DEFAULT_HISTOGRAM_NS, keep_series: bool = True) -> ProbeResult:
    check_interval(interval_ns)
    check_histogram(histogram_ns)
    buckets = histogram_ns // BUCKET_NS
    capacity = series_capacity(ctx.schedule.measured_ns, interval_ns, len(ctx.cpus)) \
        if keep_series else 0
    specs = [{
        "cpu": cpu,
        "interval_ns": interval_ns,
        "histogram": np.empty(buckets, np.uint64),
        "latency": np.empty(capacity, np.uint64),
        "wakeup": np.empty(capacity, np.uint64),
    } for cpu in ctx.cpus]
    done = execute("timerlat", ctx, specs)

    clock = ctx.clock
    series, histograms, summaries = [], [], []
    for spec, result in zip(specs, done.run.samplers, strict=False):
        cpu, stored = spec["cpu"], result["stored"]
        latency_ns = spec["latency"][:stored].astype(np.int64)
        series.append(Table({
            "cpu": np.full(stored, cpu, np.int32),
            "wakeup_ns": clock.timestamp_ns(spec["wakeup"][:stored]),
            "latency_ns": latency_ns,
        }))
        histogram = histogram_table(cpu, spec["histogram"], result["histogram_overflow"],
                                    result["max_ns"])
        histograms.append(histogram)
        stats = thread_statistics(result, clock, done.windows)
        complete = keep_series and result["overflow"] == 0
        summaries.append(timerlat_summary(
            stats, interval_ns=interval_ns, samples=result["samples"], missed=result["missed"],
            min_ns=result["min_ns"], max_ns=result["max_ns"], sum_ns=result["sum_ns"],
            histogram=histogram, histogram_limit_ns=histogram_ns,
            histogram_overflow=result["histogram_overflow"],
            latencies_ns=latency_ns if complete else None,
            stored=stored, overflow=result["overflow"]))
    # No machine_busy check: a sleeper's run delay is its wakeup path, the
    # latency being measured, not time other tasks took.
    notes = overflow_diagnostics(summaries, "timerlat latencies", capacity)
    tables = {"timerlat": Table.concat(series), "timerlat_histogram": Table.concat(histograms),
              "windows": done.windows, "injections": done.injections}
    return ProbeResult("timerlat", tables, summaries, done.interrupted, notes)


def histogram_table(cpu: int, counts: np.ndarray, overflow: int, max_ns: int | None,
                    bucket_ns: int = BUCKET_NS) -> Table:
    """Non-empty buckets (1 us unless said) as rows [lower_ns, upper_ns); the
    overflow bucket, if any, runs from the limit to just past the largest latency."""
    nonzero = np.flatnonzero(counts)
    lower = nonzero.astype(np.int64) * bucket_ns
    upper = lower + bucket_ns
    count = counts[nonzero].astype(np.int64)
    if overflow:
        limit = len(counts) * bucket_ns
        top = max(int(max_ns) + 1, limit + bucket_ns) if max_ns is not None else limit + bucket_ns
        lower, upper = np.append(lower, limit), np.append(upper, top)
        count = np.append(count, overflow)
    return Table({
        "cpu": np.full(len(count), cpu, np.int32),
        "lower_ns": lower.astype(np.int64),
        "upper_ns": upper.astype(np.int64),
        "count": count.astype(np.int64),
    })
