"""Placement: spread vs packed on captured topologies, and what this machine can apply."""

from __future__ import annotations

import pytest

from noisescope.errors import UsageError
from noisescope.host import read_host_facts
from noisescope.placement import Placement, check_core_scheduling, choose_cpus, domains, resolve

from ..conftest import HOSTS


def test_numa_nodes_are_the_domains_and_cores_come_before_siblings():
    facts = read_host_facts(HOSTS / "tuned-node")  # 2 sockets = 2 nodes, 4 cores each, SMT2
    groups = domains(facts)
    assert groups == [(0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)]
    everything = set(facts.online)
    assert choose_cpus(4, "packed", groups, everything) == (0, 1, 2, 3)
    assert choose_cpus(4, "spread", groups, everything) == (0, 1, 4, 5)
    assert choose_cpus(6, "packed", groups, everything) == (0, 1, 2, 3, 8, 9)
    assert choose_cpus(2, "spread", groups, everything - {0, 4}) == (1, 5)
    with pytest.raises(UsageError, match="17 CPUs requested but only 16"):
        choose_cpus(17, "packed", groups, everything)


def test_sockets_are_the_domains_without_numa(tmp_path):
    facts = read_host_facts(HOSTS / "tuned-node")
    one_node = type(facts).from_dict({**facts.to_dict(), "numa_nodes": {"0": "0-15"}})
    assert facts.packages == {"0": "0-3,8-11", "1": "4-7,12-15"}
    assert domains(one_node) == domains(facts)


def test_on_one_node_spread_equals_packed_and_says_so(live_facts):
    usable = len(live_facts.online)
    resolved = resolve(Placement(ncpus=usable, layout="spread"), live_facts)
    assert resolved.cpus == live_facts.online
    if len(live_facts.numa_nodes) <= 1 and len(live_facts.packages) <= 1:
        assert "same as any other choice" in resolved.note
    with pytest.raises(UsageError, match="requested but only"):
        resolve(Placement(ncpus=usable + 1), live_facts)


def test_explicit_cpus_are_checked(live_facts):
    with pytest.raises(UsageError, match="CPU 999 is offline"):
        resolve(Placement(cpus=(999,)), live_facts)
    with pytest.raises(UsageError, match="either cpus .* or ncpus"):
        Placement(cpus=(0,), ncpus=1)
    with pytest.raises(UsageError, match="SCHED_FIFO priority 100 is out of range"):
        Placement(fifo_priority=100)


def test_core_scheduling_is_checked_before_any_run():
    try:
        check_core_scheduling()
    except UsageError as error:
        assert "core scheduling is not available: prctl(PR_SCHED_CORE) failed" in str(error)
        assert "CONFIG_SCHED_CORE" in str(error)
    else:
        pytest.skip("this kernel has core scheduling")


def test_a_stop_while_a_placed_child_starts_ends_that_child():
    """A Ctrl-C while spawn() waits for the thread that starts a placed child:
    spawn() raises it only once the child has started, and ends and reaps it
    (nobody else knows of it)."""
    import os
    import signal
    import subprocess
    import threading
    import time

    from noisescope.placement import ResolvedPlacement

    placement = ResolvedPlacement(cpus=tuple(sorted(os.sched_getaffinity(0)))[:1],
                                  fifo_priority=0, core_scheduling=False)
    started: dict[str, int] = {}
    handled, release = threading.Event(), threading.Event()

    def start() -> int:
        release.wait()  # until the Ctrl-C has been handled
        child = subprocess.Popen(["sleep", "30"])
        child.returncode = 0  # reaped by pid, not through Popen
        started["pid"] = child.pid
        return child.pid

    def on_sigint(signum, frame):
        handled.set()
        raise KeyboardInterrupt

    def ctrl_c():
        time.sleep(0.1)  # spawn() in its wait
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        handled.wait()
        release.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    helper = threading.Thread(target=ctrl_c)
    try:
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            placement.spawn(start)
        time.sleep(0.3)  # (a spawner that went on would have started the child by now)
        assert "pid" in started
        with pytest.raises(ChildProcessError):  # ended and reaped
            os.waitpid(started["pid"], os.WNOHANG)
    finally:
        release.set()
        helper.join()
        signal.signal(signal.SIGINT, previous)
        if "pid" in started:
            try:
                os.kill(started["pid"], signal.SIGKILL)
                os.waitpid(started["pid"], 0)
            except (ProcessLookupError, ChildProcessError):
                pass
