"""When probes measure: windows of `runtime` every `period`.

Without --rt the windows are back to back (1 s each, so Ctrl-C and progress
stay responsive). With --rt a spinning SCHED_FIFO thread must leave the
kernel some time: by default it measures 900 ms of every 1000 ms, and never
more than the kernel's RT budget (sched_rt_runtime_us), so RT throttling
cannot fall inside a window. Time between windows is not measured.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..diagnostics import Code, Diagnostic
from ..errors import UsageError, option
from ..units import SECOND, format_duration

DEFAULT_PERIOD_NS = SECOND
DEFAULT_RT_RUNTIME_NS = 900_000_000
# Keep this much of the RT budget unused, so that other RT work (and timer
# slack) cannot push the sampler into throttling.
RT_BUDGET_MARGIN_NS = 20_000_000


@dataclass(frozen=True)
class WindowSchedule:
    runtime_ns: int
    period_ns: int
    windows: int
    last_runtime_ns: int

    @property
    def measured_ns(self) -> int:
        return (self.windows - 1) * self.runtime_ns + self.last_runtime_ns

    @property
    def elapsed_ns(self) -> int:
        return (self.windows - 1) * self.period_ns + self.last_runtime_ns

    def native(self, start_mono_ns: int, ticks_per_ns: float) -> dict:
        return {**asdict(self), "start_mono_ns": start_mono_ns, "ticks_per_ns": ticks_per_ns}

    def to_dict(self) -> dict:
        return asdict(self)


def rt_budget_ns(rt_runtime_us: int | None, rt_period_us: int | None) -> int | None:
    """Longest time per DEFAULT_PERIOD_NS an RT task may run, or None if unlimited."""
    if rt_runtime_us is None or rt_period_us is None or rt_runtime_us < 0 or rt_period_us <= 0:
        return None
    return int(rt_runtime_us / rt_period_us * DEFAULT_PERIOD_NS)


def plan_windows(duration_ns: int, *, rt: bool, runtime_ns: int | None = None,
                 period_ns: int | None = None, rt_budget: int | None = None,
                 ) -> tuple[WindowSchedule, list[Diagnostic]]:
    if duration_ns <= 0:
        raise UsageError("duration must be greater than zero", f"e.g. {option('duration_ns', '10s')}")
    period = period_ns or DEFAULT_PERIOD_NS
    runtime = runtime_ns or (min(DEFAULT_RT_RUNTIME_NS, period) if rt else period)
    if runtime > period:
        raise UsageError(
            f"window runtime {format_duration(runtime)} is longer than its period "
            f"{format_duration(period)}", f"use {option('runtime_ns')} <= {option('period_ns')}")
    notes: list[Diagnostic] = []
    if rt and rt_budget is not None:
        allowed = int((rt_budget - RT_BUDGET_MARGIN_NS) * period / DEFAULT_PERIOD_NS)
        if runtime > allowed:
            if allowed <= 0:
                raise UsageError("the kernel's RT budget leaves no time for a SCHED_FIFO sampler",
                                 f"raise /proc/sys/kernel/sched_rt_runtime_us or drop "
                                 f"{option('rt')}")
            notes.append(Diagnostic(
                Code.RT_THROTTLING,
                f"RT throttling is active: windows shortened from {format_duration(runtime)} "
                f"to {format_duration(allowed)} per {format_duration(period)}"))
            runtime = allowed
    windows = max(1, math.ceil(duration_ns / runtime))
    last = duration_ns - (windows - 1) * runtime
    return WindowSchedule(runtime, period, windows, last), notes
