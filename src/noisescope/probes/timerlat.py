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
from dataclasses import dataclass

import numpy as np

from ..clock import MeasurementClock
from ..diagnostics import Diagnostic
from ..errors import UsageError, option
from ..tables import Table
from ..units import format_duration
from .base import CpuRun, Execution, Probe, ProbeContext, overflow_diagnostics
from .schedule import WindowSchedule
from .summary import timerlat_summary

DEFAULT_INTERVAL_NS = 1_000_000  # cyclictest's default
DEFAULT_HISTOGRAM_NS = 10_000_000  # 10,000 buckets of 1 us (80 kB per CPU)
BUCKET_NS = 1_000
MAX_HISTOGRAM_NS = 1_000_000_000
MIN_INTERVAL_NS = 10_000  # below this the thread does little but wake up


def check_interval(interval_ns: int) -> None:
    if interval_ns < MIN_INTERVAL_NS:
        raise UsageError(f"interval {format_duration(interval_ns)} is too short",
                         f"use {option('interval_ns', f'{MIN_INTERVAL_NS // 1000}us')} or more")


def check_histogram(histogram_ns: int) -> None:
    if not BUCKET_NS <= histogram_ns <= MAX_HISTOGRAM_NS:
        raise UsageError(f"histogram limit {format_duration(histogram_ns)} is out of range",
                         f"use 1us to 1s, e.g. {option('histogram_ns', '1000')} (us, as "
                         f"cyclictest -h)")


def expected_wakeups(measured_ns: int, interval_ns: int) -> int:
    return math.ceil(measured_ns / interval_ns) + 16


@dataclass(frozen=True)
class TimerlatSettings:
    interval_ns: int = DEFAULT_INTERVAL_NS
    histogram_ns: int = DEFAULT_HISTOGRAM_NS
    keep_series: bool = True  # store every latency, not only the histogram


class TimerlatProbe(Probe):
    name = "timerlat"
    Settings = TimerlatSettings
    sleeps = True
    default = False  # `noisescope timerlat` is its home
    tables = ("timerlat", "timerlat_histogram")
    ring = ("latency", "wakeup")

    def check_duration(self, settings: TimerlatSettings, duration_ns: int) -> None:
        if settings.interval_ns > duration_ns:
            raise UsageError(f"timerlat interval {format_duration(settings.interval_ns)} is "
                             f"longer than the duration {format_duration(duration_ns)}: no wakeup "
                             f"would be measured", f"use a shorter {option('interval_ns')} or a "
                             f"longer {option('duration_ns')}")

    def check_windows(self, settings: TimerlatSettings, schedule: WindowSchedule) -> None:
        if settings.interval_ns > schedule.runtime_ns:
            raise UsageError(f"timerlat interval {format_duration(settings.interval_ns)} is "
                             f"longer than a measuring window "
                             f"({format_duration(schedule.runtime_ns)})",
                             f"use a shorter {option('interval_ns')} or a longer "
                             f"{option('runtime_ns')}")

    def check_clock(self, settings: TimerlatSettings, clock: MeasurementClock) -> None:
        check_interval(settings.interval_ns)
        check_histogram(settings.histogram_ns)

    def expected_samples(self, settings: TimerlatSettings, schedule: WindowSchedule,
                         ncpus: int) -> int:
        if not settings.keep_series:
            return 0
        return expected_wakeups(schedule.measured_ns, settings.interval_ns)

    def specs(self, ctx: ProbeContext, settings: TimerlatSettings) -> list[dict]:
        buckets = settings.histogram_ns // BUCKET_NS
        room = self.ring_size(settings, ctx.schedule, len(ctx.cpus))
        return [{
            "cpu": cpu,
            "interval_ns": settings.interval_ns,
            "histogram": np.empty(buckets, np.uint64),
            "latency": np.empty(room, np.uint64),
            "wakeup": np.empty(room, np.uint64),
        } for cpu in ctx.cpus]

    def collect(self, run: CpuRun, settings: TimerlatSettings) -> tuple[dict[str, Table], dict]:
        spec, native = run.spec, run.native
        stored = native["stored"]

        def rows(latency: np.ndarray, wakeup: np.ndarray) -> Table:
            return Table({"cpu": np.full(len(latency), run.cpu, np.int32),
                          "wakeup_ns": run.clock.timestamp_ns(wakeup),
                          "latency_ns": latency.astype(np.int64)})

        series = run.samples(self.ring, rows)  # type: ignore[arg-type]
        histogram = histogram_table(run.cpu, spec["histogram"], native["histogram_overflow"],
                                    native["max_ns"])
        complete = settings.keep_series and native["overflow"] == 0
        summary = timerlat_summary(
            run.stats, interval_ns=settings.interval_ns, samples=native["samples"],
            missed=native["missed"], min_ns=native["min_ns"], max_ns=native["max_ns"],
            sum_ns=native["sum_ns"], histogram=histogram, histogram_limit_ns=settings.histogram_ns,
            histogram_overflow=native["histogram_overflow"],
            latencies_ns=series.column("latency_ns") if complete else None,
            stored=stored, overflow=native["overflow"])
        return {"timerlat": series.part, "timerlat_histogram": histogram}, summary

    def diagnostics(self, ctx: ProbeContext, summaries: list[dict], done: Execution,
                    settings: TimerlatSettings) -> list[Diagnostic]:
        # No machine_busy check: a sleeper's run delay is its wakeup path, the
        # latency being measured, not time other tasks took.
        return overflow_diagnostics(summaries, "timerlat latencies", None,
                                    self.ring_size(settings, ctx.schedule, len(ctx.cpus)), done)


TIMERLAT = TimerlatProbe()


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
