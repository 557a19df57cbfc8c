"""Detour sampler (selfish-detour / Hourglass): every gap between two clock
reads at or above the threshold is a detour; every gap goes into a log-scale
histogram, so nothing is lost when the detour buffer fills."""

from __future__ import annotations

import numpy as np

from .. import _native
from ..diagnostics import Code, Diagnostic
from ..tables import Table
from .base import (
    ProbeContext,
    ProbeResult,
    busy_diagnostics,
    execute,
    overflow_diagnostics,
    thread_statistics,
)
from .summary import detour_summary

# Hourglass counts the gaps above a cut-off (1000 cycles there). A duration means
# the same on the TSC and on the portable clock (CLOCK_MONOTONIC_RAW, 1 ns ticks),
# where 1000 ticks would be 1000 ns but 385 ns on a 2.6 GHz TSC.
HOURGLASS_NS = 1000
DETOUR_RATE_BUDGET = 5_000  # detours per second per CPU the default buffer holds
TOTAL_DETOUR_BUDGET = 4_000_000  # stored detours over all CPUs by default (64 MB)
MIN_DETOUR_BUFFER = 10_000
CALIBRATION_NS = 20_000_000

BUCKET_LOWER_TICKS = np.array(_native.histogram_lower_bounds(), dtype=np.uint64)


def capacity(measured_ns: int, ncpus: int, max_detours: int | None = None) -> int:
    """Detours stored per CPU: max_detours, or what the default budget allows."""
    if max_detours:
        return max_detours
    wanted = int(measured_ns / 1e9 * DETOUR_RATE_BUDGET) + MIN_DETOUR_BUFFER
    return max(MIN_DETOUR_BUFFER, min(wanted, TOTAL_DETOUR_BUDGET // max(ncpus, 1)))


def loop_resolution_ticks(ticks_per_ns: float) -> int:
    """The detour loop's resolution on the calling thread's CPU, in ticks."""
    return _native.loop_resolution_ticks(int(CALIBRATION_NS * ticks_per_ns))


def minimum_threshold_ticks(resolution_ticks: int) -> int:
    """Shortest threshold that can tell a detour from one loop iteration."""
    return max(2 * resolution_ticks, _native.HISTOGRAM_FLOOR_TICKS)


def run(ctx: ProbeContext, *, threshold_ns: int, max_detours: int | None = None) -> ProbeResult:
    clock = ctx.clock
    room = capacity(ctx.schedule.measured_ns, len(ctx.cpus), max_detours)
    threshold_ticks = clock.ticks(threshold_ns)
    specs = [{
        "cpu": cpu,
        "threshold_ticks": threshold_ticks,
        "hourglass_ticks": clock.ticks(HOURGLASS_NS),
        "start": np.empty(room, np.uint64),
        "length": np.empty(room, np.uint64),
        "histogram": np.empty(_native.HISTOGRAM_BINS, np.uint64),
    } for cpu in ctx.cpus]
    done = execute("detour", ctx, specs)

    detours, histograms, summaries = [], [], []
    for spec, result in zip(specs, done.run.samplers, strict=False):
        stored = result["stored"]
        cpu = spec["cpu"]
        duration_ns = clock.duration_ns(spec["length"][:stored])
        detours.append(Table({
            "cpu": np.full(stored, cpu, np.int32),
            "start_ns": clock.timestamp_ns(spec["start"][:stored]),
            "duration_ns": duration_ns,
        }))
        histogram = _histogram_table(cpu, spec["histogram"], clock.ticks_per_ns)
        histograms.append(histogram)
        stats = thread_statistics(result, clock, done.windows)
        summaries.append(detour_summary(stats, result, duration_ns, histogram, threshold_ns,
                                        HOURGLASS_NS, clock.ticks_per_ns))
    notes = (busy_diagnostics("detour", summaries)
             + overflow_diagnostics(summaries, "detours", room)
             + clock_backwards_diagnostics(done.run.samplers))
    tables = {"detours": Table.concat(detours), "gap_histogram": Table.concat(histograms),
              "windows": done.windows, "injections": done.injections}
    for s in summaries:
        # What the injector itself counted; `analysis.groundtruth.match_probe_injections`
        # adds which injections the detours found.
        if done.injections.rows and s["cpu"] in done.injections["cpu"]:
            delivered = next((r["injection"] for r in done.run.samplers
                              if r["cpu"] == s["cpu"] and "injection" in r), None)
            s["injections"] = {"coalesced": int(delivered["coalesced"]) if delivered else 0}
    return ProbeResult("detour", tables, summaries, done.interrupted, notes)


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
