"""The tuning plan: from a traced baseline's attribution and the host's facts,
the candidate actions for each target CPU, each with its evidence and the
share of the CPU's lost time it accounts for.

Every row of the baseline's `detour_causes` table (cpu, start_ns, cause,
detail, duration_ns) is claimed by at most one entry of its CPU, so the
shares of one CPU's cause-based entries add up to at most 100%:

- `irq` (detail: the handler's name) -> the IRQ's affinity (its number from
  /proc/interrupts);
- `thread` (detail: the task's comm; its pids from the `sched_switch` table,
  the row's time shared among the tasks of that comm that ran in it) -> the
  affinity of that process or kernel thread; an unbound kworker -> the
  unbound workqueue cpumask; a per-CPU kernel thread (kworker/1:0,
  ksoftirqd/1, ...) cannot be moved and is listed as such; tasks that have
  exited, and those whose pid the trace lacks, are listed together by name;
- `tick` and the softirqs the tick raises (TIMER, SCHED) -> nohz_full, RCU
  callbacks (softirq RCU) -> rcu_nocbs: boot parameters, advised only;
- `timer` watchdog_timer_fn and `nmi` -> the lockup watchdogs.

Whatever is left (host time, other softirqs, IPIs, faults) gets no entry.
Boot-only `isolcpus` is advised with the share of the movable tasks' time
(the same time as their affinity entries: it is another way to the same
gain, so its share is not added to theirs); an `isolated` cgroup v2 cpuset
partition of the target CPUs (`cpuset-partition`), the runtime way to the
same gain, is proposed with that time too where the kernel offers the cpuset
controller in cgroup v2. The system check's other
findings for the target CPUs (RT throttling, THP, idle states, ...) follow
without a share: the attribution does not measure them.

Nothing here changes the machine: host facts are read through a HostRoot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from ..host import HostRoot, cgroup2_with_cpuset, parse_interrupts
from ..system import ADVICE, WORKQUEUE_CPUMASK, Finding
from ..tables import Table
from ..units import cpumask_text, format_cpu_list, format_duration, parse_cpu_list

# /proc/PID/stat flags (include/linux/sched.h)
PF_KTHREAD = 0x00200000
PF_NO_SETAFFINITY = 0x04000000
# Kernel threads bound to one CPU by name (the name ends in the CPU number);
# used when the task is gone and its flags cannot be read.
PER_CPU_KTHREAD = re.compile(
    r"^(kworker/\d+:\d+H?(-.*)?|(ksoftirqd|migration|rcuc|cpuhp|idle_inject|irq_work|"
    r"posixcputmr|watchdog)/\d+)$")
UNBOUND_KWORKER = re.compile(r"^kworker/u\d+:\d+")
TICK_SOFTIRQS = ("TIMER", "SCHED")  # raised by the tick itself
WATCHDOG_TIMER = "watchdog_timer_fn"

# How each entry can be carried out.
RUNTIME, BOOT, NOT_POSSIBLE = "runtime", "boot", "no"
# Candidates with a smaller share of their CPU's lost time are listed in the
# terminal only as a count, and not tried by --measure (too small to measure).
SMALL_SHARE_PCT = 0.1
# System check findings that become candidates (the others are entries built
# from the attribution, or not about this machine's settings).
SYSTEM_ACTIONS = {"watchdogs": RUNTIME, "rt throttling": RUNTIME, "thp": RUNTIME,
                  "idle states": RUNTIME, "irqbalance": RUNTIME, "governor": RUNTIME,
                  "turbo": RUNTIME, "clocksource": RUNTIME, "vm.stat_interval": RUNTIME,
                  "timer migration": RUNTIME, "workqueue cpumask": RUNTIME, "smt": BOOT}


@dataclass(frozen=True)
class PlanEntry:
    """One candidate action (or a source that no action removes) for one CPU;
    cpu None: the target CPUs together (a system setting)."""

    cpu: int | None
    action: str  # irq-affinity, task-affinity, workqueue-cpumask, boot:nohz_full, ...
    applies: str  # runtime (a reversible change), boot (advised only) or no
    source: str  # what takes the time: "IRQ 36 virtio1-req.0", "process foo (pid 456)"
    evidence: str  # what the baseline saw, and what to do
    share_pct: float | None = None  # of the CPU's lost time; None: not measured
    lost_ns: int | None = None
    count: int | None = None  # occurrences (causes rows) in the baseline
    irq: int | None = None
    pid: int | None = None
    cpus: str | None = None  # a system setting's target CPUs (a CPU list); None: see cpu

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> PlanEntry:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Task:
    """What /proc says about a task the baseline saw (None: it has exited)."""

    pid: int  # the thread group (process) id
    tid: int
    kernel: bool
    pinned: bool  # PF_NO_SETAFFINITY: the kernel refuses to move it


def read_task(host: HostRoot, tid: int) -> Task | None:
    """The task with thread id `tid`, from /proc/TID/stat (its flags) and status (its Tgid)."""
    stat = host.text(f"/proc/{tid}/stat")
    if not stat:
        return None
    fields = stat.rpartition(")")[2].split()  # the comm may hold spaces and parentheses
    try:
        flags = int(fields[6])
    except (IndexError, ValueError):
        return None
    found = re.search(r"^Tgid:\s*(\d+)", host.text(f"/proc/{tid}/status") or "", re.M)
    return Task(int(found.group(1)) if found else tid, tid, bool(flags & PF_KTHREAD),
                bool(flags & PF_NO_SETAFFINITY))


def irq_numbers(host: HostRoot) -> dict[str, int]:
    """IRQ handler name -> IRQ number, from /proc/interrupts (a shared line lists
    each handler's name, comma-separated, after the chip and hardware IRQ)."""
    counts = parse_interrupts(host.text("/proc/interrupts") or "")
    names: dict[str, int] = {}
    for source, description in counts.descriptions.items():
        if source.isdigit():
            for token in description.replace(",", " ").split()[2:]:
                names.setdefault(token, int(source))
    return names


def split_threads(causes: Table, switches: Table | None) -> tuple[Table, np.ndarray]:
    """`causes` with each `thread` row split among the tasks of that comm that ran
    in it, and the pid (tid) of every row (-1: none, or not known).

    A row holds the time of every task of one comm in one span (two `python`
    processes in one detour are one row); the switches of the row's CPU inside
    the span say which ran how long, and the row's time is shared out in that
    proportion (so a CPU's total stays exact). A row without a switch to its
    comm inside the span (the trace missed it and attribution put it back,
    see trace/switches.py) goes to the last task of that comm switched to on
    the CPU before the span ended, if any."""
    others = np.flatnonzero(causes["cause"] != "thread")  # kept as they are, pid -1
    rows: list[int] = others.tolist()
    pids: list[int] = [-1] * len(rows)
    shares: list[int] = causes["duration_ns"][others].tolist()
    by_cpu: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    by_comm: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}  # its switches-to, in time
    if switches is not None and switches.rows:
        for cpu in np.unique(switches["cpu"]).tolist():
            mine = np.flatnonzero(switches["cpu"] == cpu)
            order = mine[np.argsort(switches["timestamp_ns"][mine], kind="stable")]
            times, comms = switches["timestamp_ns"][order], switches["next_comm"][order]
            tids = switches["next_pid"][order]
            by_cpu[cpu] = (times, comms, tids)
            names, codes = np.unique(comms.astype(str), return_inverse=True)
            grouped = np.argsort(codes, kind="stable")  # stays in time order within a name
            for name, members in zip(names.tolist(), np.split(grouped, np.cumsum(
                    np.bincount(codes, minlength=len(names)))[:-1]), strict=True):
                by_comm[(cpu, name)] = (times[members], tids[members])
    for index in np.flatnonzero(causes["cause"] == "thread").tolist():
        cpu_switches, comm = by_cpu.get(int(causes["cpu"][index])), str(causes["detail"][index])
        start, duration = int(causes["start_ns"][index]), int(causes["duration_ns"][index])
        ran = _runs(cpu_switches, comm, start, duration)
        if not ran:
            ran = {_last_before(by_comm.get((int(causes["cpu"][index]), comm)),
                                start + duration): duration}
        total, given = sum(ran.values()), 0
        for number, (pid, ns) in enumerate(sorted(ran.items())):
            part = duration - given if number == len(ran) - 1 else duration * ns // total
            given += part
            rows.append(index)
            pids.append(pid)
            shares.append(part)
    split = {name: causes[name][rows] for name in causes.columns}
    split["duration_ns"] = np.array(shares, dtype=np.int64)
    return Table(split), np.array(pids, dtype=np.int64)


def _runs(switches, comm: str, start_ns: int, duration_ns: int) -> dict[int, int]:
    """pid -> ns that tasks named `comm` ran on one CPU within the span, from its switches."""
    if switches is None:
        return {}
    times, comms, tids = switches
    end_ns = start_ns + duration_ns
    first, last = np.searchsorted(times, start_ns), np.searchsorted(times, end_ns, side="right")
    ran: dict[int, int] = {}
    for at in range(first, last):
        if comms[at] == comm:
            until = min(int(times[at + 1]) if at + 1 < len(times) else end_ns, end_ns)
            ran[int(tids[at])] = ran.get(int(tids[at]), 0) + until - int(times[at])
    return {pid: ns for pid, ns in ran.items() if ns > 0}


def _last_before(switches_to, end_ns: int) -> int:
    """The task of the last of `switches_to` (times, tids of one comm) before `end_ns`; -1: none."""
    if switches_to is None:
        return -1
    times, tids = switches_to
    at = np.searchsorted(times, end_ns, side="right") - 1
    return int(tids[at]) if at >= 0 else -1


def task_rows(causes: Table, switches: Table | None, host: HostRoot) -> tuple[Table, np.ndarray]:
    """`causes` split among the tasks that ran in each `thread` row (split_threads),
    and each row's pid (tid; -1: none or not known), filled in by name for the
    kernel threads whose switches the trace missed (_by_live_comm)."""
    causes, pids = split_threads(causes, switches)
    _by_live_comm(causes, pids, host)
    return causes, pids


def _by_live_comm(causes: Table, pids: np.ndarray, host: HostRoot) -> None:
    """Fill in the pid of `thread` rows whose switch the trace missed (it put the
    switch back from other events, see trace/switches.py) where exactly one live
    task has that comm and it is a kernel thread: those live as long as the
    machine, while a process of that name now (a `sed`) need not be the one
    that ran."""
    missing = np.flatnonzero((causes["cause"] == "thread") & (pids < 0))
    if not len(missing):
        return
    live: dict[str, list[int]] = {}
    for entry in host.listdir("/proc"):
        if entry.isdigit():
            live.setdefault(host.text(f"/proc/{entry}/comm") or "", []).append(int(entry))
    for index in missing:
        found = live.get(str(causes["detail"][index]), [])
        if len(found) == 1 and (task := read_task(host, found[0])) is not None and task.kernel:
            pids[index] = found[0]


@dataclass
class _Claim:
    """Cause rows of one CPU gathered for one entry."""

    lost_ns: int = 0
    count: int = 0

    def add(self, durations: np.ndarray) -> None:
        self.lost_ns += int(durations.sum())
        self.count += len(durations)


def make_plan(causes: Table, switches: Table | None, measured_ns: dict[int, int],
              targets: Iterable[int], housekeeping: Iterable[int], host: HostRoot,
              findings: Iterable[Finding] = (), own_pid: int | None = None) -> list[PlanEntry]:
    """The plan for `targets`: per CPU its cause-based entries (largest share
    first), then the boot-only advice, then the system findings that apply.
    `measured_ns` is each CPU's measured time (for rates); `own_pid` the
    process that measured (its own threads are not candidates)."""
    targets, housekeeping = tuple(targets), tuple(housekeeping)
    keep = format_cpu_list(housekeeping)
    irqs = irq_numbers(host)
    causes, pids = task_rows(causes.filter(np.isin(causes["cpu"], targets)), switches, host)
    tasks = {pid: read_task(host, pid) for pid in set(pids[pids >= 0].tolist())}
    findings = {f.check: f for f in findings if f.state == ADVICE}
    plan: list[PlanEntry] = []
    for cpu in targets:
        mine = causes["cpu"] == cpu
        total_ns = int(causes["duration_ns"][mine].sum())
        seconds = measured_ns.get(cpu, 0) / 1e9
        per_cpu = _cpu_entries(causes.filter(mine), pids[mine], cpu, total_ns, seconds, keep,
                               host, irqs, tasks, own_pid, findings)
        plan += sorted(per_cpu, key=lambda e: -(e.share_pct or 0))
        plan += _boot_entries(causes.filter(mine), pids[mine], cpu, total_ns, keep, tasks,
                              findings)
    targeted = f"CPU{'s' if len(targets) > 1 else ''} {format_cpu_list(targets)}"
    plan += _partition_entry(causes, pids, targets, keep, tasks, host)
    shown = {e.action for e in plan}
    for check, applies in SYSTEM_ACTIONS.items():
        action = check.replace(" ", "-")
        if check in findings and action not in shown:  # not already there with its evidence
            finding = findings[check]
            plan.append(PlanEntry(None, action, applies, check,
                                  f"{finding.message} (on {targeted}): {finding.advice}",
                                  cpus=format_cpu_list(targets)))
    return plan


def _partition_entry(causes: Table, pids: np.ndarray, targets: tuple[int, ...], keep: str,
                     tasks: dict[int, Task | None], host: HostRoot) -> list[PlanEntry]:
    """An isolated cpuset partition of the targets, where cgroup v2 offers cpusets and
    tasks the scheduler placed on them took time (shares of all the targets' lost time)."""
    cgroup = cgroup2_with_cpuset(host)
    movable = _movable_threads(causes, pids, tasks)
    if cgroup is None or not movable.any():
        return []
    claim = _Claim()
    claim.add(causes["duration_ns"][movable])
    share = _share(claim.lost_ns, int(causes["duration_ns"].sum()))
    cpus = format_cpu_list(targets)
    return [PlanEntry(
        None, "cpuset-partition", RUNTIME, f"an isolated cpuset partition of CPUs {cpus}",
        f"other tasks the scheduler placed on CPUs {cpus} took {share:.1f}% of their lost time "
        f"({claim.count:,} times): an isolated cpuset partition (a cgroup under {cgroup}) keeps "
        f"them on CPUs {keep}, as isolcpus would at boot (the same time as their affinity "
        f"entries)", share, claim.lost_ns, claim.count, cpus=cpus)]


def _share(part_ns: int, total_ns: int) -> float:
    return 100.0 * part_ns / total_ns if total_ns else 0.0


def _rate(count: int, lost_ns: int, seconds: float, cpu: int) -> str:
    if seconds <= 0:
        return f"{count:,}x, {format_duration(lost_ns)} on CPU {cpu}"
    rate = count / seconds
    return (f"{rate:,.0f}x/s" if rate >= 10 else f"{rate:.2g}x/s") + (
        f" on CPU {cpu}, {format_duration(round(lost_ns / seconds))}/s")


def _cpu_entries(causes: Table, pids: np.ndarray, cpu: int, total_ns: int, seconds: float,
                 keep: str, host: HostRoot, irqs: dict[str, int], tasks: dict[int, Task | None],
                 own_pid: int | None, findings: dict[str, Finding]) -> list[PlanEntry]:
    entries: list[PlanEntry] = []
    durations, kinds, details = causes["duration_ns"], causes["cause"], causes["detail"]

    def entry(claim: _Claim, action: str, applies: str, source: str, said: str, **ids) -> None:
        entries.append(PlanEntry(cpu, action, applies, source, said,
                                 _share(claim.lost_ns, total_ns), claim.lost_ns, claim.count,
                                 **ids))

    for name in sorted(set(details[kinds == "irq"])):
        claim = _Claim()
        claim.add(durations[(kinds == "irq") & (details == name)])
        number = irqs.get(name)
        if number is None:
            entry(claim, "irq-affinity", NOT_POSSIBLE, f"IRQ {name}",
                  f"IRQ {name} fired {_rate(claim.count, claim.lost_ns, seconds, cpu)}: not in "
                  f"/proc/interrupts (gone?), so it cannot be moved")
            continue
        now = host.text(f"/proc/irq/{number}/smp_affinity_list") or "?"
        entry(claim, "irq-affinity", RUNTIME, f"IRQ {number} {name}",
              f"IRQ {number} {name} fired {_rate(claim.count, claim.lost_ns, seconds, cpu)}: "
              f"move its affinity (now {now}) to the housekeeping CPUs {keep}", irq=number)

    threads = kinds == "thread"
    unbound, exited, unnamed, bound = _Claim(), {}, {}, {}
    for pid in sorted(set(pids[threads].tolist())):
        for comm in sorted(set(details[threads & (pids == pid)])):
            rows = threads & (pids == pid) & (details == comm)
            claim = _Claim()
            claim.add(durations[rows])
            task = tasks.get(pid)
            rate = _rate(claim.count, claim.lost_ns, seconds, cpu)
            if UNBOUND_KWORKER.match(comm):
                unbound.add(durations[rows])
            elif own_pid is not None and task is not None and task.pid == own_pid:
                continue  # the measurement's own threads (its controller)
            elif task is not None and task.pinned or PER_CPU_KTHREAD.match(comm):
                bound.setdefault(comm, _Claim()).add(durations[rows])
            elif task is None:
                (exited if pid >= 0 else unnamed).setdefault(comm, _Claim()).add(durations[rows])
            elif task.kernel:
                entry(claim, "task-affinity", RUNTIME, f"kernel thread {comm} (pid {pid})",
                      f"kernel thread {comm} (pid {pid}) ran {rate}: restrict its affinity to "
                      f"CPUs {keep}", pid=pid)
            else:
                thread = f", thread {task.tid}" if task.tid != task.pid else ""
                entry(claim, "task-affinity", RUNTIME, f"process {comm} (pid {task.pid}{thread})",
                      f"process {comm} (pid {task.pid}{thread}) ran {rate}: restrict its "
                      f"affinity to CPUs {keep}", pid=task.pid)
    if unbound.count:
        now = host.text(WORKQUEUE_CPUMASK) or "?"
        entry(unbound, "workqueue-cpumask", RUNTIME, "unbound kworkers",
              f"unbound kworkers ran {_rate(unbound.count, unbound.lost_ns, seconds, cpu)}: "
              f"write {cpumask_text(parse_cpu_list(keep))} (the housekeeping CPUs {keep}) to "
              f"{WORKQUEUE_CPUMASK} (now {now})")
    for comm, claim in sorted(bound.items()):  # by name: rows with and without a pid alike
        entry(claim, "none", NOT_POSSIBLE, f"kernel thread {comm}",
              f"per-CPU kernel thread {comm} ran {_rate(claim.count, claim.lost_ns, seconds, cpu)}: "
              f"it cannot be moved (bound to its CPU)")
    for comm, claim in sorted(exited.items()):
        entry(claim, "none", NOT_POSSIBLE, f"exited tasks {comm}",
              f"tasks named {comm}, exited since, ran {_rate(claim.count, claim.lost_ns, seconds, cpu)}: "
              f"short-lived, so restrict where their parent starts them (its affinity or cpuset)")
    for comm, claim in sorted(unnamed.items()):
        entry(claim, "none", NOT_POSSIBLE, f"tasks {comm} (pid unknown)",
              f"tasks named {comm} ran {_rate(claim.count, claim.lost_ns, seconds, cpu)}: the "
              f"trace missed their switches, so their pids are unknown")

    host_time = _Claim()
    host_time.add(durations[kinds == "unexplained"])
    if host_time.count:
        entry(host_time, "none", NOT_POSSIBLE, "outside this kernel",
              f"time the kernel saw nothing of (a hypervisor, firmware, SMIs), "
              f"{_rate(host_time.count, host_time.lost_ns, seconds, cpu)}: no setting here moves "
              f"it (on a VM: dedicated, isolated host cores for the vCPUs)")

    watchdog = _Claim()
    watchdog.add(durations[((kinds == "timer") & (details == WATCHDOG_TIMER)) | (kinds == "nmi")])
    if watchdog.count and "watchdogs" in findings:
        entry(watchdog, "watchdogs", RUNTIME, "lockup watchdogs",
              f"the watchdog timer and NMIs fired {_rate(watchdog.count, watchdog.lost_ns, seconds, cpu)}: "
              f"{findings['watchdogs'].advice}")
    return entries


def _boot_entries(causes: Table, pids: np.ndarray, cpu: int, total_ns: int, keep: str,
                  tasks: dict[int, Task | None], findings: dict[str, Finding]) -> list[PlanEntry]:
    """Boot parameters the target CPU lacks, with the share of the time they would remove."""
    kinds, details, durations = causes["cause"], causes["detail"], causes["duration_ns"]
    removes = {
        "nohz_full": ((kinds == "tick") | (kinds == "softirq") & np.isin(details, TICK_SOFTIRQS),
                      "the tick and the softirqs it raises"),
        "rcu_nocbs": ((kinds == "softirq") & (details == "RCU"), "RCU callbacks (softirq RCU)"),
        "isolcpus": (_movable_threads(causes, pids, tasks), "other tasks the scheduler placed "
                     "here (the same time as their affinity entries)"),
    }
    entries = []
    for parameter, (rows, what) in removes.items():
        if parameter not in findings or cpu not in findings[parameter].cpus:
            continue  # the CPU has it already
        claim = _Claim()
        claim.add(durations[rows])
        share = _share(claim.lost_ns, total_ns)
        entries.append(PlanEntry(
            cpu, f"boot:{parameter}", BOOT, parameter,
            f"boot with {parameter}={cpu} (keep {keep} for housekeeping): removes {what}, "
            f"{share:.1f}% of CPU {cpu}'s lost time ({claim.count:,} times)",
            share, claim.lost_ns, claim.count))
    return entries


def _movable_threads(causes: Table, pids: np.ndarray, tasks: dict[int, Task | None]
                     ) -> np.ndarray:
    """`thread` rows of tasks that are not per-CPU kernel threads."""
    rows = causes["cause"] == "thread"
    for index in np.flatnonzero(rows):
        task = tasks.get(int(pids[index]))
        if PER_CPU_KTHREAD.match(str(causes["detail"][index])) or task is not None and task.pinned:
            rows[index] = False
    return rows
