"""Where and how a workload runs: CPU set, spread vs packed, SCHED_FIFO, core scheduling.

A Placement is what the user asked for; `resolve()` turns it into concrete
CPUs for this machine (from its host facts) and checks, before any run,
that every part can be applied. The child gets its placement by inheritance:
it is spawned from a short-lived thread that first moved itself to the CPUs,
switched to SCHED_FIFO and took a core-scheduling cookie, so the workload's
first instruction already runs placed; nothing in the parent changes.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass

from . import interrupts
from .errors import UsageError, option
from .host import HostFacts, check_cpus, default_cpus
from .privileges import can_use_fifo
from .units import format_cpu_list

LAYOUTS = ("packed", "spread")

# prctl(2) constants (linux/prctl.h, linux/pid.h)
PR_SCHED_CORE = 62
PR_SCHED_CORE_CREATE = 1
PIDTYPE_PID = 0


@dataclass(frozen=True)
class Placement:
    cpus: tuple[int, ...] | None = None  # explicit CPU set
    ncpus: int | None = None  # or: this many CPUs, chosen by `layout`
    layout: str = "packed"  # packed: fill one NUMA node (socket) first; spread: round-robin
    fifo_priority: int = 0  # SCHED_FIFO priority of the workload, 0: SCHED_OTHER
    core_scheduling: bool = False  # a core-scheduling cookie of its own (PR_SCHED_CORE)

    def __post_init__(self) -> None:
        if self.cpus is not None and self.ncpus is not None:
            raise UsageError("give either cpus (a CPU list) or ncpus (a number of CPUs), not both",
                             f"e.g. {option('cpus', '0-3')}, or {option('ncpus', '4')} "
                             f"{option('layout', 'spread')}")
        if self.layout not in LAYOUTS:
            raise UsageError(f"unknown layout {self.layout!r}", "use packed or spread")
        if self.ncpus is not None and self.ncpus <= 0:
            raise UsageError(f"number of CPUs (ncpus) must be positive, got {self.ncpus}", "e.g. 4")
        if not 0 <= self.fifo_priority <= 99:
            raise UsageError(f"SCHED_FIFO priority {self.fifo_priority} is out of range",
                             "use 1-99")

    def describe(self) -> str:
        parts = []
        if self.cpus is not None:
            parts.append(f"CPUs {format_cpu_list(self.cpus)}")
        if self.ncpus is not None:
            parts.append(f"{self.ncpus} CPUs {self.layout}")
        if self.fifo_priority:
            parts.append(f"SCHED_FIFO {self.fifo_priority}")
        if self.core_scheduling:
            parts.append("core-scheduling cookie")
        return ", ".join(parts) or "unplaced"

    def to_dict(self) -> dict:
        data = asdict(self)
        data["cpus"] = list(self.cpus) if self.cpus is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Placement:
        cpus = data.get("cpus")
        return cls(**{**data, "cpus": tuple(cpus) if cpus is not None else None})


@dataclass(frozen=True)
class ResolvedPlacement:
    """A placement made concrete for this machine."""

    cpus: tuple[int, ...] | None  # None: wherever the scheduler puts it
    fifo_priority: int
    core_scheduling: bool
    note: str | None = None  # e.g. spread and packed coincide here

    def spawn(self, start: Callable[[], int]) -> int:
        """Call `start` (which spawns the child and returns its pid) so that
        the child inherits this placement."""
        if self.cpus is None and not self.core_scheduling and not self.fifo_priority:
            return start()
        result: dict[str, object] = {}
        done = threading.Event()

        def placed() -> None:
            try:
                if self.cpus is not None:
                    os.sched_setaffinity(0, self.cpus)  # this thread only
                if self.fifo_priority:
                    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.fifo_priority))
                if self.core_scheduling:
                    create_core_cookie()
                result["pid"] = start()
            except BaseException as error:  # re-raised in the calling thread
                result["error"] = error
            finally:
                done.set()

        threading.Thread(target=placed, name="noisescope-spawn").start()
        stop = interrupts.wait_through(done)  # (the child started or not, never unknown)
        if "error" in result:
            raise result["error"]  # type: ignore[misc]
        pid: int = result["pid"]  # type: ignore[assignment]
        if stop is not None:  # a child nobody will hear of: ended here
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise stop
        return pid


def domains(facts: HostFacts) -> list[tuple[int, ...]]:
    """The CPU groups spread/packed choose between: NUMA nodes if there are
    several, else sockets, else one group. Within a group one thread of
    every core comes before the second threads (SMT siblings)."""
    if len(facts.numa_nodes) > 1:
        groups = list(facts.node_cpus.values())
    elif len(facts.packages) > 1:
        groups = list(facts.package_cpus.values())
    else:
        groups = [facts.online]
    thread_rank = {}
    for siblings in facts.sibling_groups:
        for rank, cpu in enumerate(siblings):
            thread_rank[cpu] = rank
    return [tuple(sorted(g, key=lambda c: (thread_rank.get(c, 0), c))) for g in groups]


def choose_cpus(ncpus: int, layout: str, groups: list[tuple[int, ...]],
                usable: set[int]) -> tuple[int, ...]:
    groups = [tuple(c for c in g if c in usable) for g in groups]
    available = sum(len(g) for g in groups)
    if ncpus > available:
        raise UsageError(f"{ncpus} CPUs requested but only {available} are online and allowed",
                         f"use {option('ncpus', str(available))} or fewer")
    if layout == "packed":
        ordered = [c for g in groups for c in g]
    else:
        ordered = [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]
    return tuple(sorted(ordered[:ncpus]))


def resolve(placement: Placement, facts: HostFacts) -> ResolvedPlacement:
    """Concrete CPUs for this machine; raises UsageError for what cannot be applied."""
    note = None
    if placement.cpus is not None:
        cpus: tuple[int, ...] | None = check_cpus(placement.cpus, facts)
    elif placement.ncpus is not None:
        groups = domains(facts)
        cpus = choose_cpus(placement.ncpus, placement.layout, groups, set(default_cpus(facts)))
        if len(groups) == 1:
            note = (f"this machine has one NUMA node and one socket: {placement.layout} "
                    f"placement is the same as any other choice of {placement.ncpus} CPUs")
    else:
        cpus = None
    if placement.fifo_priority and not can_use_fifo(placement.fifo_priority):
        raise UsageError(f"SCHED_FIFO priority {placement.fifo_priority} is not permitted for "
                         f"this process", f"run as root (or with CAP_SYS_NICE) or drop "
                         f"{option('fifo_priority')}")
    if placement.core_scheduling:
        check_core_scheduling()
    return ResolvedPlacement(cpus, placement.fifo_priority, placement.core_scheduling, note)


def _prctl(*args: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    if libc.prctl(*args) == 0:
        return 0
    return ctypes.get_errno()


def create_core_cookie() -> None:
    """Give the calling thread a new core-scheduling cookie (children inherit it)."""
    error = _prctl(PR_SCHED_CORE, PR_SCHED_CORE_CREATE, 0, PIDTYPE_PID, 0)
    if error:
        raise core_scheduling_error(error)


def core_scheduling_error(error: int) -> UsageError:
    if error == errno.EINVAL:
        why = "this kernel has no core scheduling (CONFIG_SCHED_CORE) or the CPU has no SMT"
    elif error == errno.EPERM:
        why = "not permitted (needs ptrace access to the task)"
    else:
        why = os.strerror(error)
    return UsageError(f"core scheduling is not available: prctl(PR_SCHED_CORE) failed: {why}",
                      "run on a kernel 5.14+ built with CONFIG_SCHED_CORE on an SMT machine, or "
                      "drop core scheduling")


def check_core_scheduling() -> None:
    """Try to create a cookie on a throwaway thread (the caller keeps none)."""
    failure: list[UsageError] = []

    def attempt() -> None:
        try:
            create_core_cookie()
        except UsageError as error:
            failure.append(error)

    trial = threading.Thread(target=attempt, name="noisescope-core-sched-check")
    trial.start()
    trial.join()
    if failure:
        raise failure[0]
