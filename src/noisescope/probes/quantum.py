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
from ..errors import UsageError, option
from ..tables import Table
from ..units import format_duration
from .base import CpuRun, Execution, Probe, ProbeContext, busy_diagnostics, overflow_diagnostics
from .schedule import WindowSchedule
from .summary import Samples, ftq_summary, fwq_summary

UNIT_ITERATIONS = 32  # about 30 ns of work per unit on a 2-3 GHz core
CALIBRATION_UNITS = 1_000
CALIBRATION_REPETITIONS = 30


def unit_ticks() -> float:
    """Ticks one unit of work takes on an undisturbed core (best of several)."""
    best = _native.min_work_ticks(CALIBRATION_UNITS, UNIT_ITERATIONS, CALIBRATION_REPETITIONS)
    return best / CALIBRATION_UNITS


def ftq_capacity(schedule: WindowSchedule, quantum_ns: int) -> int:
    """Quanta a CPU stores: every quantum of every window."""
    return math.floor(schedule.runtime_ns / quantum_ns) * schedule.windows + 1


def fwq_capacity(measured_ns: int, work_ns: int) -> int:
    """Samples a CPU stores at most, with room for samples shorter than work_ns."""
    return math.ceil(measured_ns / work_ns * 1.25) + 64


@dataclass(frozen=True)
class QuantumSettings:
    quantum_ns: int  # FTQ: the quantum; FWQ: the work a sample takes on a quiet CPU


class _QuantumProbe(Probe):
    """FTQ and FWQ: per CPU a series of samples (a start and one value each)
    from the same unit of work."""

    Settings = QuantumSettings
    constants = {"unit_iterations": UNIT_ITERATIONS}
    buffer: str  # the native buffer of each sample's value
    column: str  # ... and its column in the probe's table (named as the probe)

    def check_duration(self, settings: QuantumSettings, duration_ns: int) -> None:
        if settings.quantum_ns > duration_ns:
            raise UsageError(f"quantum {format_duration(settings.quantum_ns)} does not fit the "
                             f"duration {format_duration(duration_ns)}",
                             f"use a {option('quantum_ns')} shorter than {option('duration_ns')}, "
                             f"e.g. 1ms")

    def work(self, ctx: ProbeContext, settings: QuantumSettings) -> dict:
        """The spec keys that say how much work a sample is (the same on every CPU)."""
        raise NotImplementedError

    def specs(self, ctx: ProbeContext, settings: QuantumSettings) -> list[dict]:
        work = self.work(ctx, settings)
        room = self.ring_size(settings, ctx.schedule, len(ctx.cpus))
        return [{
            "cpu": cpu,
            **work,
            "unit_iters": UNIT_ITERATIONS,
            "start": np.empty(room, np.uint64),
            self.buffer: np.empty(room, np.uint64),
        } for cpu in ctx.cpus]

    def values(self, run: CpuRun, raw: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def summary(self, run: CpuRun, values: Samples) -> dict:
        raise NotImplementedError

    def collect(self, run: CpuRun, settings: QuantumSettings) -> tuple[dict, dict]:
        def rows(start: np.ndarray, raw: np.ndarray) -> Table:
            return Table({"cpu": np.full(len(start), run.cpu, np.int32),
                          "start_ns": run.clock.timestamp_ns(start),
                          self.column: self.values(run, raw)})

        series = run.samples(self.ring, rows)  # type: ignore[arg-type]
        return {self.name: series.part}, {**self.summary(run, series.column(self.column)),
                                          "overflow": int(run.native["overflow"]),
                                          "stored_before_loss": int(run.native["stored_before_loss"])}

    def diagnostics(self, ctx: ProbeContext, summaries: list[dict], done: Execution,
                    settings: QuantumSettings) -> list[Diagnostic]:
        return busy_diagnostics(self.name, summaries) + overflow_diagnostics(
            summaries, f"{self.name} samples", None,
            self.ring_size(settings, ctx.schedule, len(ctx.cpus)), done)


class FtqProbe(_QuantumProbe):
    name = "ftq"
    tables = ("ftq",)
    buffer = column = "work"  # units of work done in each quantum
    ring = ("start", "work")

    def expected_samples(self, settings: QuantumSettings, schedule: WindowSchedule,
                         ncpus: int) -> int:
        return ftq_capacity(schedule, settings.quantum_ns)

    def work(self, ctx: ProbeContext, settings: QuantumSettings) -> dict:
        return {"quantum_ticks": ctx.clock.ticks(settings.quantum_ns)}

    def values(self, run: CpuRun, raw: np.ndarray) -> np.ndarray:
        return raw.astype(np.int64)

    def summary(self, run: CpuRun, values: Samples) -> dict:
        return ftq_summary(run.stats, values)


class FwqProbe(_QuantumProbe):
    name = "fwq"
    tables = ("fwq",)
    buffer, column = "duration", "duration_ns"  # how long each sample's work took
    ring = ("start", "duration")

    def expected_samples(self, settings: QuantumSettings, schedule: WindowSchedule,
                         ncpus: int) -> int:
        return fwq_capacity(schedule.measured_ns, settings.quantum_ns)

    def work(self, ctx: ProbeContext, settings: QuantumSettings) -> dict:
        return {"work_units": max(1, round(ctx.clock.ticks(settings.quantum_ns) / unit_ticks()))}

    def values(self, run: CpuRun, raw: np.ndarray) -> np.ndarray:
        return run.clock.duration_ns(raw)

    def summary(self, run: CpuRun, values: Samples) -> dict:
        return {**fwq_summary(run.stats, values), "work_units": run.spec["work_units"]}


FTQ = FtqProbe()
FWQ = FwqProbe()
