"""Runs inside the rig guest (tests/rig/plan.py, step tune-settings): tune's
actions for target CPUs 4-5 (CPUs 2-3 are isolcpus, so the housekeeping CPUs
are 0-1,6-7), each made through a KnobJournal, counted over a window, and
restored; prints one JSON object that tests/rig/test_tune_settings.py judges.

What is counted, per CPU, is sched_switch events from a private tracefs
instance (switches *to* a task: the times it began to run there), for two
kinds of task:
- the RCU grace-period kernel thread (a movable kthread), pinned to CPU 4
  for the whole job beforehand (in a journal of its own) so that its runs
  there are certain before each action;
- unbound kworkers (kworker/uN:M), given work by writes to a pseudo-terminal
  (the tty layer pushes its input through the unbound workqueue) from a
  thread pinned to CPU 4, where the window allows it.
Each window also starts processes (their exit queues RCU work, which wakes
the grace-period thread). Counts, not timings: TCG makes timings meaningless.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import tty
from pathlib import Path

from noisescope.host import HostRoot, cgroup2_with_cpuset
from noisescope.knobs import KnobJournal, read_knob
from noisescope.system import WORKQUEUE_CPUMASK
from noisescope.tune.actions import NotApplied, move_task
from noisescope.tune.plan import RUNTIME, PlanEntry
from noisescope.tune.settings import PARTITION, SETTING_ACTIONS, partition_cgroup

TARGETS, HOUSEKEEPING = (4, 5), (0, 1, 6, 7)
WINDOW_S = 3
SPAWNS = 10  # processes started in each window
TRACING = Path("/sys/kernel/tracing")
INSTANCE = TRACING / "instances" / "rig-tune"
SWITCH = re.compile(r"\[(\d+)\].*sched_switch: .*next_comm=(\S+) next_pid=(\d+)")


def grace_period_kthread() -> int:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if Path(f"/proc/{pid}/comm").read_text().strip() in ("rcu_preempt", "rcu_sched"):
            return int(pid)
    raise SystemExit("no RCU grace-period kthread (rcu_preempt, rcu_sched)")


def start_tracing(kthread: int) -> None:
    if not (TRACING / "instances").is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACING)], check=True)
    INSTANCE.mkdir(exist_ok=True)
    event = INSTANCE / "events" / "sched" / "sched_switch"
    (event / "filter").write_text(f'next_pid == {kthread} || next_comm ~ "kworker/u*"')
    (event / "enable").write_text("1")


def writer(stop: threading.Event, cpu: int | None) -> None:
    """Write to a pseudo-terminal and drain it until `stop`, pinned to `cpu`."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})  # this thread only
    master, slave = os.openpty()
    tty.setraw(slave)
    try:
        while not stop.is_set():
            os.write(master, b"x" * 64)
            os.read(slave, 4096)
            time.sleep(0.002)
    finally:
        os.close(master)
        os.close(slave)


def window(kthread: int, writer_cpu: int | None) -> dict:
    """Switches to the kthread and to unbound kworkers per CPU over WINDOW_S."""
    with open(INSTANCE / "trace", "w"):
        pass  # opened for writing with truncation: the buffers are cleared
    (INSTANCE / "tracing_on").write_text("1")
    stop = threading.Event()
    thread = threading.Thread(target=writer, args=(stop, writer_cpu))
    thread.start()
    end = time.monotonic() + WINDOW_S
    for _ in range(SPAWNS):
        subprocess.run(["true"])
        time.sleep(max(0.0, (end - time.monotonic()) / SPAWNS))
    while time.monotonic() < end:
        time.sleep(0.05)
    stop.set()
    thread.join()
    (INSTANCE / "tracing_on").write_text("0")
    counts: dict = {"kthread": {}, "unbound": {}}
    for line in (INSTANCE / "trace").read_text().splitlines():
        found = SWITCH.search(line)
        if found:
            cpu, comm, pid = int(found.group(1)), found.group(2), int(found.group(3))
            kind = "kthread" if pid == kthread else "unbound" if comm.startswith("kworker/u") \
                else None
            if kind:
                counts[kind][cpu] = counts[kind].get(cpu, 0) + 1
    return counts


def state(kthread: int, cgroup_root: str | None) -> dict:
    """The values the actions touch, to compare before and after."""
    found = {"workqueue_cpumask": read_knob(WORKQUEUE_CPUMASK),
             "kthread_affinity": sorted(os.sched_getaffinity(kthread))}
    if cgroup_root:
        found["subtree_control"] = read_knob(f"{cgroup_root}/cgroup.subtree_control")
        found["cgroups"] = sorted(p.name for p in Path(cgroup_root).iterdir() if p.is_dir())
        found["root_cpus"] = read_knob(f"{cgroup_root}/cpuset.cpus.effective")
    return found


def affinities() -> dict[int, list[int]]:
    """Every task's CPU affinity (per-CPU kernel threads included: they must not move)."""
    found = {}
    for tid in Path("/proc").glob("[0-9]*/task/[0-9]*"):
        try:
            found[int(tid.name)] = sorted(os.sched_getaffinity(int(tid.name)))
        except OSError:
            continue  # gone
    return found


def changed_affinities(before: dict[int, list[int]]) -> dict[int, list[list[int]]]:
    """Tasks alive before and now whose affinity differs: tid -> [before, now]."""
    now = affinities()
    return {tid: [cpus, now[tid], describe(tid)] for tid, cpus in before.items()
            if tid in now and now[tid] != cpus}


def describe(tid: int) -> str:
    stat = Path(f"/proc/{tid}/stat").read_text()
    return f"{stat[stat.index('(') + 1:stat.rindex(')')]} flags={int(stat.rpartition(')')[2].split()[6]):#x}"


def entry(action: str) -> PlanEntry:
    return PlanEntry(None, action, RUNTIME, action, "rig", cpus="4-5")


def pinned_to_target_refused() -> str:
    """What happens to a new process pinned to CPU 4 (inside the partition)."""
    done = subprocess.run([sys.executable, "-c", "import os; os.sched_setaffinity(0, {4})"],
                          capture_output=True, text=True)
    return "allowed" if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


def main() -> int:
    kthread = grace_period_kthread()
    cgroup_root = cgroup2_with_cpuset(HostRoot("/"))
    result: dict = {"kthread": Path(f"/proc/{kthread}/comm").read_text().strip()}
    # a task pinned to one housekeeping CPU, which the partition must not unpin for good
    pinned = subprocess.Popen(["taskset", "-c", "0", "sleep", "600"])
    time.sleep(0.5)
    result["before"] = state(kthread, cgroup_root)
    before = affinities()
    result["tasks"] = len(before)
    start_tracing(kthread)
    with KnobJournal("rig-setup") as setup:
        setup.change_affinity(kthread, (TARGETS[0],))
        result["baseline"] = window(kthread, TARGETS[0])

        with KnobJournal("rig-kthread") as journal:
            result["moved_tids"] = move_task(journal, kthread, HOUSEKEEPING)
            result["kthread_moved"] = window(kthread, TARGETS[0])
        result["after_kthread"] = state(kthread, cgroup_root)

        with KnobJournal("rig-workqueue") as journal:
            SETTING_ACTIONS["workqueue-cpumask"].make(journal, entry("workqueue-cpumask"),
                                                      HOUSEKEEPING)
            result["workqueue_cpumask_set"] = read_knob(WORKQUEUE_CPUMASK)
            result["workqueue"] = window(kthread, TARGETS[0])
        result["after_workqueue"] = state(kthread, cgroup_root)

        with KnobJournal("rig-partition") as journal:
            try:
                SETTING_ACTIONS["cpuset-partition"].make(journal, entry("cpuset-partition"),
                                                         HOUSEKEEPING)
            except NotApplied as error:
                result["partition_refused"] = str(error)
            else:
                cgroup = Path(partition_cgroup(cgroup_root))
                result["partition"] = read_knob(cgroup / PARTITION)
                result["partition_cpus"] = read_knob(cgroup / "cpuset.cpus.effective")
                result["during_partition"] = state(kthread, cgroup_root)
                result["pinned_to_target"] = pinned_to_target_refused()
                result["partitioned"] = window(kthread, None)
                result["pinned_during_partition"] = sorted(os.sched_getaffinity(pinned.pid))
                result["journal"] = [c for c in json.loads(journal.path.read_text())["changes"]
                                     if c["kind"] != "affinity"]
                result["journal_affinities"] = [c.tid for c in journal.changes
                                                if c.kind == "affinity"]
                result["partition_restore_failed"] = journal.restore()
        result["after_partition"] = state(kthread, cgroup_root)
    result["after"] = state(kthread, cgroup_root)
    result["changed_affinities"] = changed_affinities(before)
    pinned.kill()
    INSTANCE.rmdir()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
