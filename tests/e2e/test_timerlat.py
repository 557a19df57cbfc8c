"""`noisescope timerlat`, `scan --probes timerlat` and `import`, end to end."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

import noisescope
from noisescope.pmqos import cpu_latency_request
from noisescope.privileges import can_use_fifo
from noisescope.probes import Injection
from noisescope.scan import SECOND, ScanOptions, scan
from noisescope.trace.scanning import TraceOptions

from ..conftest import FIXTURES
from ..helpers import assert_usage_error, interrupted_run, measure_quietly
from ..trace_checks import INJECTOR_OVERHEAD_NS
from ..unit.test_bundle import validate
from .test_scan_cli import CLI, run
from .test_trace import needs_tracefs, our_instances


def check_consistent(bundle, loops=None):
    """What must hold in any timerlat bundle, however noisy the machine."""
    series, histogram = bundle.timerlat, bundle.timerlat_histogram
    for s in bundle.summaries["timerlat"]:
        cpu = s["cpu"]
        if loops is not None:
            assert s["samples"] + s["missed"] == loops  # every deadline: sampled or missed
        rows = series.where(cpu=cpu)
        assert rows.rows == s["stored"] == s["samples"]
        assert histogram.where(cpu=cpu)["count"].sum() == s["samples"]
        assert s["histogram_overflow"] == int((rows.latency_ns >= s["histogram_limit_ns"]).sum())
        assert rows.latency_ns.min() == s["min_ns"] and rows.latency_ns.max() == s["max_ns"]
        assert s["min_ns"] <= s["avg_ns"] <= s["max_ns"]
        assert np.all(np.diff(rows.wakeup_ns) > 0)
        # a sample L late overslept floor(L / interval) deadlines (across back-to-back
        # windows too), fewer only if the run ended inside the stall
        overslept = int((rows.latency_ns // s["interval_ns"]).sum())
        last = int(rows.latency_ns[-1] // s["interval_ns"])
        assert overslept - last <= s["missed"] <= overslept


def test_timerlat_command_writes_a_cyclictest_like_bundle(tmp_path, measured_cpu):
    out = tmp_path / "b"
    done = run("timerlat", "--cpus", str(measured_cpu), "-i", "500", "-l", "1000", "-h", "200",
               "-o", str(out), "-q", "--label", "vm")
    assert done.returncode == 0, done.stderr
    assert "Timer latency" in done.stdout
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert bundle.kind == "timerlat" and bundle.label == "vm"
    assert bundle.parameters["interval_ns"] == 500_000 and bundle.parameters["loops"] == 1000
    assert bundle.parameters["histogram_ns"] == 200_000
    check_consistent(bundle, loops=1000)
    shown = run("show", str(out))
    assert shown.returncode == 0 and "Timer latency" in shown.stdout


def test_scan_runs_timerlat_beside_the_other_probes(tmp_path):
    out = tmp_path / "b"
    done = run("scan", "--probes", "ftq,timerlat", "--duration", "1s", "--interval", "250us",
               "-o", str(out), "-q")
    assert done.returncode == 0, done.stderr
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    traced = bundle.manifest["trace"]["enabled"]
    assert list(bundle.summaries) == ["ftq", "timerlat", *(["late_wakeups"] if traced else []),
                                      "spectrum"]  # the FTQ series gives a spectrum
    check_consistent(bundle, loops=4000)  # 1 s / 250 us on every CPU
    assert "Timer latency" in done.stdout and "FTQ" in done.stdout


INTERVAL_NS = 100_000
LENGTH_NS = 3_000_000
RATE_HZ = 20.0


def measured(bundle) -> int:
    """The injections whose spin lies inside one of the timerlat thread's
    windows (one that falls in the gap between windows delays no wakeup)."""
    windows, injections = bundle.windows, bundle.injections
    starts, ends = injections.start_ns, injections.start_ns + injections.duration_ns
    inside = np.zeros(injections.rows, bool)
    for begin, end in zip(windows.start_ns, windows.end_ns, strict=True):
        inside |= (starts >= begin) & (ends <= end)
    return int(inside.sum())


def matched(bundle) -> list[int | None]:
    """Per injection, the index in the timerlat table of the wakeup whose
    deadline fell at its start and which came after its end (None if none).
    The deadline comes within an interval after the start, or before it when
    the thread was still waking from it (the injector's own switch-in and other
    noise delay it by tens to hundreds of us here); the latencies found are
    bounded from above in the tests."""
    series, injections = bundle.timerlat, bundle.injections
    deadlines = series.wakeup_ns - series.latency_ns
    found = []
    for start, length in zip(injections.start_ns, injections.duration_ns, strict=True):
        late = np.flatnonzero((deadlines >= start - 10 * INTERVAL_NS)
                              & (deadlines <= start + INTERVAL_NS)
                              & (series.wakeup_ns >= start + length))
        found.append(int(late[np.argmax(series.latency_ns[late])]) if len(late) else None)
    return found


def attributed_to_injector(bundle, cpu: int) -> list[bool]:
    """Per matched wakeup: the injector thread, by name, holds at least 95%
    of the injected time inside the wakeup's span (other noise may add more),
    and no more than that time plus its own switches around the spin."""
    series, injections = bundle.timerlat, bundle.injections
    causes = bundle.late_wakeup_causes.where(cpu=cpu, cause="thread", detail=f"ns-inject/{cpu}")
    injector_ns = dict(zip(causes.start_ns.tolist(), causes.duration_ns.tolist(), strict=True))
    verdicts = []
    for k, i in enumerate(matched(bundle)):
        if i is None:
            continue
        deadline, wakeup = int(series.wakeup_ns[i] - series.latency_ns[i]), int(series.wakeup_ns[i])
        start = int(injections.start_ns[k])
        inside = min(wakeup, start + int(injections.duration_ns[k])) - max(deadline, start)
        named = injector_ns.get(deadline, 0)
        verdicts.append(0.95 * inside <= named <= inside + INJECTOR_OVERHEAD_NS)
    return verdicts


@pytest.fixture(scope="module")
def injected_timerlat(measured_cpu):
    """A SCHED_FIFO 99 thread spins 3 ms on the CPU 20 times a second beside
    the timerlat thread (FIFO 50, 100 us interval); traced where tracefs is
    usable, wakeups 1 ms late or more explained."""
    if not can_use_fifo(99):
        pytest.skip("needs SCHED_FIFO (root or CAP_SYS_NICE)")

    def measure():
        # idle states held to polling, as cyclictest does: on a VM a halted CPU
        # wakes when the host gets round to it (100s of us late, often, here)
        with cpu_latency_request(0):
            return scan(ScanOptions(cpus=(measured_cpu,), duration_ns=2 * SECOND,
                                    probes=("timerlat",), rt=True, priority=50,
                                    interval_ns=INTERVAL_NS,
                                    injections=(Injection(measured_cpu, RATE_HZ, LENGTH_NS,
                                                          "thread"),),
                                    trace=TraceOptions(wakeup_threshold_ns=1_000_000)),
                        argv=["test"], kind="timerlat")

    def good(bundle):
        found = [i for i in matched(bundle) if i is not None]
        if len(found) < 0.95 * measured(bundle):
            return False
        traced = bundle.has_table("late_wakeups")
        return not traced or np.mean(attributed_to_injector(bundle, measured_cpu)) >= 0.95

    return measure_quietly(measure, good, busy)


# A wakeup the host delayed: its trace explains this much of it as the CPU gone
# (hypervisor), a late interrupt or a slow exit from idle (VM wakeups of ~1 ms,
# on the busy shared VM).
HOST_DELAY_NS = 100_000


def busy(bundle):
    """Time other tasks took beyond what we injected, or the share of injections
    whose wakeup the trace shows the host holding back, whichever is more."""
    s = bundle.summaries["timerlat"][0]
    injected = int(bundle.injections.duration_ns.sum())
    tasks = max(0, s["run_delay_ns"] - injected) / s["measured_ns"]
    if not bundle.has_table("late_wakeup_causes"):
        return tasks
    causes = bundle.late_wakeup_causes.where(cause="unexplained")
    per_wakeup: dict[int, int] = {}
    for start, ns in zip(causes.start_ns.tolist(), causes.duration_ns.tolist(), strict=True):
        per_wakeup[start] = per_wakeup.get(start, 0) + ns
    delayed = sum(ns >= HOST_DELAY_NS for ns in per_wakeup.values())
    return max(tasks, delayed / max(1, bundle.injections.rows))


def test_injected_noise_shows_as_late_wakeups_and_missed_periods(injected_timerlat):
    """The timerlat thread cannot run while the injector spins: it wakes
    right after each spin with a latency of about 3 ms, on the same timeline,
    and counts the ~29 deadlines it slept through as missed (never more than
    its latencies say it overslept: check_consistent)."""
    bundle = injected_timerlat
    check_consistent(bundle)
    pairs = [(k, i) for k, i in enumerate(matched(bundle)) if i is not None]
    found = np.array([int(bundle.timerlat.latency_ns[i]) for _, i in pairs])
    # how long each spin took by the injector's own record (the host can stretch it)
    spun = np.array([max(LENGTH_NS, int(bundle.injections.duration_ns[k])) for k, _ in pairs])
    injections = bundle.injections.rows
    assert 35 <= injections <= 41, injections  # 2 s at 20 Hz
    assert measured(bundle) >= 0.85 * injections  # a 3 ms spin at 20 Hz, 0.9 s windows
    assert measured(bundle) <= len(found) + 0.05 * injections, (len(found), measured(bundle),
                                                                 busy(bundle))
    # The deadline of a matched wakeup lies within an interval of the spin's
    # start, and the thread gets the CPU back right after the spin's end (the
    # switch takes tens of us here): a latency of the spin's length +- an
    # interval, with another interval of slack on either side (for the switch,
    # on the high side; a late one, delayed by other noise too, now and then).
    assert found.min() >= LENGTH_NS - 2 * INTERVAL_NS, np.sort(found)[:5]
    assert np.mean(found <= spun + 2 * INTERVAL_NS) >= 0.95, (found - spun).max()
    per_injection = LENGTH_NS // INTERVAL_NS - 1
    s = bundle.summaries["timerlat"][0]
    assert s["missed"] >= 0.95 * len(found) * per_injection, (s["missed"], len(found))


@needs_tracefs
def test_late_wakeups_are_explained_by_the_injector(injected_timerlat, measured_cpu):
    """Ground truth for the explanation: the late wakeups the injector
    caused are attributed to it, by name, with >= 95% of its time."""
    bundle = injected_timerlat
    verdicts = attributed_to_injector(bundle, measured_cpu)
    assert len(verdicts) >= measured(bundle) - 0.05 * bundle.injections.rows
    assert np.mean(verdicts) >= 0.95, (sum(verdicts), len(verdicts), busy(bundle))
    (row,) = bundle.summaries["late_wakeups"]
    assert row["threshold_ns"] == 1_000_000 and row["wakeups"] == bundle.late_wakeups.rows
    name = f"ns-inject/{measured_cpu}"
    injector = [c for c in row["causes"] if (c["cause"], c["detail"]) == ("thread", name)]
    # it delayed one wakeup per injection: the one after its spin
    assert injector and sum(verdicts) <= injector[0]["count"] <= bundle.injections.rows
    primary = bundle.late_wakeups.where(cause="thread", cause_detail=name)
    assert 0.9 * len(verdicts) <= primary.rows <= bundle.injections.rows  # mainly its doing
    # the wakeup's own timer interrupt is told apart from other timers
    labels = {(c["cause"], c["detail"]) for c in row["causes"]}
    assert ("timer", "hrtimer_wakeup (own)") in labels, labels


@needs_tracefs
def test_every_wakeup_explained_then_explained_again(tmp_path, measured_cpu):
    """--trace-threshold 0 explains every wakeup: the split of each adds up
    to its latency, and nearly each has its own timer interrupt. `explain`
    shows them again, or at another threshold from the stored trace."""
    out = tmp_path / "b"
    done = run("timerlat", "--cpus", str(measured_cpu), "-i", "200", "-l", "1000",
               "--trace-threshold", "0", "-o", str(out), "-q")
    assert done.returncode == 0, done.stderr
    assert "Causes of wakeups at least 0 ns late" in done.stdout
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    late, causes = bundle.late_wakeups, bundle.late_wakeup_causes
    samples = bundle.summaries["timerlat"][0]["samples"]
    # 1000 deadlines; tracing every event makes some of 200 us ones missed
    # (up to a fifth on a slow machine), each one counted
    check_consistent(bundle, loops=1000)
    assert late.rows == bundle.timerlat.rows == samples >= 500
    per_wakeup = {int(d): 0 for d in late.start_ns}
    for start, ns in zip(causes.start_ns.tolist(), causes.duration_ns.tolist(), strict=True):
        per_wakeup[start] += ns
    assert per_wakeup == dict(zip(late.start_ns.tolist(), late.duration_ns.tolist(), strict=True))
    own = causes.filter(causes.detail == "hrtimer_wakeup (own)")
    assert len(np.unique(own.start_ns)) >= 0.9 * late.rows
    (row,) = bundle.summaries["late_wakeups"]
    assert row["wakeups"] == samples and row["latency_ns"] == int(late.duration_ns.sum())

    again = run("explain", str(out), "--trace-threshold", "30us", "--worst", "1")
    assert again.returncode == 0, again.stderr
    assert "Causes of wakeups at least 30 us late" in again.stdout
    later = int((bundle.timerlat.latency_ns >= 30_000).sum())
    assert ("(no wakeups)" in again.stdout) == (later == 0)
    stored = run("explain", str(out), "--worst", "0")
    assert stored.returncode == 0 and "Causes of wakeups at least 0 ns late" in stored.stdout


def test_without_privileges_timerlat_runs_at_normal_priority(tmp_path):
    drop = [] if os.geteuid() != 0 else ["setpriv", "--bounding-set=-sys_nice,-ipc_lock"]
    if drop and shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop capabilities")
    out = tmp_path / "b"
    done = subprocess.run([*drop, *CLI, "timerlat", "--cpus", "0", "-l", "200", "-q", "-o",
                           str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "SCHED_FIFO priority 95 skipped" in done.stdout
    bundle = noisescope.load(out)
    assert bundle.parameters["priority"] == 0
    assert bundle.manifest["privileges"]["rt"].startswith("skipped")
    check_consistent(bundle, loops=200)


def test_ctrl_c_keeps_the_latencies_measured(tmp_path):
    out = tmp_path / "b"
    proc = interrupted_run([*CLI, "timerlat", "-D", "30s", "-o", str(out), "-q"], 2,
                           sampler="ns-timerlat/")
    assert proc.returncode == 130
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert not bundle.complete
    check_consistent(bundle)
    assert all(s["samples"] > 500 for s in bundle.summaries["timerlat"])
    # tracing (where it ran) is undone and what it recorded is kept and explained
    assert f"noisescope-{proc.pid}" not in our_instances()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no spool left
    if bundle.manifest["trace"]["enabled"]:
        assert bundle.events.rows > 0 and "late_wakeups" in bundle.summaries


CYCLICTEST = FIXTURES / "imports" / "cyclictest"


@pytest.mark.parametrize("args, words", [
    (["timerlat", "--interval", "0"], "--interval must be greater than zero"),
    (["timerlat", "--interval", "2us"], "interval 2 us is too short"),
    (["timerlat", "--priority", "120"], "priority 120 is out of range"),
    (["timerlat", "--priority", "-1"], "priority -1 is out of range"),
    (["timerlat", "--loops", "0"], "--loops must be greater than zero"),
    (["timerlat", "--loops", "10", "-D", "1s"], "--loops and --duration both given"),
    (["timerlat", "--histogram", "0"], "histogram limit 0 ns is out of range"),
    (["timerlat", "--cpus", "999"], "CPU 999 is offline"),
    (["timerlat", "--trace-threshold", "-5us"], "--trace-threshold '-5us' is negative"),
    (["scan", "--probes", "timerlat", "--interval", "1ns"], "is too short"),
    (["scan", "--probes", "timerlat", "--interval", "2s"], "longer than a measuring window"),
    (["import", "cyclictest", "/nonexistent.txt"], "does not exist"),
    (["import", "nope", "x"], "'nope' is not one of 'cyclictest'"),
    (["import", "oslat", str(CYCLICTEST / "hist.json")], "thread 0 has no 'duration'"),
])
def test_bad_input_is_one_line_and_exit_2(args, words, tmp_path):
    assert_usage_error(run(*args, cwd=tmp_path, timeout=60), words, tmp_path)


def test_truncated_import_names_the_line_and_writes_nothing(tmp_path):
    lines = (CYCLICTEST / "hist-quiet.txt").read_text().splitlines()
    damaged = tmp_path / "cut.txt"
    damaged.write_text("\n".join(lines[:60]))
    done = run("import", "cyclictest", str(damaged), cwd=tmp_path)
    assert done.returncode == 2
    assert "cut.txt:60: truncated" in done.stderr and len(done.stderr.splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["cut.txt"]


def test_import_then_show(tmp_path):
    done = run("import", "cyclictest", str(CYCLICTEST / "hist-quiet.txt"), "--cpus", "0-1",
               "--label", "old", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = tmp_path / "noisescope-cyclictest-hist-quiet"
    shown = run("show", str(written))
    assert shown.returncode == 0
    assert shown.stdout == done.stdout
    assert "imported: cyclictest histogram text from hist-quiet.txt" in shown.stdout
    bundle = noisescope.load(written)
    validate(bundle.manifest)
    assert [s["cpu"] for s in bundle.summaries["timerlat"]] == [0, 1]


@pytest.mark.parametrize("command", ["timerlat", "import"])
def test_help_ends_with_examples(command):
    text = run(command, "--help").stdout
    assert "EXAMPLES" in text
    assert text.strip().splitlines()[-1].strip().startswith("noisescope")
