"""Tracing on the real tracefs (root): the session's lifecycle, leftovers,
mounting, interruption, and attribution against injected ground truth.
Skipped with a reason where there is no root or no tracefs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import noisescope
from noisescope.analysis.groundtruth import inside_windows
from noisescope.probes import Injection
from noisescope.scan import SECOND, ScanOptions, scan
from noisescope.tables import Table
from noisescope.trace import TraceSession, attribute, cleanup, event_source, sched_switches
from noisescope.trace.scanning import TraceOptions
from noisescope.trace.tracefs import DEFAULT_MOUNTPOINT, tracefs_mounts

from ..helpers import RT, dead_pid, measure_quietly, run_delay_fraction, thread_names
from ..trace_checks import injections_attributed, local_timers_explained
from ..unit.test_bundle import validate

CLI = [sys.executable, "-m", "noisescope"]
TRACEFS = DEFAULT_MOUNTPOINT


def _tracefs_usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not TRACEFS.is_dir():
        return "this kernel has no tracefs"
    return None


needs_tracefs = pytest.mark.skipif(_tracefs_usable() is not None, reason=_tracefs_usable() or "")


def our_instances() -> list[str]:
    try:
        return sorted(n for n in os.listdir(TRACEFS / "instances") if n.startswith("noisescope-"))
    except FileNotFoundError:
        return []


def global_settings() -> dict[str, str]:
    """What other tools see: the global buffer's settings."""
    names = ["trace_clock", "tracing_on", "buffer_size_kb", "current_tracer", "set_event",
             "tracing_cpumask", "options/overwrite"]
    return {n: (TRACEFS / n).read_text() for n in names if (TRACEFS / n).exists()}


def busy_on_cpu0(seconds: float) -> None:
    """Work on CPU 0 (an idle CPU has no tick), with a short sleep in the
    middle so that CPU 0 switches away from us at least once (on a quiet
    machine nothing else would), then go back where we were."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        for _ in range(2):
            end = time.monotonic() + seconds / 2
            while time.monotonic() < end:
                pass
            time.sleep(0.002)
    finally:
        os.sched_setaffinity(0, allowed)


@needs_tracefs
def test_session_records_and_restores_everything(live_facts, tmp_path):
    from noisescope.clock import measurement_clock

    before = global_settings()
    clock = measurement_clock(live_facts.tsc_flags)
    with TraceSession((0,), clock, recording_ns=SECOND) as session:
        name = session.info.instance
        assert name == f"noisescope-{os.getpid()}" and name in our_instances()
        assert session.instance.read("trace_clock").count("[") == 1
        assert "[x86-tsc]" in session.instance.read("trace_clock") or clock.counter != "tsc"
        assert session.instance.read("tracing_on").strip() == "0"
        session.start()
        busy_on_cpu0(0.1)
        recording = session.stop(tmp_path, "run")
    assert name not in our_instances()
    assert recording.pages[0].stat().st_size > 0
    capture = session.decode(recording)
    assert global_settings() == before
    # 100 ms of work on CPU 0: its timer ticks and switches, on the clock's timeline
    events = capture.events.events
    assert set(events["cpu"].tolist()) <= {0}
    start, end = capture.coverage["start_ns"][0], capture.coverage["end_ns"][0]
    assert (events["timestamp_ns"] >= start).all() and (events["timestamp_ns"] <= end).all()
    assert (events["event"] == "local_timer_entry").sum() >= 5
    assert capture.events.switches.rows >= 1


@needs_tracefs
def test_an_error_inside_the_session_still_restores(live_facts):
    from noisescope.clock import measurement_clock

    with pytest.raises(RuntimeError), TraceSession((0,), measurement_clock(live_facts.tsc_flags)) as s:
        s.start()
        raise RuntimeError("boom")
    assert f"noisescope-{os.getpid()}" not in our_instances()


@needs_tracefs
def test_leftovers_of_killed_runs_go_and_other_tools_stay():
    stale = TRACEFS / "instances" / f"noisescope-{dead_pid()}"
    other = TRACEFS / "instances" / "someothertool-test"
    alive = TRACEFS / "instances" / f"noisescope-{os.getppid()}"  # a live process's instance
    made = []
    try:
        for path in (stale, other, alive):
            if not path.exists():
                path.mkdir()
                made.append(path)
        removed, failed = cleanup()
        assert f"removed tracefs instance {stale.name} (its process is gone)" in removed and not failed
        assert not stale.exists() and other.exists() and alive.exists()
    finally:
        for path in made:
            if path.exists():
                path.rmdir()


@needs_tracefs
def test_tracefs_is_mounted_when_needed_and_unmounted_after(tmp_path, live_facts):
    from noisescope.clock import measurement_clock

    where = tmp_path / "tracing"
    where.mkdir()
    session = TraceSession((0,), measurement_clock(live_facts.tsc_flags), mountpoint=where)
    try:
        session.open()
        assert session.info.mounted_by_us
        assert where in tracefs_mounts(Path("/proc/self/mounts").read_text())
        session.close()
        if not session.info.notes:  # another tool's instance keeps it mounted, and says so
            assert where not in tracefs_mounts(Path("/proc/self/mounts").read_text())
        else:
            assert "left mounted" in session.info.notes[-1]
    finally:
        session.close()
        if where in tracefs_mounts(Path("/proc/self/mounts").read_text()):
            subprocess.run(["umount", str(where)], check=False)


def traced_scan(cpu: int, inject: bool, mode: str = "thread"):
    injections = (Injection(cpu, 1000.0, 20_000, mode),) if inject else ()
    return scan(ScanOptions(cpus=(cpu,), duration_ns=2 * SECOND, probes=("detour",),
                            injections=injections, rt=RT, trace=TraceOptions(cost_reference_ns=0)),
                argv=["test"])


@needs_tracefs
def test_thread_injections_are_named_and_local_timers_are_the_tick(measured_cpu):
    """Ground truth: a SCHED_FIFO thread injecting 1 kHz x 20 us beside the
    sampler. Its noise must be attributed to it by name; every local timer
    interrupt in a window must sit in a detour and be named (the tick)."""
    def checks(bundle):
        d, c, w = bundle.detours, bundle.detour_causes, bundle.windows
        named = injections_attributed(bundle.injections, d, c, w, measured_cpu)
        timers, tick = local_timers_explained(bundle.events, d, c, w, measured_cpu)
        return named, timers, tick

    def good(bundle):
        named, timers, tick = checks(bundle)
        return named.mean() >= 0.95 and timers[tick].mean() >= 0.99 and timers.mean() >= 0.99

    bundle = measure_quietly(lambda: traced_scan(measured_cpu, inject=True), good, run_delay_fraction)
    validate(bundle.manifest)
    named, timers, tick = checks(bundle)
    lost = bundle.manifest["trace"]["recordings"][0]["lost_events"]
    context = (run_delay_fraction(bundle), lost)
    assert len(named) >= 1900, context  # 2 s at 1 kHz
    assert named.mean() >= 0.95, context
    assert tick.sum() >= 400, context  # 2 s at 250 Hz (or more)
    assert timers[tick].mean() >= 0.99, context
    assert timers.mean() >= 0.99, context
    # the breakdown names the injector and shows what the guest cannot explain
    (row,) = bundle.summaries["attribution"]
    labels = {(c["cause"], c["detail"]) for c in row["causes"]}
    assert ("thread", f"ns-inject/{measured_cpu}") in labels and ("tick", "") in labels
    assert any(cause == "unexplained" for cause, _ in labels)
    switches = sched_switches(bundle)
    assert {"cpu", "timestamp_ns", "prev_comm", "prev_pid", "next_comm", "next_pid",
            "prev_state"} <= set(switches.columns)
    assert f"ns-inject/{measured_cpu}" in set(switches["next_comm"].tolist())


@needs_tracefs
def test_signal_injections_are_named_from_the_injector_s_own_record(measured_cpu):
    """Ground truth: 1 kHz x 20 us spun in a signal handler on the sampler's
    own thread, in user space where the kernel records nothing. The detour
    around each injection gives its handler's time to `injected signal`, and
    the timer that raised the signal is named beside it."""
    def injected_ns(bundle):
        causes = bundle.detour_causes.where(cpu=measured_cpu, cause="injected", detail="signal")
        inside = bundle.injections.where(cpu=measured_cpu)
        keep = inside_windows(inside["start_ns"], inside["start_ns"] + inside["duration_ns"],
                              bundle.windows.where(cpu=measured_cpu))
        return int(causes["duration_ns"].sum()), int(inside["duration_ns"][keep].sum())

    def good(bundle):
        named, truth = injected_ns(bundle)
        return truth > 0 and 0.95 * truth <= named <= truth

    bundle = measure_quietly(lambda: traced_scan(measured_cpu, inject=True, mode="signal"), good,
                             run_delay_fraction)
    named, truth = injected_ns(bundle)
    assert truth >= 1900 * 20_000, truth  # 2 s at 1 kHz
    assert 0.95 * truth <= named <= truth, (named, truth, run_delay_fraction(bundle))
    detours = bundle.detours.where(cpu=measured_cpu)
    assert (detours["cause"] == "injected").sum() >= 1900
    (row,) = bundle.summaries["attribution"]
    labels = {(c["cause"], c["detail"]) for c in row["causes"]}
    assert ("timer", "posix_timer_fn") in labels


def run(*args, timeout=120, **kwargs):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


@needs_tracefs
def test_scan_explain_and_no_trace_through_the_cli(tmp_path):
    out = tmp_path / "traced"
    done = run("scan", "--duration", "1s", "--probes", "detour", "--trace-cost", "500ms", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "Causes of detours" in done.stdout and "Worst detours" in done.stdout
    assert "trace: x86-tsc clock" in done.stdout or "trace: mono_raw clock" in done.stdout
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    cost = bundle.manifest["trace"]["cost"]
    assert cost["reference_ns"] == 500_000_000 and len(cost["per_cpu"]) == len(bundle.parameters["cpus"])
    assert {"cause", "cause_detail", "trace_events"} <= set(bundle.detours.columns)
    assert bundle.events.rows == sum(r["events"] for r in bundle.manifest["trace"]["recordings"])
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no spool left
    # explained while scanning from the raw pages: as from the events stored in the bundle
    detours = bundle.detours
    again = attribute(Table({c: detours[c] for c in ("cpu", "start_ns", "duration_ns")}),
                      event_source(bundle), bundle.trace_coverage)
    for name in again.causes.columns:
        assert np.array_equal(again.causes[name], bundle.detour_causes[name]), name
    for name in again.primary.columns:
        assert np.array_equal(again.primary[name], detours[name]), name
    explained = run("explain", str(out), "--worst", "2")
    assert explained.returncode == 0, explained.stderr
    assert "Causes of detours" in explained.stdout and explained.stdout.count("+") > 0

    plain = tmp_path / "plain"
    done = run("scan", "--duration", "300ms", "--probes", "detour", "--no-trace", "-o", str(plain))
    assert done.returncode == 0, done.stderr
    assert "trace: off (turned off (--no-trace))" in done.stdout
    manifest = json.loads((plain / "manifest.json").read_text())
    assert manifest["trace"] == {"enabled": False, "reason": "turned off (--no-trace)"}
    assert "tracing_unavailable" not in [w["code"] for w in manifest["warnings"]]
    refused = run("explain", str(plain))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "has no kernel trace" in refused.stderr


@needs_tracefs
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_scan_keeps_its_trace_and_leaves_no_instance(tmp_path, stop):
    out = tmp_path / "b"
    proc = subprocess.Popen([*CLI, "scan", "--duration", "20s", "--probes", "detour,ftq",
                             "--trace-cost", "0", "-o", str(out), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not thread_names(proc.pid, "ns-detour/") and time.monotonic() < deadline:
        time.sleep(0.01)  # set-up can take seconds on a loaded machine
    time.sleep(2)
    assert f"noisescope-{proc.pid}" in our_instances()
    proc.send_signal(stop)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert f"noisescope-{proc.pid}" not in our_instances()
    bundle = noisescope.load(out)
    assert not bundle.complete and bundle.events.rows > 0
    assert "attribution" in bundle.summaries
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no spool left


@needs_tracefs
def test_a_killed_run_is_cleaned_up_later(tmp_path):
    proc = subprocess.Popen([*CLI, "scan", "--duration", "20s", "--probes", "ftq", "-o",
                             str(tmp_path / "b"), "-q"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    name = f"noisescope-{proc.pid}"
    deadline = time.monotonic() + 20
    while name not in our_instances() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert name in our_instances()
    proc.kill()
    proc.wait()
    assert name in our_instances()  # SIGKILL leaves it behind
    done = run("cleanup")
    assert done.returncode == 0, done.stderr
    assert f"removed tracefs instance {name}" in done.stdout
    assert name not in our_instances()


@needs_tracefs
def test_without_root_the_scan_runs_and_says_why(tmp_path):
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to run as another user")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    importable = subprocess.run([*nobody, sys.executable, "-c", "import noisescope.cli.main"],
                                capture_output=True, timeout=60)  # the CLI's dependencies too
    if importable.returncode != 0:
        pytest.skip("the installed Python packages are not readable by an unprivileged user")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(shared, 0o777)
    done = subprocess.run([*nobody, *CLI,
                           "scan", "--duration", "300ms", "--probes", "detour", "-q", "-o",
                           str(shared / "b")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HOME": str(shared)})
    assert done.returncode == 0, done.stderr
    trace_line = [line for line in done.stdout.splitlines() if line.startswith("trace: off")]
    assert len(trace_line) == 1, done.stdout
    manifest = json.loads((shared / "b" / "manifest.json").read_text())
    assert manifest["trace"]["enabled"] is False
    assert "tracing_unavailable" in [w["code"] for w in manifest["warnings"]]
    assert "events" not in manifest["tables"] and "detour_causes" not in manifest["tables"]


def test_unavailable_tracing_is_one_line_and_a_manifest_warning(tmp_path, monkeypatch, capsys):
    """The same as without root, in-process (where the Python installation is
    not readable by another user): setting up tracing is refused."""
    from noisescope.cli.main import main
    from noisescope.trace import session

    def refuse(mountpoint):
        raise session.TracingUnavailable("creating a tracefs instance was denied (needs root)")

    monkeypatch.setattr(session, "find_or_mount", refuse)
    assert main(["scan", "--duration", "300ms", "--probes", "detour", "-q", "-o",
                 str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "trace: off (creating a tracefs instance was denied (needs root))" in out
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["trace"]["enabled"] is False
    warning = [w for w in manifest["warnings"] if w["code"] == "tracing_unavailable"]
    assert len(warning) == 1 and "needs root" in warning[0]["message"]
    assert "detour_causes" not in manifest["tables"]


def test_cleanup_without_permission_does_what_it_can_and_says_what_it_skipped(monkeypatch, capsys,
                                                                            tmp_path):
    from noisescope.cli import cleanup as command
    from noisescope.cli.main import main

    def denied():
        raise PermissionError(13, "Permission denied", "/sys/kernel/tracing/instances")

    monkeypatch.setattr(command, "cleanup", denied)
    assert main(["cleanup", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "nothing to clean up"
    err = err.strip().splitlines()
    assert len(err) == 1 and "Permission denied" in err[0] and "as root" in err[0]
