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
MAX_RECORDS = 20_000_000
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
    from ..privileges import can_use_fifo
    from .base import ProbeContext, execute
    from .schedule import plan_windows

    facts = read_host_facts()
    check_cpus((injection.cpu,), facts)
    priority = 99 if can_use_fifo(99) else 0
    schedule, _ = plan_windows(duration_ns or UNTIL_INTERRUPTED_NS, rt=False)
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
        count=table.rows,
        overflow=int(overflow),
        achieved_rate_hz=(len(starts) - 1) / span * 1e9 if span else 0.0,
        mean_length_ns=float(table["duration_ns"].mean()) if table.rows else 0.0,
        max_length_ns=int(table["duration_ns"].max()) if table.rows else 0,
        fifo=priority > 0,
        interrupted=done.interrupted,
    )


UNTIL_INTERRUPTED_NS = 100 * 365 * 24 * 3600 * 1_000_000_000
