"""`noisescope scan` and `show` end to end, through the installed console script."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import noisescope

from ..helpers import RestrictedCpuset, assert_usage_error, cpuset_cgroup_root, interrupted_run
from ..unit.test_bundle import validate

CLI = [sys.executable, "-m", "noisescope"]


def run(*args, timeout=120, **kwargs):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          **kwargs)


def test_scan_writes_a_valid_bundle_and_show_reprints_it(tmp_path):
    out = tmp_path / "bundle"
    done = run("scan", "--duration", "1s", "-o", str(out), "--label", "ci<b>")
    assert done.returncode == 0, done.stderr
    for heading in ("Detours", "Hourglass", "FTQ", "FWQ"):
        assert heading in done.stdout
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert bundle.complete and bundle.label == "ci<b>"
    assert set(bundle.summaries) - {"attribution"} == {"detour", "ftq", "fwq", "spectrum"}
    cpus = bundle.parameters["cpus"]
    assert sorted(s["cpu"] for s in bundle.summaries["detour"]) == cpus
    assert bundle.detours.rows == sum(s["stored"] for s in bundle.summaries["detour"])
    assert bundle.ftq.rows == sum(s["quanta"] for s in bundle.summaries["ftq"])
    for s in bundle.summaries["detour"]:
        assert s["iterations"] > 0 and 0 <= s["noise_pct"] < 100
        # a window ends at the first clock read past its end: late by at most one detour
        assert 1e9 - 2 <= s["measured_ns"] <= 1e9 + s["max_ns"] + 2
    shown = run("show", str(out))
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[4:] == done.stdout.splitlines()[4:]


@pytest.mark.parametrize("args, words", [
    (["scan", "--cpus", "999"], "CPU 999 is offline"),
    (["scan", "--duration", "0"], "greater than zero"),
    (["scan", "--duration", "10q"], "cannot read --duration"),
    (["scan", "--threshold", "1ns"], "below what the loop can resolve"),
    (["scan", "-o", "/proc/noisescope-out"], "cannot write"),
    (["scan", "--probes", "ftq,nope"], "unknown probe nope"),
    (["scan", "--rt", "--priority", "120"], "priority 120 is out of range"),
    (["scan", "--inject", "1kHz@cpu0"], "cannot read noise"),
    (["scan", "--bogus"], "No such option"),
    (["show", "/nonexistent"], "does not exist"),
    (["show", "."], "is not a noisescope bundle"),
    (["inject", "--cpu", "999", "--for", "1s"], "CPU 999 is offline"),
])
def test_bad_input_is_one_line_and_exit_2(args, words, tmp_path):
    assert_usage_error(run(*args, cwd=tmp_path, timeout=60), words, tmp_path)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two allowed CPUs")
@pytest.mark.skipif(cpuset_cgroup_root() is None, reason="needs root and a cpuset cgroup controller")
def test_cpu_outside_the_cpuset_is_refused(tmp_path):
    first, other = sorted(os.sched_getaffinity(0))[:2]
    with RestrictedCpuset(str(first)) as cpuset:
        done = subprocess.run(cpuset.wrap([*CLI, "scan", "--cpus", str(other)]),
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert_usage_error(done, f"CPU {other} is outside this process's cpuset ({first})", tmp_path)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two allowed CPUs")
def test_a_narrowed_affinity_is_the_default_but_does_not_limit_cpus(tmp_path):
    """taskset chooses what a scan measures by default; an explicit --cpus may
    name any CPU of the cpuset (as isolated CPUs outside the boot affinity)."""
    first, other = sorted(os.sched_getaffinity(0))[:2]
    for cpus, expected in (([], [first]), (["--cpus", str(other)], [other])):
        out = tmp_path / f"b{len(cpus)}"
        done = subprocess.run(["taskset", "-c", str(first), *CLI, "scan", "--probes", "detour",
                               "--duration", "0.2s", "--no-trace", "--no-report", "-q", "-o",
                               str(out), *cpus], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert noisescope.load(out).manifest["parameters"]["cpus"] == expected


def test_ctrl_c_keeps_what_was_measured(tmp_path):
    out = tmp_path / "b"
    proc = interrupted_run([*CLI, "scan", "--duration", "20s", "--trace-cost", "0", "-o", str(out),
                            "-q"], 3, sampler="ns-detour/")
    assert proc.returncode == 130
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert not bundle.complete
    assert "interrupted" in [w.code.value for w in bundle.warnings]
    detour = bundle.summaries["detour"]
    # ftq and fwq never started (the detours are explained where traced)
    assert [k for k in bundle.summaries if k != "attribution"] == ["detour", "spectrum"]
    assert all(1e9 < s["measured_ns"] < 15e9 for s in detour)
    assert bundle.detours.rows > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial left


def test_sigterm_is_handled_like_ctrl_c(tmp_path):
    out = tmp_path / "b"
    proc = interrupted_run([*CLI, "scan", "--duration", "20s", "--probes", "ftq", "-o", str(out),
                            "-q"], 2, signal.SIGTERM, sampler="ns-ftq/")
    assert proc.returncode == 130
    bundle = noisescope.load(out)
    assert not bundle.complete and bundle.ftq.rows > 500


def test_without_privileges_the_scan_says_what_it_skipped(tmp_path):
    """Root without CAP_SYS_NICE and CAP_IPC_LOCK (as in many containers), or
    an ordinary user: --rt and mlockall are skipped and recorded."""
    drop = [] if os.geteuid() != 0 else ["setpriv", "--bounding-set=-sys_nice,-ipc_lock"]
    if drop and shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to drop capabilities")
    out = tmp_path / "b"
    done = subprocess.run([*drop, *CLI, "scan", "--rt", "--duration", "300ms", "--probes",
                           "detour", "-q", "-o", str(out)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "SCHED_FIFO priority 95 skipped" in done.stdout
    bundle = noisescope.load(out)
    assert bundle.parameters["priority"] == 0
    assert bundle.manifest["privileges"]["rt"].startswith("skipped")
    assert bundle.manifest["privileges"]["mlockall"].startswith("skipped")
    assert [w.code.value for w in bundle.warnings].count("privileges") == 2


def test_inject_command_reports_what_it_did():
    done = run("inject", "--cpu", "0", "--rate", "500Hz", "--length", "10us", "--for", "1s")
    assert done.returncode == 0, done.stderr
    count = int(done.stdout.split()[0])
    assert 450 <= count <= 510, done.stdout


def test_inject_for_ends_on_the_clock_when_the_injector_falls_behind(measured_cpu):
    """1 MHz of 1 ns injections: every wakeup takes longer than the 1 us period, so the
    injector is always behind its deadlines. --for 1s ends it after a second all the
    same (it used to catch up with every missed deadline: 20 s at 95% of the CPU)."""
    from noisescope.probes.inject import inject
    from noisescope.probes.injection import Injection

    began = time.monotonic()
    outcome = inject(Injection(measured_cpu, 1e6, 1, "thread"), 1_000_000_000)
    elapsed = time.monotonic() - began
    assert 1.0 <= elapsed < 2.5, elapsed
    assert 0 < outcome.count <= 1_000_000 * elapsed


def test_an_interrupted_inject_exits_130_and_says_what_it_did():
    proc = subprocess.Popen([*CLI, "inject", "--cpu", "0", "--rate", "100Hz", "--length", "10us"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    proc.send_signal(2)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert int(out.split()[0]) > 0 and "injections" in out
    assert err.strip().splitlines()[-1].startswith("noisescope: interrupted")


def test_version_and_help_end_with_examples():
    assert run("--version").stdout.strip().endswith(noisescope.__version__)
    for command in ("scan", "show", "inject", "explain", "cleanup"):
        text = run(command, "--help").stdout
        assert "EXAMPLES" in text and text.strip().splitlines()[-1].strip().startswith(
            "noisescope")


def test_commands_are_imported_only_when_they_run():
    """The CLI lists every command, and a command loads only its own modules
    (a scan keeps the memory that compare, predict or cluster would take)."""
    from noisescope.cli.main import COMMANDS

    listing = run("--help").stdout
    assert all(f"  {name} " in listing for name in COMMANDS)
    probe = ("import sys; from noisescope.cli.main import cli; cli.get_command(None, 'scan'); "
             "print(' '.join(sorted(m for m in sys.modules if m.startswith('noisescope.'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True).stdout.split()
    assert "noisescope.cli.scan" in loaded
    for elsewhere in ("noisescope.cli.compare", "noisescope.cli.predict", "noisescope.cluster",
                      "noisescope.experiment", "noisescope.render.report"):
        assert elsewhere not in loaded


def test_python_api_json_safe(tmp_path):
    done = run("scan", "--duration", "1s", "--probes", "detour", "-o", str(tmp_path / "b"))
    assert done.returncode == 0
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["host"]["hz_estimate"]["hz"] in (None, 100, 250, 300, 1000)
