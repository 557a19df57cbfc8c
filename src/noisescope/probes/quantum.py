"""FTQ (fixed time quantum) and FWQ (fixed work quantum).

Both use the same unit of work (a chain of multiply-adds, see work.h).
FTQ counts units per quantum on absolute deadlines, giving a uniform time
series (hence a spectrum); FWQ times a fixed number of units repeatedly,
calibrated so that one sample takes about one quantum on a quiet CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import _native
from ..diagnostics import Diagnostic
from ..errors import UsageError
from ..tables import Table
from ..units import format_duration
from .base import CpuRun, Execution, Probe, ProbeContext, busy_diagnostics
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


@dataclass(frozen=True)
class QuantumSettings:
    quantum_ns: int  # FTQ: the quantum; FWQ: the work a sample takes on a quiet CPU


class _QuantumProbe(Probe):
    Settings = QuantumSettings
    constants = {"unit_iterations": UNIT_ITERATIONS}

    def check_duration(self, settings: QuantumSettings, duration_ns: int) -> None:
        if settings.quantum_ns > duration_ns:
            raise UsageError(f"quantum {format_duration(settings.quantum_ns)} does not fit the "
                             f"duration {format_duration(duration_ns)}",
                             "use a --quantum shorter than --duration, e.g. 1ms")

    def diagnostics(self, ctx: ProbeContext, summaries: list[dict], done: Execution,
                    settings: QuantumSettings) -> list[Diagnostic]:
        return busy_diagnostics(self.name, summaries)


class FtqProbe(_QuantumProbe):
    name = "ftq"
    tables = ("ftq",)

    def capacity(self, settings: QuantumSettings, schedule: WindowSchedule, ncpus: int) -> int:
        return ftq_capacity(schedule, settings.quantum_ns)

    def specs(self, ctx: ProbeContext, settings: QuantumSettings) -> list[dict]:
        room = self.capacity(settings, ctx.schedule, len(ctx.cpus))
        return [{
            "cpu": cpu,
            "quantum_ticks": ctx.clock.ticks(settings.quantum_ns),
            "unit_iters": UNIT_ITERATIONS,
            "start": np.empty(room, np.uint64),
            "work": np.empty(room, np.uint64),
        } for cpu in ctx.cpus]

    def collect(self, run: CpuRun, settings: QuantumSettings) -> tuple[dict[str, Table], dict]:
        stored = run.native["stored"]
        work = run.spec["work"][:stored].astype(np.int64)
        series = Table({
            "cpu": np.full(stored, run.cpu, np.int32),
            "start_ns": run.clock.timestamp_ns(run.spec["start"][:stored]),
            "work": work,
        })
        return {"ftq": series}, ftq_summary(run.stats, work)


class FwqProbe(_QuantumProbe):
    name = "fwq"
    tables = ("fwq",)

    def capacity(self, settings: QuantumSettings, schedule: WindowSchedule, ncpus: int) -> int:
        return fwq_capacity(schedule.measured_ns, settings.quantum_ns)

    def specs(self, ctx: ProbeContext, settings: QuantumSettings) -> list[dict]:
        units = max(1, round(ctx.clock.ticks(settings.quantum_ns) / unit_ticks()))
        room = self.capacity(settings, ctx.schedule, len(ctx.cpus))
        return [{
            "cpu": cpu,
            "work_units": units,
            "unit_iters": UNIT_ITERATIONS,
            "start": np.empty(room, np.uint64),
            "duration": np.empty(room, np.uint64),
        } for cpu in ctx.cpus]

    def collect(self, run: CpuRun, settings: QuantumSettings) -> tuple[dict[str, Table], dict]:
        stored = run.native["stored"]
        duration_ns = run.clock.duration_ns(run.spec["duration"][:stored])
        series = Table({
            "cpu": np.full(stored, run.cpu, np.int32),
            "start_ns": run.clock.timestamp_ns(run.spec["start"][:stored]),
            "duration_ns": duration_ns,
        })
        summary = {**fwq_summary(run.stats, duration_ns), "work_units": run.spec["work_units"],
                   "overflow": int(run.native["overflow"])}
        return {"fwq": series}, summary


FTQ = FtqProbe()
FWQ = FwqProbe()
