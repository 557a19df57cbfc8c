"""Injected noise of known rate and length: the ground truth for tests and a
way to disturb an experiment on purpose (Ferreira-style injection).

signal mode: a POSIX timer signals the sampler thread on the CPU and the
handler busy-waits (it needs a sampler, or the idle target thread of
`noisescope inject`). thread mode: a SCHED_FIFO thread on the CPU wakes at
the rate and spins. Both record every injection's own start and end.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import UsageError
from ..units import format_duration, format_rate, parse_noise_spec

MODES = ("signal", "thread")
MAX_RECORDS = 1_000_000  # per injection (16 MB); later ones are counted as overflow
_SPEC = re.compile(r"^(?P<noise>[^@]+)@(?:cpu)?(?P<cpu>\d+)(?:/(?P<mode>\w+))?$")


@dataclass(frozen=True)
class Injection:
    cpu: int
    rate_hz: float
    length_ns: int
    mode: str = "signal"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"unknown injection mode {self.mode!r}", "use signal or thread")

    @classmethod
    def parse(cls, text: str, *, default_mode: str = "signal") -> Injection:
        """'1kHz:20us@cpu1' or '1kHz:20us@1/thread'."""
        match = _SPEC.match(text.strip())
        if not match:
            raise UsageError(f"cannot read injection {text!r}",
                             "write RATE:LENGTH@cpuN[/signal|/thread], e.g. 1kHz:20us@cpu1")
        rate, length = parse_noise_spec(match.group("noise"))
        return cls(int(match.group("cpu")), rate, length, match.group("mode") or default_mode)

    @property
    def period_ns(self) -> int:
        return int(round(1e9 / self.rate_hz))

    @property
    def fraction(self) -> float:
        return self.length_ns / self.period_ns

    def describe(self) -> str:
        return (f"{format_rate(self.rate_hz)} x {format_duration(self.length_ns)} on CPU "
                f"{self.cpu} ({self.mode})")

    def native(self, ticks_per_ns: float, elapsed_ns: int, priority: int = 0) -> dict:
        expected = math.ceil(elapsed_ns / self.period_ns * 1.05) + 64
        capacity = min(expected, MAX_RECORDS)
        return {
            "cpu": self.cpu,
            "priority": priority,
            "period_ns": self.period_ns,
            "length_ticks": max(1, int(round(self.length_ns * ticks_per_ns))),
            "start": np.empty(capacity, np.uint64),
            "end": np.empty(capacity, np.uint64),
        }

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Injection:
        return cls(**data)


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
    from ..clock import measurement_clock
    from ..host import check_cpus, read_host_facts
    from ..prechecks import injector_priority
    from .base import ProbeContext, execute
    from .schedule import plan_windows

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
    from .schedule import plan_windows

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
        import time

        from .native import NativeHandle

        self._natives = [i.native(self.clock.ticks_per_ns, self.max_duration_ns, self.priority)
                         for i in self.injections]
        schedule = unbounded_schedule()
        begin = time.monotonic_ns() + self.LEAD_NS
        self._handle = NativeHandle("idle", [], self._natives, schedule, self.clock.ticks_per_ns,
                                    start_mono_ns=begin)
        time.sleep(max(0, begin - time.monotonic_ns()) / 1e9)

    def stop(self):
        """Stop the injectors; returns (injections Table, overflow count, interrupted)."""
        from ..tables import Table
        from .base import check_errors, injection_rows

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
