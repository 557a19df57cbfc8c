"""Single workload runs: what wait4 reports, metrics, failures, timeouts, placement."""

from __future__ import annotations

import os
import sys
import time

import pytest

from noisescope.errors import UsageError
from noisescope.placement import Placement, ResolvedPlacement, resolve
from noisescope.privileges import can_use_fifo
from noisescope.workload import Metric, Runner, Workload, read_proc_stat

UNPLACED = ResolvedPlacement(cpus=None, fifo_priority=0, core_scheduling=False)
SECOND = 1_000_000_000


def run(argv, *, metrics=(), placement=UNPLACED, timeout_ns=30 * SECOND, shell=False, env=()):
    workload = Workload("w", tuple(argv), shell=shell, env=tuple(env),
                        metrics=tuple(Metric.parse(m) for m in metrics))
    workload.check()
    with Runner() as runner:
        return runner.run(workload, placement, timeout_ns)


def test_metric_specs():
    assert Metric.parse("tps=tps: ([0-9.]+)") == Metric("tps", "tps: ([0-9.]+)", "higher")
    assert Metric.parse("lat:lower=p99=([0-9]+)").better == "lower"
    assert Metric.parse("n=[0-9,]+(?= items)").extract("12,345 items") == 12345.0  # whole match
    assert Metric.parse("x=x=(\\d+)").extract("x=1\nx=2\n", "x=3") == 2.0  # last match, stdout
    assert Metric.parse("x=x=(\\d+)").extract("", "x=3") == 3.0  # then stderr
    assert Metric.parse("x=x=(\\w+)").extract("x=abc") is None
    for bad, words in (("tps", "cannot read metric"), ("t-ps=x", "plain identifier"),
                       ("tps:up=x", "higher or lower"), ("tps=(", "bad regular expression")):
        with pytest.raises(UsageError, match=words):
            Metric.parse(bad)


def test_a_successful_run_reports_its_own_usage_and_metrics():
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n" \
           "print('rate: 42.5')"
    result = run([sys.executable, "-c", busy], metrics=["rate=rate: ([0-9.]+)", "gone=zzz(\\d)"])
    assert result.status == "ok" and result.exit_code == 0 and result.reason == ""
    assert result.user_ns + result.sys_ns >= 0.15 * SECOND
    assert result.wall_ns >= result.user_ns + result.sys_ns - 0.05 * SECOND
    assert result.metrics == {"rate": 42.5, "gone": None}
    assert result.minor_faults > 0 and result.system_context_switches > 0
    assert result.end_ticks > result.start_ticks


def test_max_rss_is_the_workloads_not_the_harnesses():
    ballast = bytearray(300 << 20)  # the harness holds 300 MiB
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    small = run(["true"])
    assert small.maxrss_kib < 20 * 1024
    large = run([sys.executable, "-c", "x = bytearray(80 << 20)\n"
                 "for i in range(0, len(x), 4096): x[i] = 1"])
    assert 80 * 1024 < large.maxrss_kib < 200 * 1024
    del ballast


def test_failures_keep_their_reason():
    failed = run(["sh", "-c", "echo tps: 7; echo 'it broke' >&2; exit 3"], metrics=["tps=tps: (\\d+)"])
    assert failed.status == "failed" and failed.exit_code == 3
    assert failed.reason == "exit status 3: it broke"
    assert failed.metrics["tps"] == 7.0
    killed = run(["sh", "-c", "kill -SEGV $$"])
    assert killed.status == "failed" and killed.reason == "killed by SIGSEGV"
    assert killed.signal == 11 and killed.exit_code == -1


def test_a_timeout_ends_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "pid"
    begin = time.monotonic()
    result = run([f"sleep 30 & echo $! > {pidfile}; wait"], shell=True, timeout_ns=SECOND // 2)
    assert result.status == "timeout" and "timed out after 0.5 s" in result.reason
    assert time.monotonic() - begin < 5
    grandchild = int(pidfile.read_text())
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{grandchild}") or \
        open(f"/proc/{grandchild}/stat").read().split()[2] == "Z"


def test_the_child_runs_where_it_was_placed(live_facts):
    cpu = live_facts.online[-1]
    result = run(["grep", "Cpus_allowed_list", "/proc/self/status"],
                 metrics=["cpus=Cpus_allowed_list:\\s*(\\d+)\\s*$"],
                 placement=resolve(Placement(cpus=(cpu,)), live_facts))
    assert result.metrics["cpus"] == cpu
    assert os.sched_getaffinity(0) != {cpu} or len(live_facts.online) == 1  # parent unchanged


@pytest.mark.skipif(not can_use_fifo(10), reason="SCHED_FIFO not permitted")
def test_fifo_priority_reaches_the_child(live_facts):
    result = run([sys.executable, "-c", "import os; print('policy', os.sched_getscheduler(0), "
                  "os.sched_getparam(0).sched_priority)"], metrics=["policy=policy (\\d+)",
                                                                    "prio=policy \\d+ (\\d+)"],
                 placement=resolve(Placement(fifo_priority=10), live_facts))
    assert result.metrics == {"policy": os.SCHED_FIFO, "prio": 10}
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


def test_environment_and_a_missing_command():
    result = run(["sh", "-c", "echo v=$NOISESCOPE_TEST_VALUE"], metrics=["v=v=(\\d+)"],
                 env=[("NOISESCOPE_TEST_VALUE", "17")])
    assert result.metrics["v"] == 17.0
    with pytest.raises(UsageError, match="command 'no-such-program-x' not found in PATH"):
        Workload("x", ("no-such-program-x",)).check()
    with pytest.raises(UsageError, match="does not exist or is not executable"):
        Workload("x", ("./nothing-here",)).check()


def test_proc_stat_counts_grow():
    ctxt, intr = read_proc_stat()
    time.sleep(0.05)
    later = read_proc_stat()
    assert later[0] > ctxt and later[1] >= intr
