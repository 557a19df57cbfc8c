"""tune's actions in the 8-CPU guest (issue 16), judged by counts: the
guest job (tune_settings_job.py) targets CPUs 4-5 (housekeeping 0-1,6-7;
2-3 are isolcpus) and counts, per CPU and over a window each, the switches
to the RCU grace-period kernel thread (pinned to CPU 4 beforehand) and to
unbound kworkers (given work from a thread on CPU 4): before any action,
with the kthread's affinity moved, with the unbound workqueue cpumask
written, and inside an isolated cpuset partition; each action is restored
before the next, and every value is compared with what it was."""

from __future__ import annotations

import json

import pytest

from noisescope.tune.plan import PF_NO_SETAFFINITY

TARGETS = ("4", "5")  # JSON keys


@pytest.fixture(scope="module")
def tuned(rig_guest) -> dict:
    return json.loads(rig_guest.succeeded("tune-settings").stdout)


def on_targets(counts: dict) -> int:
    return sum(n for cpu, n in counts.items() if cpu in TARGETS)


def elsewhere(counts: dict) -> int:
    return sum(n for cpu, n in counts.items() if cpu not in TARGETS)


def test_before_any_action_both_kinds_of_task_run_on_the_targets(tuned):
    """The premise: what the actions must take away is there to count."""
    assert tuned["kthread"] in ("rcu_preempt", "rcu_sched")
    assert on_targets(tuned["baseline"]["kthread"]) > 0
    assert on_targets(tuned["baseline"]["unbound"]) > 0


def test_a_moved_kernel_thread_never_runs_on_the_targets(tuned):
    moved = tuned["kthread_moved"]["kthread"]
    assert on_targets(moved) == 0 and elsewhere(moved) > 0  # it ran, elsewhere
    assert tuned["after_kthread"]["kthread_affinity"] == [4]  # restored: the pin of the setup


def test_the_workqueue_cpumask_keeps_unbound_kworkers_off_the_targets(tuned):
    assert tuned["workqueue_cpumask_set"] == "c3"  # CPUs 0-1,6-7
    counted = tuned["workqueue"]
    assert on_targets(counted["unbound"]) == 0 and elsewhere(counted["unbound"]) > 0
    assert on_targets(counted["kthread"]) > 0  # CPU 4 was counted: the pinned kthread ran there
    assert tuned["after_workqueue"] == tuned["after_kthread"]  # the cpumask restored


def test_an_isolated_partition_keeps_other_tasks_off_the_targets(tuned):
    assert "partition_refused" not in tuned, tuned.get("partition_refused")
    assert tuned["partition"] == "isolated" and tuned["partition_cpus"] == "4-5"
    during = tuned["during_partition"]
    assert during["root_cpus"] == "0-3,6-7" and during["subtree_control"] == "cpuset"
    assert len(during["cgroups"]) == 1 and during["cgroups"][0].startswith("noisescope-tune-")
    assert "Invalid argument" in tuned["pinned_to_target"]  # no new task may go there
    counted = tuned["partitioned"]["kthread"]
    assert on_targets(counted) == 0 and elsewhere(counted) > 0
    # (unbound kworkers are not counted here: on 6.1 the partition does not keep
    # them off, which is what the workqueue cpumask is for)
    kinds = [(c["kind"], c["value"], c["restore"]) for c in tuned["journal"]]
    assert kinds == [("file", "+cpuset", "-cpuset"), ("directory", "created", "absent"),
                     ("file", "isolated", "member")]
    assert len(tuned["journal_affinities"]) > 0 and tuned["partition_restore_failed"] == []


def test_every_value_is_put_back(tuned):
    assert tuned["after"] == tuned["before"]  # cpumask, kthread, cgroups, root CPUs
    # The partition rewrote every task's affinity (on 6.1 to all CPUs left, and all
    # of them once it ended); the journal put back every one user space can set.
    # Kernel threads that refuse affinity changes (PF_NO_SETAFFINITY: unbound
    # kworkers, workqueue rescuers) cannot be put back: the known limit.
    for tid, (before, now, described) in tuned["changed_affinities"].items():
        flags = int(described.rpartition("flags=")[2], 16)
        assert flags & PF_NO_SETAFFINITY, f"task {tid} {described}: {before} -> {now}"
