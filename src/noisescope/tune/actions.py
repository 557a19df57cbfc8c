"""The reversible changes a tuning plan proposes for IRQs and tasks, each
journalled on disk before it is made (knobs.KnobJournal: restored by the
journal's `restore()` in `finally`, and by `noisescope cleanup` after a
SIGKILL) and read back after it: a change the kernel did not take as asked is
put back at once and refused (NotApplied), so the machine is as before.

Every runtime action of a plan is an `Action`: how it is made (through the
journal) and what makes it persistent (a line of a file for the bundle's
snippets). `ACTIONS` maps a plan entry's `action` name to it; look one up
with `action_for(entry)`. `snippet_files()` gathers the lines into the files
of a bundle's `persistent/` directory, `kernel_cmdline()` the boot advice.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from ..host import HostRoot
from ..knobs import KnobJournal, read_knob
from ..units import format_cpu_list, parse_cpu_list
from .plan import BOOT, RUNTIME, PlanEntry


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
    # Whether `--measure` can try it: False for a change the measuring threads
    # would have to be moved into first (a cpuset partition keeps every task
    # outside it off the target CPUs, the sampler included).
    measurable: bool = True


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


IRQ_SCRIPT, TASK_SCRIPT, KERNEL_CMDLINE = "irq-affinity.sh", "task-affinity.sh", "kernel-cmdline.txt"
# The first lines of each snippet file: what it is and how to install it.
SNIPPET_HEADERS = {
    IRQ_SCRIPT: (
        "#!/bin/sh\n"
        "# IRQ affinity that noisescope tune measured to help. IRQ numbers may change between\n"
        "# boots, so each IRQ is found by its handler's name (/proc/irq/N/NAME). Install:\n"
        "#   install -m 755 irq-affinity.sh /usr/local/sbin/noisescope-irq-affinity.sh and run it\n"
        "#   at boot from a systemd oneshot unit: [Service] Type=oneshot\n"
        "#   ExecStart=/usr/local/sbin/noisescope-irq-affinity.sh, [Install]\n"
        "#   WantedBy=multi-user.target. irqbalance, if it runs, must leave these IRQs alone\n"
        "#   (IRQBALANCE_BANNED_CPULIST with the target CPUs).\n"),
    TASK_SCRIPT: (
        "#!/bin/sh\n"
        "# Task affinity that noisescope tune measured to help. A task of a systemd service gets\n"
        "# a drop-in with CPUAffinity= (kept across restarts and boots; then: systemctl\n"
        "# daemon-reload and restart the unit); any other task a taskset line, which holds only\n"
        "# for that process of this boot (make whatever starts it set the affinity). Run as root.\n"),
    KERNEL_CMDLINE: (
        "# Boot parameters noisescope tune advises (it never edits boot configuration): add them\n"
        "# to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub)\n"
        "# and reboot.\n"),
}


def irq_name(entry: PlanEntry) -> str:
    """The IRQ's handler name, as the plan wrote it in the source ("IRQ 36 virtio1-req.0")."""
    return entry.source.removeprefix(f"IRQ {entry.irq} ")


def _make_irq(journal: KnobJournal, entry: PlanEntry, housekeeping: tuple[int, ...]) -> None:
    move_irq(journal, entry.irq, housekeeping)


def _persist_irq(entry: PlanEntry, housekeeping: tuple[int, ...]) -> tuple[str, str]:
    name, keep = shlex.quote(irq_name(entry)), format_cpu_list(housekeeping)
    return IRQ_SCRIPT, (f'for handler in /proc/irq/*/{name}; do [ -e "$handler" ] && '
                        f'echo {keep} > "${{handler%/*}}/smp_affinity_list"; done  '
                        f"# IRQ {entry.irq} in this boot\n")


def _make_task(journal: KnobJournal, entry: PlanEntry, housekeeping: tuple[int, ...]) -> None:
    move_task(journal, entry.pid, housekeeping)


def owning_service(pid: int, root: str = "/") -> str | None:
    """The systemd service whose cgroup holds process `pid` (cgroup v2: the line
    0::/system.slice/NAME.service), or None."""
    for line in (HostRoot(root).text(f"/proc/{pid}/cgroup") or "").splitlines():
        path = line.split(":", 2)[-1]
        services = [part for part in path.split("/") if part.endswith(".service")]
        if services:
            return services[-1]
    return None


def _persist_task(entry: PlanEntry, housekeeping: tuple[int, ...]) -> tuple[str, str]:
    keep = format_cpu_list(housekeeping)
    service = owning_service(entry.pid)
    if service is not None:
        folder = shlex.quote(f"/etc/systemd/system/{service}.d")
        return TASK_SCRIPT, (f"mkdir -p {folder} && printf '[Service]\\nCPUAffinity={keep}\\n' > "
                             f"{folder}/90-noisescope.conf  # {entry.source}\n")
    return TASK_SCRIPT, f"taskset -a -p -c {keep} {entry.pid}  # {entry.source}: this boot only\n"


ACTIONS: dict[str, Action] = {
    "irq-affinity": Action(_make_irq, _persist_irq),
    "task-affinity": Action(_make_task, _persist_task),
}


@cache
def _registry() -> tuple[dict[str, Action], dict[str, str]]:
    """Every action and snippet header: these and the system settings' (settings.py
    builds on this module, so it is imported once both exist)."""
    from .settings import SETTING_ACTIONS, SETTING_SNIPPET_HEADERS
    return {**ACTIONS, **SETTING_ACTIONS}, {**SNIPPET_HEADERS, **SETTING_SNIPPET_HEADERS}


def action_for(entry: PlanEntry) -> Action | None:
    """How to carry out a plan entry; None for those that are not runtime changes
    noisescope can make."""
    return _registry()[0].get(entry.action) if entry.applies == RUNTIME else None


def snippet_files(lines: list[tuple[str, str]]) -> dict[str, str]:
    """(file, text) pairs gathered per file, each file under its header (a header
    given without its line end gets one)."""
    files: dict[str, str] = {}
    for name, text in lines:
        if name not in files:
            header = _registry()[1].get(name, "")
            files[name] = header + ("\n" if header and not header.endswith("\n") else "")
        files[name] += text
    return files


def kernel_cmdline(plan: list[PlanEntry]) -> str | None:
    """The boot parameters of the plan's boot entries with their CPUs
    ("nohz_full=1,3 rcu_nocbs=1,3"), or None if it advises none."""
    cpus: dict[str, set[int]] = {}
    for entry in plan:
        if entry.applies == BOOT and entry.action.startswith("boot:") and entry.cpu is not None:
            cpus.setdefault(entry.action.removeprefix("boot:"), set()).add(entry.cpu)
    if not cpus:
        return None
    return " ".join(f"{name}={format_cpu_list(sorted(c))}" for name, c in cpus.items()) + "\n"
