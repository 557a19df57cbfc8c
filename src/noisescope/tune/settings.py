"""The system settings a tuning plan proposes (the entries with cpu None), as
`Action`s: each a reversible runtime change made through the KnobJournal
(journalled on disk before it is made, restored in `finally` and by
`noisescope cleanup` after a SIGKILL) and read back after it; a setting the
kernel did not take as asked is put back at once and refused (NotApplied),
as is one that cannot be made (no such knob on this kernel, not root).

`SETTING_ACTIONS` maps the plan's action names to them; `setting_actions(root)`
makes the same set for another file-system root (the unit tests' trees of
fake knob files). A system entry's target CPUs are its `cpus` (a CPU list),
else the online CPUs not kept for housekeeping.

What each one changes (and what makes it persistent, `persist`):
- workqueue-cpumask: the unbound workqueues' cpumask <- the housekeeping CPUs
  (boot: workqueue.unbound_cpus= from Linux 6.6, else a tmpfiles.d line);
- vm.stat_interval (10 s), timer-migration (off), rt-throttling (off: a
  runaway SCHED_FIFO task can then hang its CPU), watchdogs (the targets out
  of kernel.watchdog_cpumask; where there is no mask, or it would be empty,
  both lockup watchdogs off): sysctl.d lines;
- thp: transparent huge pages and their defrag from `always` to `madvise`
  (khugepaged then only collapses the regions that asked for it);
- idle-states: each target's PM QoS resume latency (the per-CPU knob
  pm_qos_resume_latency_us) <- 20 us, which keeps the CPU out of idle states
  slower to leave; without it, a request on /dev/cpu_dma_latency held open by
  the journal (for all CPUs) until the restore, or the process's end;
- governor (performance on the targets), turbo (off), clocksource (tsc);
- cpuset-partition: a cgroup noisescope-tune-PID under the cgroup v2 root
  with the targets as an `isolated` partition (the cpuset controller enabled
  in the root's subtree_control for it where it was not): the scheduler keeps
  every other task off them and does not balance load across them. The
  cgroup is journalled as a created directory; removing it gives the CPUs
  back. The measuring threads then need to run inside that cgroup to use the
  targets at all. The partition rewrites the CPU affinity of every task left
  outside (before Linux 6.2: to all the CPUs that are left, pins and isolcpus
  alike, and its removal does not undo that), so the affinities of all
  movable tasks are journalled as they were first, and put back after it.
- irqbalance: advised only (a service noisescope does not stop): refused
  with the command to run, persisted as its configuration's banned CPUs.
Boot-only `smt` stays with smt.py (per experiment configuration).
"""

from __future__ import annotations

import errno
import os
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from ..host import HostRoot, cgroup2_with_cpuset
from ..knobs import KnobJournal, read_knob, write_knob
from ..pmqos import DEVICE as CPU_DMA_LATENCY
from ..pmqos import cpu_latency_request
from ..system import DEEP_IDLE_LATENCY_US, STAT_INTERVAL_S, WORKQUEUE_CPUMASK
from ..units import cpumask_text, format_cpu_list, parse_cpu_list
from .actions import KERNEL_CMDLINE, Action, NotApplied
from .plan import PlanEntry, read_task

# The bundle's snippet files the settings add lines to (besides actions.KERNEL_CMDLINE),
# with their first lines: what each is and how to install it.
SYSCTL = "sysctl.d/90-noisescope.conf"
TMPFILES = "tmpfiles.d/noisescope.conf"
CMDLINE = KERNEL_CMDLINE
IRQBALANCE = "irqbalance.conf"
SETTING_SNIPPET_HEADERS = {
    SYSCTL: "# Settings noisescope tune kept: copy to /etc/sysctl.d/ (sysctl --system applies "
            "it now).\n",
    TMPFILES: "# Kernel settings noisescope tune kept: copy to /etc/tmpfiles.d/ "
              "(systemd-tmpfiles --create applies it now, and at every boot).\n",
    IRQBALANCE: "# For irqbalance: add to /etc/default/irqbalance (or /etc/sysconfig/irqbalance), "
                "then restart irqbalance.\n",
}

SYSCTL_DIR = "/proc/sys"
THP = "/sys/kernel/mm/transparent_hugepage"
CPU = "/sys/devices/system/cpu"
CLOCKSOURCE = "/sys/devices/system/clocksource/clocksource0"
PARTITION = "cpuset.cpus.partition"
UNBOUND_CPUS_SINCE = (6, 6)  # the kernel that reads workqueue.unbound_cpus= at boot


def _sysctl_path(name: str) -> str:
    return f"{SYSCTL_DIR}/{name.replace('.', '/')}"


def _why(error: OSError) -> str:
    reason = error.strerror or str(error)
    return f"{reason}; needs root" if error.errno in (errno.EACCES, errno.EPERM) else reason


def _chosen(text: str) -> str:
    """The [selected] word of a choice file (THP's `always [madvise] never`)."""
    found = re.search(r"\[([^\]]+)\]", text)
    return found.group(1) if found else text


def _same_mask(now: str, value: str) -> bool:
    return int(now.replace(",", ""), 16) == int(value.replace(",", ""), 16)


def _same_cpus(now: str, value: str) -> bool:
    return set(parse_cpu_list(now)) == set(parse_cpu_list(value))


def _equal(now: str, value: str) -> bool:
    return now == value


class _Writes:
    """The knob writes of one action, all or none: each journalled and read
    back; a refusal puts back the ones already made (latest first)."""

    def __init__(self, journal: KnobJournal, action: str):
        self.journal, self.action, self.made = journal, action, []

    def set(self, path: Path, value: str, *, restore: str | None = None,
            same: Callable[[str, str], bool] = _equal, reads: Callable[[str], str] = str) -> None:
        """Write `value` to the knob at `path`; `reads` turns what it reads into
        what is compared with `value` (and is the original to restore)."""
        if not path.exists():
            self.refuse(f"{path} does not exist (this kernel does not have it)")
        try:
            if restore is None:
                restore = reads(read_knob(path))
            self.journal.change(path, value, restore)
        except OSError as error:
            self.refuse(f"cannot write {value} to {path} ({_why(error)})")
        self.made.append(str(path))
        try:
            now = reads(read_knob(path))
        except OSError as error:
            self.refuse(f"cannot read {path} back ({_why(error)})")
        if not same(now, value):
            self.refuse(f"{path} read {now!r} after {value!r} was written")

    def refuse(self, reason: str) -> NoReturn:
        """Put back what this action changed and raise NotApplied."""
        self.journal.revert(*reversed(self.made))
        put_back = " (put back)" if self.made else ""
        self.made = []
        raise NotApplied(f"{self.action}: {reason}{put_back}")


def targets_of(entry: PlanEntry, housekeeping: tuple[int, ...], host: HostRoot) -> tuple[int, ...]:
    """The CPUs an entry is for: its `cpus`, else its CPU, else the online CPUs not kept."""
    if entry.cpus:
        return parse_cpu_list(entry.cpus)
    if entry.cpu is not None:
        return (entry.cpu,)
    online = parse_cpu_list(host.text(f"{CPU}/online") or "")
    return tuple(c for c in online if c not in housekeeping)


def _sysctl_line(name: str, value: str) -> tuple[str, str]:
    return SYSCTL, f"{name} = {value}\n"


def _tmpfiles_lines(writes: dict[str, str]) -> tuple[str, str]:
    return TMPFILES, "".join(f"w {path} - - - - {value}\n" for path, value in writes.items())


def _sysctl_action(name: str, value: str) -> Callable[[str], Action]:
    """The action that sets one sysctl to `value`."""

    def of(root: str) -> Action:
        host = HostRoot(root)

        def make(journal: KnobJournal, entry: PlanEntry, housekeeping: tuple[int, ...]) -> None:
            _Writes(journal, entry.action).set(host.path(_sysctl_path(name)), value)

        return Action(make, lambda entry, housekeeping: _sysctl_line(name, value))

    return of


# -- workqueue cpumask -----------------------------------------------------------------

def _kernel_at_least(host: HostRoot, version: tuple[int, int]) -> bool:
    found = re.match(r"(\d+)\.(\d+)", host.text(f"{SYSCTL_DIR}/kernel/osrelease") or "")
    return bool(found) and (int(found.group(1)), int(found.group(2))) >= version


def _workqueue(root: str) -> Action:
    host = HostRoot(root)

    def make(journal, entry, housekeeping):
        _Writes(journal, entry.action).set(host.path(WORKQUEUE_CPUMASK),
                                           cpumask_text(housekeeping), same=_same_mask)

    def persist(entry, housekeeping):
        if _kernel_at_least(host, UNBOUND_CPUS_SINCE):
            return CMDLINE, f"workqueue.unbound_cpus={format_cpu_list(housekeeping)}\n"
        return _tmpfiles_lines({WORKQUEUE_CPUMASK: cpumask_text(housekeeping)})

    return Action(make, persist)


# -- watchdogs -------------------------------------------------------------------------

def _watchdog_mask(host: HostRoot, housekeeping: tuple[int, ...]) -> str | None:
    """watchdog_cpumask without the CPUs not kept (None: no such knob, or none would stay)."""
    now = host.text(_sysctl_path("kernel.watchdog_cpumask"))
    if now is None:
        return None
    kept = set(parse_cpu_list(now)) & set(housekeeping)
    return format_cpu_list(kept) if kept else None


WATCHDOGS_OFF = ("kernel.watchdog", "kernel.nmi_watchdog")


def _watchdogs(root: str) -> Action:
    host = HostRoot(root)

    def make(journal, entry, housekeeping):
        writes = _Writes(journal, entry.action)
        mask = _watchdog_mask(host, housekeeping)
        if mask is not None:
            writes.set(host.path(_sysctl_path("kernel.watchdog_cpumask")), mask,
                       same=_same_cpus)
            return
        for name in WATCHDOGS_OFF:
            if host.path(_sysctl_path(name)).exists():
                writes.set(host.path(_sysctl_path(name)), "0")
        if not writes.made:
            writes.refuse("no lockup watchdog knob in /proc/sys/kernel")

    def persist(entry, housekeeping):
        mask = _watchdog_mask(host, housekeeping)
        if mask is not None:
            return _sysctl_line("kernel.watchdog_cpumask", mask)
        return SYSCTL, "".join(_sysctl_line(name, "0")[1] for name in WATCHDOGS_OFF)

    return Action(make, persist)


# -- RT throttling ---------------------------------------------------------------------

def _rt_throttling(root: str) -> Action:
    host = HostRoot(root)
    name = "kernel.sched_rt_runtime_us"

    def make(journal, entry, housekeeping):
        _Writes(journal, entry.action).set(host.path(_sysctl_path(name)), "-1")

    def persist(entry, housekeeping):
        return SYSCTL, ("# no RT throttling: a runaway SCHED_FIFO/RR task can then hang its "
                        "CPU for good\n" + _sysctl_line(name, "-1")[1])

    return Action(make, persist)


# -- transparent huge pages ------------------------------------------------------------

THP_FILES = ("enabled", "defrag")


def _thp_wanted(host: HostRoot) -> dict[str, str]:
    """THP file -> its setting with `always` made `madvise` (others stay as they are)."""
    wanted = {}
    for name in THP_FILES:
        now = host.text(f"{THP}/{name}")
        if now is not None:
            wanted[f"{THP}/{name}"] = "madvise" if _chosen(now) == "always" else _chosen(now)
    return wanted


def _thp(root: str) -> Action:
    host = HostRoot(root)

    def make(journal, entry, housekeeping):
        writes = _Writes(journal, entry.action)
        wanted = _thp_wanted(host)
        if not wanted:
            writes.refuse(f"{THP} does not exist (a kernel without transparent huge pages)")
        for path, value in wanted.items():
            if _chosen(host.text(path) or "") != value:
                writes.set(host.path(path), value, reads=_chosen)
        if not writes.made:
            writes.refuse("transparent huge pages are not `always` already")

    return Action(make, lambda entry, housekeeping: _tmpfiles_lines(_thp_wanted(host)))


# -- idle states -----------------------------------------------------------------------

def _resume_latency(cpu: int) -> str:
    return f"{CPU}/cpu{cpu}/power/pm_qos_resume_latency_us"


def _dma_latency_now(device: Path) -> int:
    """The CPU latency bound in force now (what /dev/cpu_dma_latency reads)."""
    with open(device, "rb") as file:
        return struct.unpack("i", file.read(4))[0]


def _idle_states(root: str) -> Action:
    host = HostRoot(root)
    bound = str(DEEP_IDLE_LATENCY_US)

    def make(journal, entry, housekeeping):
        writes = _Writes(journal, entry.action)
        cpus = targets_of(entry, housekeeping, host)
        if all(host.path(_resume_latency(cpu)).exists() for cpu in cpus):
            for cpu in cpus:
                writes.set(host.path(_resume_latency(cpu)), bound)
            return
        # No per-CPU knob: a request for every CPU, which lasts while the file is open.
        device = host.path(CPU_DMA_LATENCY)
        said = journal.hold(entry.action, cpu_latency_request(DEEP_IDLE_LATENCY_US, str(device)))
        if str(said).startswith("skipped"):
            journal.revert(entry.action)
            writes.refuse(said.removeprefix("skipped: "))
        try:
            now = _dma_latency_now(device)
        except OSError as error:
            journal.revert(entry.action)
            writes.refuse(f"cannot read {device} back ({_why(error)})")
        if now > DEEP_IDLE_LATENCY_US:
            journal.revert(entry.action)
            writes.refuse(f"{device} reads {now} us while {bound} us is requested")

    def persist(entry, housekeeping):
        cpus = targets_of(entry, housekeeping, host)
        if all(host.path(_resume_latency(cpu)).exists() for cpu in cpus):
            return _tmpfiles_lines({_resume_latency(cpu): bound for cpu in cpus})
        return CMDLINE, "intel_idle.max_cstate=1 processor.max_cstate=1\n"

    return Action(make, persist)


# -- frequency: governor, turbo --------------------------------------------------------

def _governor_files(host: HostRoot, cpus: tuple[int, ...]) -> dict[str, str]:
    """scaling_governor of each target with cpufreq that offers `performance`."""
    files = {}
    for cpu in cpus:
        base = f"{CPU}/cpu{cpu}/cpufreq"
        if "performance" in (host.text(f"{base}/scaling_available_governors") or "").split():
            files[f"{base}/scaling_governor"] = "performance"
    return files


def _governor(root: str) -> Action:
    host = HostRoot(root)

    def make(journal, entry, housekeeping):
        writes = _Writes(journal, entry.action)
        files = _governor_files(host, targets_of(entry, housekeeping, host))
        if not files:
            writes.refuse("no target CPU has a cpufreq governor offering performance")
        for path, value in files.items():
            writes.set(host.path(path), value)

    return Action(make, lambda entry, housekeeping: _tmpfiles_lines(
        _governor_files(host, targets_of(entry, housekeeping, host))))


TURBO_OFF = ((f"{CPU}/intel_pstate/no_turbo", "1"), (f"{CPU}/cpufreq/boost", "0"))


def _turbo_knob(host: HostRoot) -> tuple[str, str] | None:
    return next(((path, off) for path, off in TURBO_OFF if host.path(path).exists()), None)


def _turbo(root: str) -> Action:
    host = HostRoot(root)

    def make(journal, entry, housekeeping):
        writes = _Writes(journal, entry.action)
        knob = _turbo_knob(host)
        if knob is None:
            writes.refuse("no turbo control (intel_pstate/no_turbo, cpufreq/boost)")
        writes.set(host.path(knob[0]), knob[1])

    def persist(entry, housekeeping):
        knob = _turbo_knob(host)
        return _tmpfiles_lines(dict([knob]) if knob else {})

    return Action(make, persist)


# -- clocksource -----------------------------------------------------------------------

def _clocksource(root: str) -> Action:
    host = HostRoot(root)

    def make(journal, entry, housekeeping):
        writes = _Writes(journal, entry.action)
        if "tsc" not in (host.text(f"{CLOCKSOURCE}/available_clocksource") or "").split():
            writes.refuse("the TSC is not an available clocksource (if it is in fact reliable, "
                          "boot with tsc=reliable)")
        writes.set(host.path(f"{CLOCKSOURCE}/current_clocksource"), "tsc")

    return Action(make, lambda entry, housekeeping: (CMDLINE, "clocksource=tsc\n"))


# -- irqbalance (advised only) ---------------------------------------------------------

def _irqbalance(root: str) -> Action:
    host = HostRoot(root)

    def make(journal, entry, housekeeping):
        raise NotApplied(f"{entry.action}: a service noisescope does not stop; run "
                         f"`systemctl stop irqbalance`, or ban CPUs "
                         f"{format_cpu_list(targets_of(entry, housekeeping, host))} in its "
                         f"configuration")

    return Action(make, lambda entry, housekeeping: (IRQBALANCE, (
        f"IRQBALANCE_BANNED_CPULIST={format_cpu_list(targets_of(entry, housekeeping, host))}\n")))


# -- cpuset partition ------------------------------------------------------------------

def partition_cgroup(cgroup_root: str, pid: int | None = None) -> str:
    """The cgroup a run's partition is made as (noisescope-tune-PID)."""
    return f"{cgroup_root}/noisescope-tune-{pid or os.getpid()}"


def _movable_tasks(host: HostRoot) -> list[int]:
    """Every task (thread) whose affinity can be set (not a per-CPU kernel thread)."""
    tids = []
    for pid in filter(str.isdigit, host.listdir("/proc")):
        for tid in filter(str.isdigit, host.listdir(f"/proc/{pid}/task")):
            task = read_task(host, int(tid))
            if task is not None and not task.pinned:
                tids.append(int(tid))
    return tids


def _cpuset_partition(root: str) -> Action:
    host = HostRoot(root)

    def make(journal, entry, housekeeping):
        writes = _Writes(journal, entry.action)
        cgroup_root = cgroup2_with_cpuset(host)
        if cgroup_root is None:
            writes.refuse("no cgroup v2 hierarchy offers the cpuset controller here (cgroup v1 "
                          "holds it, or cgroup2 is not mounted)")
        control = host.path(f"{cgroup_root}/cgroup.subtree_control")
        if "cpuset" not in read_knob(control).split():
            writes.set(control, "+cpuset", restore="-cpuset",
                       same=lambda now, value: "cpuset" in now.split())
        # The partition rewrites the affinity of every task outside it (before
        # Linux 6.2 to all the CPUs left, which its removal does not undo): the
        # journal keeps them all, to be put back once the cgroup is gone.
        writes.made += journal.keep_affinities(_movable_tasks(host))
        cgroup = host.path(partition_cgroup(cgroup_root))
        try:
            journal.create_directory(cgroup)
        except OSError as error:
            writes.refuse(f"cannot make the cgroup {cgroup} ({_why(error)})")
        writes.made.append(str(cgroup))
        cpus = format_cpu_list(targets_of(entry, housekeeping, host))
        try:
            write_knob(cgroup / "cpuset.cpus", cpus)  # the cgroup's removal undoes it
        except OSError as error:
            writes.refuse(f"the kernel refused CPUs {cpus} for {cgroup} ({_why(error)})")
        # Journalled, so that the restore ends the partition before the cgroup goes:
        # ending it in the write gives the CPUs back to the other tasks at once, while
        # a removal does it later (and would undo the affinities put back meanwhile).
        # The kernel may read "isolated invalid (WHY)": refused.
        writes.set(cgroup / PARTITION, "isolated", restore="member")

    def persist(entry, housekeeping):
        cpus = format_cpu_list(targets_of(entry, housekeeping, host))
        return CMDLINE, f"# the cpuset partition's boot-time equivalent\nisolcpus={cpus}\n"

    return Action(make, persist, measurable=False)


_MAKERS: dict[str, Callable[[str], Action]] = {
    "workqueue-cpumask": _workqueue,
    "vm.stat_interval": _sysctl_action("vm.stat_interval", str(STAT_INTERVAL_S)),
    "timer-migration": _sysctl_action("kernel.timer_migration", "0"),
    "watchdogs": _watchdogs,
    "rt-throttling": _rt_throttling,
    "thp": _thp,
    "idle-states": _idle_states,
    "governor": _governor,
    "turbo": _turbo,
    "clocksource": _clocksource,
    "irqbalance": _irqbalance,
    "cpuset-partition": _cpuset_partition,
}


def setting_actions(root: str = "/") -> dict[str, Action]:
    """The system settings' actions, reading and writing knobs under `root`."""
    return {name: maker(root) for name, maker in _MAKERS.items()}


SETTING_ACTIONS: dict[str, Action] = setting_actions()
