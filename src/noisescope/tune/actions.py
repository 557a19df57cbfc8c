"""The reversible changes a tuning plan proposes for IRQs and tasks, each
journalled on disk before it is made (knobs.KnobJournal: restored by the
journal's `restore()` in `finally`, and by `noisescope cleanup` after a
SIGKILL) and read back after it: a change the kernel did not take as asked is
put back at once and refused (NotApplied), so the machine is as before.

Every runtime action of a plan is an `Action`: how it is made (through the
journal) and what makes it persistent (a line of a file for the bundle's
snippets). `ACTIONS` maps a plan entry's `action` name to it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..host import HostRoot
from ..knobs import KnobJournal, read_knob
from ..units import format_cpu_list, parse_cpu_list
from .plan import PlanEntry


class NotApplied(Exception):
    """A change that could not be made, or not as asked; nothing stays changed."""


@dataclass(frozen=True)
class Action:
    """How a plan entry's action is carried out.

    make(journal, entry, housekeeping): the change, journalled and read back;
    raises NotApplied (nothing left changed) when it cannot be made.
    persist(entry, housekeeping): (file name, text) to add to that file of the
    bundle's persistent snippets, e.g. ("sysctl.d/90-noisescope.conf",
    "vm.stat_interval = 10\n"); the file's first line names what installs it.
    """

    make: Callable[[KnobJournal, PlanEntry, tuple[int, ...]], None]
    persist: Callable[[PlanEntry, tuple[int, ...]], tuple[str, str]]


def move_irq(journal: KnobJournal, irq: int, cpus: tuple[int, ...], root: str = "/") -> None:
    """Route IRQ `irq` to `cpus` (its smp_affinity_list), read back."""
    path = HostRoot(root).path(f"/proc/irq/{irq}/smp_affinity_list")
    wanted = format_cpu_list(cpus)
    try:
        journal.change(path, wanted)
    except OSError as error:  # EIO: a managed IRQ, whose affinity the kernel keeps
        raise NotApplied(f"IRQ {irq}: the kernel refused affinity {wanted} "
                         f"({error.strerror or error})") from None
    now = read_knob(path)
    if set(parse_cpu_list(now)) != set(cpus):
        journal.revert(path)
        raise NotApplied(f"IRQ {irq}: its affinity read {now} after {wanted} was written "
                         f"(put back)")


def move_task(journal: KnobJournal, pid: int, cpus: tuple[int, ...]) -> list[int]:
    """Restrict every thread of process `pid` to `cpus`, each read back; the
    thread ids moved. A refusal (a per-CPU kernel thread, a cpuset that does
    not allow `cpus`) puts back the threads already moved. Threads the process
    starts later inherit the affinity of the thread that starts them."""
    try:
        tids = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        raise NotApplied(f"process {pid} is gone") from None
    moved: list[int] = []
    try:
        for tid in tids:
            try:
                journal.change_affinity(tid, cpus)
            except ProcessLookupError:
                continue  # the thread ended meanwhile
            moved.append(tid)
            now = os.sched_getaffinity(tid)
            if now != set(cpus):
                raise NotApplied(f"task {tid} of process {pid}: its affinity read "
                                 f"{format_cpu_list(now)} after {format_cpu_list(cpus)} was set")
    except (OSError, NotApplied) as error:
        for tid in moved:
            journal.revert(f"/proc/{tid}")
        if isinstance(error, NotApplied):
            raise NotApplied(f"{error} (put back)") from None
        raise NotApplied(f"process {pid}: the kernel refused affinity {format_cpu_list(cpus)} "
                         f"({error.strerror or error})") from None
    if not moved:
        raise NotApplied(f"process {pid} is gone")
    return moved
