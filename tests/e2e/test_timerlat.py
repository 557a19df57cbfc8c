"""`noisescope timerlat`, `scan --probes timerlat` and `import`, end to end."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

import noisescope
from noisescope.privileges import can_use_fifo
from noisescope.probes import Injection
from noisescope.scan import SECOND, ScanOptions, scan

from ..conftest import FIXTURES
from ..helpers import assert_usage_error, interrupted_run, measure_quietly
from ..unit.test_bundle import validate
from .test_scan_cli import CLI, run


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
    assert list(bundle.summaries) == ["ftq", "timerlat", "spectrum"]  # the FTQ series gives a spectrum
    check_consistent(bundle, loops=4000)  # 1 s / 250 us on every CPU
    assert "Timer latency" in done.stdout and "FTQ" in done.stdout


INTERVAL_NS = 100_000
LENGTH_NS = 3_000_000
RATE_HZ = 20.0


@pytest.mark.skipif(not can_use_fifo(99), reason="needs SCHED_FIFO (root or CAP_SYS_NICE)")
def test_injected_noise_shows_as_late_wakeups_and_missed_periods(measured_cpu):
    """A SCHED_FIFO 99 thread spins 3 ms on the CPU 20 times a second; the
    timerlat thread (FIFO 50, 100 us interval) cannot run meanwhile: it wakes
    right after each spin with a latency of about 3 ms, on the same timeline,
    and counts the ~29 deadlines it slept through as missed."""
    def measure():
        return scan(ScanOptions(cpus=(measured_cpu,), duration_ns=2 * SECOND,
                                probes=("timerlat",), rt=True, priority=50,
                                interval_ns=INTERVAL_NS,
                                injections=(Injection(measured_cpu, RATE_HZ, LENGTH_NS,
                                                      "thread"),)),
                    argv=["test"], kind="timerlat")

    def matched(bundle):
        """Per injection, the latency of the wakeup whose deadline fell at its
        start and which came after its end (None if there is none)."""
        series, injections = bundle.timerlat, bundle.injections
        deadlines = series.wakeup_ns - series.latency_ns
        latencies = []
        for start, length in zip(injections.start_ns, injections.duration_ns, strict=True):
            late = (deadlines >= start - INTERVAL_NS) & (deadlines <= start + INTERVAL_NS) & \
                   (series.wakeup_ns >= start + length)
            latencies.append(int(series.latency_ns[late].max()) if late.any() else None)
        return latencies

    def busy(bundle):  # time other tasks took, beyond what we injected
        s = bundle.summaries["timerlat"][0]
        injected = int(bundle.injections.duration_ns.sum())
        return max(0, s["run_delay_ns"] - injected) / s["measured_ns"]

    def good(bundle):
        latencies = matched(bundle)
        return sum(x is not None for x in latencies) >= 0.95 * len(latencies)

    bundle = measure_quietly(measure, good, busy)
    check_consistent(bundle)
    latencies = matched(bundle)
    found = [x for x in latencies if x is not None]
    assert len(latencies) >= 35, len(latencies)  # 2 s at 20 Hz
    assert len(found) >= 0.95 * len(latencies), (len(found), len(latencies), busy(bundle))
    # each of them slept through the ~29 deadlines inside the spin
    assert min(found) >= LENGTH_NS - 2 * INTERVAL_NS, sorted(found)[:5]
    per_injection = LENGTH_NS // INTERVAL_NS - 1
    s = bundle.summaries["timerlat"][0]
    assert s["missed"] >= 0.95 * len(found) * per_injection, (s["missed"], len(found))


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
    proc = interrupted_run([*CLI, "timerlat", "-D", "30s", "-o", str(out), "-q"], 3)
    assert proc.returncode == 130
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert not bundle.complete
    check_consistent(bundle)
    assert all(s["samples"] > 500 for s in bundle.summaries["timerlat"])


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
