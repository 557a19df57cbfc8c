"""FTQ (fixed time quantum) and FWQ (fixed work quantum).

Both use the same unit of work (a chain of multiply-adds, see work.h).
FTQ counts units per quantum on absolute deadlines, giving a uniform time
series (hence a spectrum); FWQ times a fixed number of units repeatedly,
calibrated so that one sample takes about one quantum on a quiet CPU.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _native
from ..tables import Table
from .base import ProbeContext, ProbeResult, busy_diagnostics, execute, thread_statistics
from .schedule import WindowSchedule
from .summary import ftq_summary, fwq_summary

UNIT_ITERATIONS = 32  # about 30 ns of work per unit on a 2-3 GHz core
CALIBRATION_UNITS = 1_000
CALIBRATION_REPETITIONS = 30


def unit_ticks() -> float:
    """Ticks one unit of work takes on an undisturbed core (best of several)."""
    best = _native.min_work_ticks(CALIBRATION_UNITS, UNIT_ITERATIONS, CALIBRATION_REPETITIONS)
    return best / CALIBRATION_UNITS


def ftq_capacity(schedule: WindowSchedule, quantum_ns: int) -> int:
    """Quanta stored per CPU: every quantum of every window."""
    return math.floor(schedule.runtime_ns / quantum_ns) * schedule.windows + 1


def fwq_capacity(measured_ns: int, work_ns: int) -> int:
    """Samples stored per CPU, with room for samples shorter than work_ns."""
    return math.ceil(measured_ns / work_ns * 1.25) + 64


def run_ftq(ctx: ProbeContext, *, quantum_ns: int) -> ProbeResult:
    clock = ctx.clock
    capacity = ftq_capacity(ctx.schedule, quantum_ns)
    specs = [{
        "cpu": cpu,
        "quantum_ticks": clock.ticks(quantum_ns),
        "unit_iters": UNIT_ITERATIONS,
        "start": np.empty(capacity, np.uint64),
        "work": np.empty(capacity, np.uint64),
    } for cpu in ctx.cpus]
    done = execute("ftq", ctx, specs)
    series, summaries = [], []
    for spec, result in zip(specs, done.run.samplers, strict=False):
        stored = result["stored"]
        work = spec["work"][:stored].astype(np.int64)
        series.append(Table({
            "cpu": np.full(stored, spec["cpu"], np.int32),
            "start_ns": clock.timestamp_ns(spec["start"][:stored]),
            "work": work,
        }))
        summaries.append(ftq_summary(thread_statistics(result, clock, done.windows), work))
    return ProbeResult("ftq", {"ftq": Table.concat(series), "windows": done.windows,
                               "injections": done.injections},
                       summaries, done.interrupted, busy_diagnostics("ftq", summaries))


def run_fwq(ctx: ProbeContext, *, work_ns: int) -> ProbeResult:
    clock = ctx.clock
    units = max(1, round(clock.ticks(work_ns) / unit_ticks()))
    capacity = fwq_capacity(ctx.schedule.measured_ns, work_ns)
    specs = [{
        "cpu": cpu,
        "work_units": units,
        "unit_iters": UNIT_ITERATIONS,
        "start": np.empty(capacity, np.uint64),
        "duration": np.empty(capacity, np.uint64),
    } for cpu in ctx.cpus]
    done = execute("fwq", ctx, specs)
    series, summaries = [], []
    for spec, result in zip(specs, done.run.samplers, strict=False):
        stored = result["stored"]
        duration_ns = clock.duration_ns(spec["duration"][:stored])
        series.append(Table({
            "cpu": np.full(stored, spec["cpu"], np.int32),
            "start_ns": clock.timestamp_ns(spec["start"][:stored]),
            "duration_ns": duration_ns,
        }))
        stats = thread_statistics(result, clock, done.windows)
        summaries.append({**fwq_summary(stats, duration_ns), "work_units": units,
                          "overflow": int(result["overflow"])})
    return ProbeResult("fwq", {"fwq": Table.concat(series), "windows": done.windows,
                               "injections": done.injections},
                       summaries, done.interrupted, busy_diagnostics("fwq", summaries))
