"""Running injected noise of known rate and length (the `Injection` value is in
`injection`): the ground truth for tests and a way to disturb an experiment on
purpose (Ferreira-style injection).

signal mode: a POSIX timer signals the sampler thread on the CPU and the
handler busy-waits (it needs a sampler, or the idle target thread of
`noisescope inject`). thread mode: a SCHED_FIFO thread on the CPU wakes at
the rate and spins. Both record every injection's own start and end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..clock import measurement_clock
from ..errors import UsageError
from ..host import check_cpus, read_host_facts
from ..prechecks import injector_priority
from ..tables import Table
from .base import ProbeContext, check_errors, execute, injection_rows
from .injection import Injection
from .native import NativeHandle
from .schedule import plan_windows


@dataclass(frozen=True)
class InjectionOutcome:
    count: int
    overflow: int
    achieved_rate_hz: float
    mean_length_ns: float
    max_length_ns: int
    fifo: bool
    interrupted: bool


def inject(injection: Injection, duration_ns: int | None,
           on_start: Callable[[], None] | None = None) -> InjectionOutcome:
    """Run one injection on its own (no sampler) until duration_ns or Ctrl-C.

    Signal mode needs a thread to signal: an idle target thread pinned to
    the CPU (SCHED_FIFO when permitted, so that it preempts whatever runs
    there) sleeps and spins in its handler."""
    facts = read_host_facts()
    check_cpus((injection.cpu,), facts)
    priority = injector_priority()
    schedule = plan_windows(duration_ns, rt=False)[0] if duration_ns else unbounded_schedule()
    clock = measurement_clock(facts.tsc_flags)
    samplers = [{"cpu": injection.cpu}] if injection.mode == "signal" else []
    if on_start:
        on_start()
    ctx = ProbeContext(tuple(s["cpu"] for s in samplers), schedule, clock, priority,
                       (injection,), priority)
    done = execute("idle", ctx, samplers)
    table = done.injections
    starts = np.sort(table["start_ns"]) if table.rows else np.array([], np.int64)
    span = float(starts[-1] - starts[0]) if len(starts) > 1 else 0.0
    overflow = sum(r.get("injection", r).get("overflow", 0)
                   for r in done.run.samplers + done.run.injectors)
    return InjectionOutcome(
        count=table.rows + int(overflow),
        overflow=int(overflow),
        achieved_rate_hz=(len(starts) - 1) / span * 1e9 if span else 0.0,
        mean_length_ns=float(table["duration_ns"].mean()) if table.rows else 0.0,
        max_length_ns=int(table["duration_ns"].max()) if table.rows else 0,
        fifo=priority > 0,
        interrupted=done.interrupted,
    )


UNTIL_INTERRUPTED_NS = 10 * 365 * 24 * 3600 * 1_000_000_000


def unbounded_schedule():
    """One window that lasts until the run is stopped (Ctrl-C or the stop flag)."""
    return plan_windows(UNTIL_INTERRUPTED_NS, rt=False, runtime_ns=UNTIL_INTERRUPTED_NS,
                        period_ns=UNTIL_INTERRUPTED_NS)[0]


class BackgroundInjection:
    """Thread-mode injections running beside something else (a workload) from
    start() until stop(); every injection is recorded as usual.

    The native runner fixes its start time only once the injector threads
    have touched their buffers, so start() asks for a start a little ahead
    and returns when that time has come: the workload then starts with the
    noise already on."""

    LEAD_NS = 50_000_000

    def __init__(self, injections: tuple[Injection, ...], clock, max_duration_ns: int,
                 priority: int = 0):
        for injection in injections:
            if injection.mode != "thread":
                raise UsageError(
                    f"injection {injection.describe()} needs a sampler thread to signal",
                    "inject beside a workload in thread mode, e.g. 1kHz:20us@cpu1/thread")
        self.injections = injections
        self.clock = clock
        self.max_duration_ns = max_duration_ns
        self.priority = priority
        self._natives: list[dict] = []
        self._handle = None

    def start(self) -> None:
        self._natives = [i.native(self.clock.ticks_per_ns, self.max_duration_ns, self.priority)
                         for i in self.injections]
        schedule = unbounded_schedule()
        begin = time.monotonic_ns() + self.LEAD_NS
        self._handle = NativeHandle("idle", [], self._natives, schedule, self.clock.ticks_per_ns,
                                    start_mono_ns=begin)
        time.sleep(max(0, begin - time.monotonic_ns()) / 1e9)

    def stop(self):
        """Stop the injectors; returns (injections Table, overflow count, interrupted)."""
        if self._handle is None:
            return Table(), 0, False
        run = self._handle.stop()
        self._handle = None
        check_errors([{**r, "cpu": n["cpu"]} for r, n in zip(run.injectors, self._natives,
                                                             strict=True)], "injector")
        table = Table.concat(injection_rows(self.clock, n["cpu"], "thread", n, r["stored"])
                             for n, r in zip(self._natives, run.injectors, strict=True))
        return table, sum(int(r["overflow"]) for r in run.injectors), run.interrupted

    def __enter__(self) -> BackgroundInjection:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._handle is not None:
            self._handle.stop()
            self._handle = None
