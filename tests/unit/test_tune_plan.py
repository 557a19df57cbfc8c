"""The tuning planner on a synthetic causes table of known content and the
kvm-guest host tree (tests/fixtures/hosts/kvm-guest: IRQ 36 is virtio1-req.0
with affinity 0-1; /proc/123 the kernel thread kdamond.0, /proc/11 the per-CPU
ksoftirqd/1 (PF_NO_SETAFFINITY), /proc/456 the process foo and /proc/457 its
thread `foo (worker)`; the unbound workqueue cpumask is 3: CPUs 0-1).

CPU 1 loses 200 us in all (the rows below); each entry's share is its rows'
time over that, so the expected shares are exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import noisescope
from noisescope.host import HostRoot
from noisescope.system import ADVICE, OK, Finding
from noisescope.tables import Table
from noisescope.tune.baseline import plan_bundle
from noisescope.tune.plan import BOOT, NOT_POSSIBLE, RUNTIME, make_plan, read_task, split_threads
from noisescope.units import SECOND

HOST = HostRoot(Path(__file__).parents[1] / "fixtures" / "hosts" / "kvm-guest")

# (cause, detail, pid that the trace switched to (None: no switch), rows, ns each) on CPU 1
ROWS = [
    ("irq", "virtio1-req.0", None, 10, 2_000),   # IRQ 36: 20 us, 10%
    ("irq", "gone-dev", None, 1, 1_000),         # not in /proc/interrupts: 0.5%
    ("thread", "kdamond.0", None, 3, 10_000),    # no switch: its pid from /proc/123/comm, 15%
    ("thread", "ksoftirqd/1", 11, 2, 5_000),     # per-CPU, cannot move: 5%
    ("thread", "foo", 456, 4, 20_000),           # process: 40%
    ("thread", "foo (worker)", 457, 1, 4_000),   # a thread of process 456: 2%
    ("thread", "cc1", 999, 2, 3_000),            # exited (no /proc/999): 3%
    ("thread", "kworker/u4:2", 50, 1, 7_000),    # unbound kworker: workqueue cpumask, 3.5%
    ("thread", "migration/1", None, 1, 1_000),   # per-CPU by its name alone: 0.5%
    ("tick", "", None, 5, 1_000),                # nohz_full: tick + TIMER softirq, 3%
    ("softirq", "TIMER", None, 2, 500),
    ("softirq", "RCU", None, 3, 1_000),          # rcu_nocbs: 1.5%
    ("unexplained", "no guest activity", None, 2, 15_000),  # outside the kernel: 15%
    ("timer", "watchdog_timer_fn", None, 1, 2_000),  # watchdogs: 1%
]
TOTAL_NS = 200_000
FINDINGS = [
    Finding("watchdogs", ADVICE, "watchdog on", "sysctl kernel.watchdog=0"),
    Finding("thp", ADVICE, "transparent huge pages: always", "echo madvise > ..."),
    Finding("timer migration", ADVICE, "timer migration is on", "sysctl kernel.timer_migration=0"),
    Finding("workqueue cpumask", ADVICE, "unbound work may run on CPU 1", "echo 1 > ...", (1,)),
    Finding("nohz_full", ADVICE, "nohz_full does not include CPU 1", "boot with ...", (1,)),
    Finding("rcu_nocbs", ADVICE, "rcu_nocbs does not include CPU 1", "boot with ...", (1,)),
    Finding("isolcpus", ADVICE, "isolcpus does not include CPU 1", "boot with ...", (1,)),
    Finding("governor", OK, "performance"),
    Finding("virtualization", ADVICE, "guest of KVM", "measure on bare metal"),
]


def synthetic() -> tuple[Table, Table]:
    causes: dict[str, list] = {"cpu": [], "start_ns": [], "cause": [], "detail": [],
                               "duration_ns": []}
    switches: dict[str, list] = {"cpu": [], "timestamp_ns": [], "next_comm": [], "next_pid": []}
    start = 1_000_000
    for cause, detail, pid, rows, each in ROWS:
        for _ in range(rows):
            causes["cpu"].append(1)
            causes["start_ns"].append(start)
            causes["cause"].append(cause)
            causes["detail"].append(detail)
            causes["duration_ns"].append(each)
            if pid is not None:  # switched in inside the span...
                for key, value in (("cpu", 1), ("timestamp_ns", start + 10),
                                   ("next_comm", detail), ("next_pid", pid)):
                    switches[key].append(value)
                # ...and another task of that name after it ended: not the one that ran
                for key, value in (("cpu", 1), ("timestamp_ns", start + each + 50),
                                   ("next_comm", detail), ("next_pid", 4242)):
                    switches[key].append(value)
            start += 100_000
    # CPU 0 is not a target: its time is in no entry
    for key, value in (("cpu", 0), ("start_ns", 5_000), ("cause", "thread"), ("detail", "foo"),
                       ("duration_ns", 900_000)):
        causes[key].append(value)
    return (Table({k: np.array(v, dtype=object if k in ("cause", "detail") else np.int64)
                   for k, v in causes.items()}),
            Table({k: np.array(v, dtype=object if k == "next_comm" else np.int64)
                   for k, v in switches.items()}))


@pytest.fixture(scope="module")
def plan():
    causes, switches = synthetic()
    return make_plan(causes, switches, {1: 2_000_000_000}, (1,), (0,), HOST, FINDINGS)


def one(plan, source):
    found = [e for e in plan if e.source == source]
    assert len(found) == 1, [e.source for e in plan]
    return found[0]


def test_an_irq_is_named_by_its_number_from_proc_interrupts(plan):
    irq = one(plan, "IRQ 36 virtio1-req.0")
    assert (irq.cpu, irq.irq, irq.applies, irq.count, irq.lost_ns) == (1, 36, RUNTIME, 10, 20_000)
    assert irq.share_pct == pytest.approx(10.0)
    # 10 times in 2 s; 20 us in 2 s; its affinity now (fixture: 0-1) and where to move it
    assert ("IRQ 36 virtio1-req.0 fired 5x/s on CPU 1, 10 us/s: move its affinity (now 0-1) to "
            "the housekeeping CPUs 0") in irq.evidence
    gone = one(plan, "IRQ gone-dev")
    assert gone.applies == NOT_POSSIBLE and gone.irq is None


def test_kernel_threads_and_processes_are_told_apart_with_their_pids(plan):
    kdamond = one(plan, "kernel thread kdamond.0 (pid 123)")
    assert (kdamond.action, kdamond.applies, kdamond.pid) == ("task-affinity", RUNTIME, 123)
    assert kdamond.share_pct == pytest.approx(15.0)
    foo = one(plan, "process foo (pid 456)")
    assert (foo.action, foo.applies, foo.pid, foo.count) == ("task-affinity", RUNTIME, 456, 4)
    assert foo.share_pct == pytest.approx(40.0)
    assert "restrict its affinity to CPUs 0" in foo.evidence
    worker = one(plan, "process foo (worker) (pid 456, thread 457)")
    assert worker.pid == 456 and worker.share_pct == pytest.approx(2.0)
    assert not [e for e in plan if e.pid == 4242]  # a later switch to the name is not the task


def test_per_cpu_kernel_threads_are_not_proposed_for_moving(plan):
    for source, share in (("kernel thread ksoftirqd/1", 5.0), ("kernel thread migration/1", 0.5)):
        entry = one(plan, source)
        assert entry.applies == NOT_POSSIBLE and "cannot be moved" in entry.evidence
        assert entry.share_pct == pytest.approx(share)


def test_exited_tasks_unbound_kworkers_and_host_time(plan):
    exited = one(plan, "exited tasks cc1")
    assert exited.applies == NOT_POSSIBLE and exited.share_pct == pytest.approx(3.0)
    unbound = one(plan, "unbound kworkers")
    assert unbound.action == "workqueue-cpumask" and unbound.applies == RUNTIME
    assert unbound.share_pct == pytest.approx(3.5)
    assert ("write 1 (the housekeeping CPUs 0) to /sys/devices/virtual/workqueue/cpumask "
            "(now 3)") in unbound.evidence
    outside = one(plan, "outside this kernel")
    assert outside.applies == NOT_POSSIBLE and outside.share_pct == pytest.approx(15.0)
    watchdog = one(plan, "lockup watchdogs")
    assert watchdog.applies == RUNTIME and watchdog.share_pct == pytest.approx(1.0)


def test_boot_parameters_are_advised_with_the_share_they_remove(plan):
    boot = {e.action: e for e in plan if e.applies == BOOT}
    assert set(boot) == {"boot:nohz_full", "boot:rcu_nocbs", "boot:isolcpus"}
    assert boot["boot:nohz_full"].share_pct == pytest.approx(3.0)  # tick 5 us + TIMER 1 us
    assert boot["boot:rcu_nocbs"].share_pct == pytest.approx(1.5)
    # every task that is not a per-CPU kthread: kdamond, foo, its thread, cc1, kworker/u
    assert boot["boot:isolcpus"].share_pct == pytest.approx(63.5)


def test_shares_of_one_cpu_add_up_to_what_was_claimed(plan):
    """Each causes row goes to at most one entry besides isolcpus (which offers another
    way to the tasks' time): the other entries hold every row of CPU 1 once (here every
    row is claimed), so their shares add up to 100%, never more."""
    claimed = [e for e in plan if e.cpu == 1 and e.action != "boot:isolcpus"]
    assert sum(e.lost_ns for e in claimed) == TOTAL_NS
    assert sum(e.share_pct for e in claimed) == pytest.approx(100.0)
    assert all(0 < e.share_pct <= 100 for e in plan if e.share_pct is not None)
    assert not [e for e in plan if e.cpu == 0]
    shares = [e.share_pct for e in claimed if e.applies != BOOT]
    assert shares == sorted(shares, reverse=True)


def test_system_findings_become_entries_without_a_share(plan):
    system = [e for e in plan if e.cpu is None]
    # watchdogs and the workqueue cpumask have their per-CPU entries (with shares) already
    assert [e.action for e in system] == ["thp", "timer-migration"]
    assert all(e.share_pct is None and e.applies == RUNTIME for e in system)
    assert "echo madvise" in system[0].evidence
    assert "kernel.timer_migration=0" in system[1].evidence


def test_the_measuring_process_is_not_a_candidate():
    causes, switches = synthetic()
    plan = make_plan(causes, switches, {1: 2_000_000_000}, (1,), (0,), HOST, FINDINGS,
                     own_pid=456)
    assert not [e for e in plan if e.pid == 456]


def test_read_task_reads_flags_and_thread_group_through_odd_names():
    task = read_task(HOST, 457)
    assert (task.pid, task.tid, task.kernel, task.pinned) == (456, 457, False, False)
    assert read_task(HOST, 11).pinned and read_task(HOST, 123).kernel
    assert read_task(HOST, 999) is None


def test_one_row_of_two_tasks_with_one_name_is_shared_out_by_their_switches():
    """A detour of 10 us in which `bar` pid 456 ran 3 us, pid 1 (`x`) 2 us and `bar`
    pid 123 the last 5 us: the row's 10 us go 3:5 to the two bars."""
    causes = Table({"cpu": np.array([1]), "start_ns": np.array([1_000]),
                    "cause": np.array(["thread"], dtype=object),
                    "detail": np.array(["bar"], dtype=object), "duration_ns": np.array([10_000])})
    switches = Table({"cpu": np.array([1, 1, 1, 1]),
                      "timestamp_ns": np.array([1_000, 4_000, 6_000, 11_000]),
                      "next_comm": np.array(["bar", "x", "bar", "ns-detour/1"], dtype=object),
                      "next_pid": np.array([456, 1, 123, 7])})
    split, pids = split_threads(causes, switches)
    assert sorted(zip(pids.tolist(), split["duration_ns"].tolist(), strict=True)) == [(123, 6_250),
                                                                         (456, 3_750)]


def test_a_process_whose_switch_the_trace_missed_is_not_named_after_a_live_namesake(tmp_path):
    """/proc/123 (kdamond.0, a kernel thread) names a row without a switch (above);
    a process of the row's name alive now may be another one (a new `sed`)."""
    import shutil

    root = tmp_path / "host"
    shutil.copytree(HOST.root, root)
    (root / "proc/456/comm").write_text("foo\n")
    causes = Table({"cpu": np.array([1]), "start_ns": np.array([1_000]),
                    "cause": np.array(["thread"], dtype=object),
                    "detail": np.array(["foo"], dtype=object), "duration_ns": np.array([10_000])})
    (entry,) = [e for e in make_plan(causes, None, {1: SECOND}, (1,), (0,), HostRoot(root))
                if e.cpu == 1]
    assert entry.source == "tasks foo (pid unknown)" and entry.pid is None
    assert entry.applies == NOT_POSSIBLE and entry.share_pct == pytest.approx(100.0)


def test_a_stored_traced_scan_plans_every_row_at_most_once():
    """A real traced scan of CPU 1 (tests/fixtures/bundles/scan-161b2c8) with the
    kvm-guest tree: the entries (isolcpus aside) hold no more than the CPU lost, and
    each entry's share is its time over that."""
    bundle = noisescope.load(Path(__file__).parents[1] / "fixtures" / "bundles" / "scan-161b2c8")
    causes = bundle.table("detour_causes")
    lost = int(causes["duration_ns"][causes["cpu"] == 1].sum())
    plan = plan_bundle(bundle, (1,), (0,), root=str(HOST.root))
    claimed = [e for e in plan if e.cpu == 1 and e.action != "boot:isolcpus"]
    assert claimed and sum(e.lost_ns for e in claimed) <= lost
    for entry in claimed:
        assert entry.share_pct == pytest.approx(100 * entry.lost_ns / lost)


def test_the_terminal_plan_counts_the_smallest_candidates_instead_of_listing_them():
    from rich.console import Console

    from noisescope.render.tune import plan_table

    rows = [{"cpu": 1, "action": "task-affinity", "applies": "runtime", "share_pct": 5.0,
             "evidence": "process big"},
            {"cpu": 1, "action": "task-affinity", "applies": "runtime", "share_pct": 0.05,
             "evidence": "process tiny"},
            {"cpu": None, "action": "nohz_full", "applies": "boot", "share_pct": None,
             "evidence": "boot with nohz_full"}]
    console = Console(width=200, record=True)
    console.print(plan_table(rows))
    text = console.export_text()
    assert "process big" in text and "boot with nohz_full" in text
    assert "process tiny" not in text and "1 more candidate below 0.1%" in text
