"""Detour sampler (selfish-detour / Hourglass): every gap between two clock
reads at or above the threshold is a detour; every gap goes into a log-scale
histogram, so nothing is lost when the detour buffer fills."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import _native
from ..clock import MeasurementClock
from ..diagnostics import Code, Diagnostic
from ..errors import UsageError, option
from ..tables import Table
from ..units import format_duration
from .base import (
    CpuRun,
    Execution,
    Probe,
    ProbeContext,
    ProbeResult,
    busy_diagnostics,
    overflow_diagnostics,
)
from .schedule import WindowSchedule
from .summary import detour_summary

# Hourglass counts the gaps above a cut-off (1000 cycles there). A duration means
# the same on the TSC and on the portable clock (CLOCK_MONOTONIC_RAW, 1 ns ticks),
# where 1000 ticks would be 1000 ns but 385 ns on a 2.6 GHz TSC.
HOURGLASS_NS = 1000
DETOUR_RATE = 5_000  # detours per second per CPU a ring is sized for (a busy VM makes ~1,300)
CALIBRATION_NS = 20_000_000

BUCKET_LOWER_TICKS = np.array(_native.histogram_lower_bounds(), dtype=np.uint64)


def loop_resolution_ticks(ticks_per_ns: float) -> int:
    """The detour loop's resolution on the calling thread's CPU, in ticks."""
    return _native.loop_resolution_ticks(int(CALIBRATION_NS * ticks_per_ns))


def minimum_threshold_ticks(resolution_ticks: int) -> int:
    """Shortest threshold that can tell a detour from one loop iteration."""
    return max(2 * resolution_ticks, _native.HISTOGRAM_FLOOR_TICKS)


@dataclass(frozen=True)
class DetourSettings:
    threshold_ns: int
    max_detours: int | None = None


class DetourProbe(Probe):
    name = "detour"
    Settings = DetourSettings
    tables = ("detours", "gap_histogram")
    constants = {"hourglass_ns": HOURGLASS_NS}
    ring = ("start", "length")
    samples_bounded = False  # the machine makes detours at whatever rate it does

    def check_duration(self, settings: DetourSettings, duration_ns: int) -> None:
        if settings.threshold_ns >= duration_ns:
            raise UsageError(f"the duration {format_duration(duration_ns)} is not longer than "
                             f"the detour threshold {format_duration(settings.threshold_ns)}: no "
                             f"detour could be measured", f"use a longer {option('duration_ns')}, e.g. 10s")

    def check_clock(self, settings: DetourSettings, clock: MeasurementClock) -> None:
        resolution = loop_resolution_ticks(clock.ticks_per_ns)
        minimum = minimum_threshold_ticks(resolution)
        if clock.ticks(settings.threshold_ns) < minimum:
            floor_ns = minimum / clock.ticks_per_ns
            raise UsageError(
                f"threshold {format_duration(settings.threshold_ns)} is below what the loop can "
                f"resolve (one iteration takes {resolution} clock ticks = "
                f"{format_duration(resolution / clock.ticks_per_ns)})",
                f"use {option('threshold_ns', format_duration(floor_ns * 1.2, precision=2).replace(' ', ''))}"
                f" or more")

    def expected_samples(self, settings: DetourSettings, schedule: WindowSchedule,
                         ncpus: int) -> int:
        return math.ceil(schedule.measured_ns / 1e9 * DETOUR_RATE)

    def stored_limit(self, settings: DetourSettings) -> int | None:
        return settings.max_detours

    def specs(self, ctx: ProbeContext, settings: DetourSettings) -> list[dict]:
        room = self.ring_size(settings, ctx.schedule, len(ctx.cpus))
        return [{
            "cpu": cpu,
            "threshold_ticks": ctx.clock.ticks(settings.threshold_ns),
            "hourglass_ticks": ctx.clock.ticks(HOURGLASS_NS),
            "start": np.empty(room, np.uint64),
            "length": np.empty(room, np.uint64),
            "histogram": np.empty(_native.HISTOGRAM_BINS, np.uint64),
        } for cpu in ctx.cpus]

    def collect(self, run: CpuRun, settings: DetourSettings) -> tuple[dict, dict]:
        clock, spec, native = run.clock, run.spec, run.native

        def rows(start: np.ndarray, length: np.ndarray) -> Table:
            return Table({"cpu": np.full(len(start), run.cpu, np.int32),
                          "start_ns": clock.timestamp_ns(start),
                          "duration_ns": clock.duration_ns(length)})

        detours = run.samples(self.ring, rows)  # type: ignore[arg-type]
        histogram = _histogram_table(run.cpu, spec["histogram"], clock.ticks_per_ns)
        summary = detour_summary(run.stats, native, detours.column("duration_ns"), histogram,
                                 settings.threshold_ns, HOURGLASS_NS, clock.ticks_per_ns)
        injections = run.execution.injections
        if injections.rows and run.cpu in injections["cpu"]:
            # What the injector itself counted; `analysis.groundtruth.match_probe_injections`
            # adds which injections the detours found.
            delivered = native.get("injection")
            summary["injections"] = {"coalesced": int(delivered["coalesced"]) if delivered else 0}
        return {"detours": detours.part, "gap_histogram": histogram}, summary

    def diagnostics(self, ctx: ProbeContext, summaries: list[dict], done: Execution,
                    settings: DetourSettings) -> list[Diagnostic]:
        return (busy_diagnostics(self.name, summaries)
                + overflow_diagnostics(summaries, "detours", settings.max_detours,
                                       self.ring_size(settings, ctx.schedule, len(ctx.cpus)), done)
                + clock_backwards_diagnostics(done.run.samplers))


DETOUR = DetourProbe()


def run(ctx: ProbeContext, *, threshold_ns: int, max_detours: int | None = None) -> ProbeResult:
    """The detour probe alone (beside a workload in `cluster bsp`, or in tests)."""
    return DETOUR.run(ctx, DetourSettings(threshold_ns, max_detours))


def clock_backwards_diagnostics(samplers: list[dict]) -> list[Diagnostic]:
    """A sampler's clock read less than the reading before it (a TSC that is
    not stable or a hypervisor adjusting it): the core leaves such a step out of
    the detours and the histogram instead of taking it for a gap of 2^64 ticks."""
    return [Diagnostic(Code.CLOCK, f"detour: CPU {r['cpu']}: the clock stepped back "
                                   f"{r['clock_backwards']} times; those steps are not counted "
                                   f"as detours or loop iterations")
            for r in samplers if r["clock_backwards"]]


def _histogram_table(cpu: int, counts: np.ndarray, ticks_per_ns: float) -> Table:
    nonzero = np.flatnonzero(counts)
    lower = BUCKET_LOWER_TICKS[nonzero]
    upper = np.append(BUCKET_LOWER_TICKS[1:], np.uint64(2**64 - 1))[nonzero]
    return Table({
        "cpu": np.full(len(nonzero), cpu, np.int32),
        "lower_ticks": lower,
        "upper_ticks": upper,
        "lower_ns": np.floor(lower / ticks_per_ns).astype(np.int64),
        "upper_ns": np.minimum(np.ceil(upper.astype(np.float64) / ticks_per_ns), 2.0**62)
        .astype(np.int64),
        "count": counts[nonzero].astype(np.int64),
    })
