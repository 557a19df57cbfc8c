"""Tracing on the real tracefs (root): the session's lifecycle, leftovers,
mounting, interruption, and attribution against injected ground truth.
Skipped with a reason where there is no root or no tracefs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import noisescope
from noisescope import _native
from noisescope.probes import Injection
from noisescope.scan import SECOND, ScanOptions, scan
from noisescope.tables import Table, inside_windows
from noisescope.trace import TraceSession, attribute, cleanup, event_source, scanning, sched_switches
from noisescope.trace import events as events_module
from noisescope.trace.events import TRACEPOINTS, Tracepoint
from noisescope.trace.tracefs import DEFAULT_MOUNTPOINT, tracefs_mounts

from ..helpers import RT, as_nobody, dead_pid, measure_quietly, run_delay_fraction, thread_names
from ..trace_checks import cause_time, injections_attributed, local_timers_explained
from ..unit.test_bundle import validate
from .test_ground_truth import SPIN_OVERSHOOT_NS, measured_s

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


RATE_HZ = 1000.0


def traced_scan(cpu: int, inject: bool, mode: str = "thread", length_ns: int = 20_000,
                rate_hz: float = RATE_HZ):
    injections = (Injection(cpu, rate_hz, length_ns, mode),) if inject else ()
    return scan(ScanOptions(cpus=(cpu,), duration_ns=2 * SECOND, probes=("detour",),
                            injections=injections, rt=RT),
                argv=["test"])


# Longer than the bound on the injector thread's own time around a spin
# (trace_checks.INJECTOR_OVERHEAD_NS): a spin counted twice is then out of bounds.
THREAD_LENGTH_NS = 100_000


@needs_tracefs
def test_thread_injections_are_named_and_local_timers_are_the_tick(measured_cpu, live_facts):
    """Ground truth: a SCHED_FIFO thread injecting 1 kHz x 100 us beside the
    sampler. Its noise must be attributed to it by name, neither less than
    its spin nor more than the spin and its own switches; every local timer
    interrupt in a window must sit in a detour and be named (the tick),
    with no more than the handlers' time."""
    def checks(bundle):
        d, c, w = bundle.detours, bundle.detour_causes, bundle.windows
        named = injections_attributed(bundle.injections, d, c, w, measured_cpu)
        timers, tick = local_timers_explained(bundle.events, d, c, w, measured_cpu)
        return named, timers, tick

    def good(bundle):
        named, timers, tick = checks(bundle)
        return named.mean() >= 0.95 and timers[tick].mean() >= 0.99 and timers.mean() >= 0.99

    bundle = measure_quietly(lambda: traced_scan(measured_cpu, inject=True,
                                                 length_ns=THREAD_LENGTH_NS),
                             good, run_delay_fraction)
    validate(bundle.manifest)
    named, timers, tick = checks(bundle)
    lost = bundle.manifest["trace"]["recordings"][0]["lost_events"]
    context = (run_delay_fraction(bundle), lost)
    seconds = measured_s(bundle, measured_cpu, "detour")
    planned = bundle.parameters["duration_ns"] / 1e9
    windows = bundle.windows.where(cpu=measured_cpu).rows
    # one injection a period: of the planned time at least, of the measured
    # time at most (+1 per window where it starts; a window the sampler was
    # late to close is longer)
    assert 0.95 * planned * RATE_HZ <= len(named) <= seconds * RATE_HZ + windows, context
    assert named.mean() >= 0.95, context
    # the busy CPU ticks every jiffy, and never more often (CONFIG_HZ; 250 here)
    hz = live_facts.config_hz or 250
    assert 0.95 * planned * hz <= tick.sum() <= seconds * hz + windows, context
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


# The kernel's record of each signal it delivers; a scan does not record it
# (nothing else signals the sampler), this test adds it as independent
# evidence of when each signal-mode injection began.
SIGNAL_DELIVER = Tracepoint("signal", "signal_deliver", number="sig")
# After signal_deliver the kernel builds the signal frame and returns to
# user space, where the handler reads the TSC first: 1-4 us on this VM
# (99th percentile), 10 us bounds it.
DELIVERY_TO_HANDLER_NS = 10_000
SIGNAL_LENGTH_NS = 20_000
# Not a multiple of the tick's rate (CONFIG_HZ): the spins drift through the
# tick's phase, so some ticks fall inside spins, which the label must leave to
# the tick. At 1 kHz they fall in none or in all; at 990 Hz the tick's phase
# against the spins steps by 40.4 us a tick over a lattice of exactly 25
# points, so whether one falls inside a 20 us spin depends on the run's start
# (none in 5 runs of 5 one day). At 997 Hz it steps by 12.0 us (250 Hz) or
# 3.0 us (1000 Hz), less than a spin, over no closed lattice: every sweep of
# the phase puts a tick inside a spin (~6 in 2 s at 250 Hz).
SIGNAL_RATE_HZ = 997.0


@pytest.fixture
def signal_deliveries_recorded(monkeypatch):
    if not (TRACEFS / "events" / SIGNAL_DELIVER.path).is_dir():
        pytest.skip("this kernel has no signal_deliver trace event")
    monkeypatch.setitem(events_module.BY_NAME, SIGNAL_DELIVER.name, SIGNAL_DELIVER)
    monkeypatch.setitem(events_module._TEXT_FIELDS, SIGNAL_DELIVER.name, r"sig=(?P<number>\d+)")
    monkeypatch.setattr(scanning, "TraceSession",
                        partial(TraceSession, tracepoints=(*TRACEPOINTS, SIGNAL_DELIVER)))


def explained_by_the_kernel(causes: Table) -> dict[tuple[int, int, str, str], int]:
    """(cpu, detour start, cause, detail) -> time, for the causes the kernel's events name."""
    rows = causes.filter(~np.isin(causes["cause"], ["injected", "unexplained"]))
    return {key[:4]: key[4] for key in zip(*(rows[c].tolist() for c in (
        "cpu", "start_ns", "cause", "detail", "duration_ns")), strict=True)}


def signal_evidence(bundle, cpu: int):
    """What the label 'injected signal' says, beside what the kernel says.

    Returns, per detour holding the kernel's delivery of the injection
    signal to the sampler thread: the time labelled injected, the time from the first delivery to
    the detour's end (the handler can only run then) and the number of
    deliveries (two when something held the CPU for a period); the detours
    labelled injected that hold no delivery; the deliveries; and the
    injector's recorded starts inside the windows."""
    (sampler,) = (s["tid"] for s in bundle.summaries["detour"] if s["cpu"] == cpu)
    ev = bundle.events  # (other processes' samplers get the same signal number)
    delivered = np.sort(ev["timestamp_ns"][(ev["cpu"] == cpu) & (ev["event"] == "signal_deliver")
                                           & (ev["number"] == _native.injection_signal())
                                           & (ev["pid"] == sampler)])
    windows = bundle.windows.where(cpu=cpu)
    delivered = delivered[inside_windows(delivered, delivered, windows)]
    detours = bundle.detours.where(cpu=cpu)
    d_start = detours["start_ns"]
    d_end = d_start + detours["duration_ns"]
    k = np.searchsorted(d_start, delivered, side="right") - 1
    inside = (k >= 0) & (delivered <= d_end[np.maximum(k, 0)])
    k, first, count = np.unique(k[inside], return_index=True, return_counts=True)
    at = delivered[inside][first]
    injected = {start: by_cause["injected"] for start, by_cause
                in cause_time(bundle.detour_causes.where(cpu=cpu)).items() if "injected" in by_cause}
    labelled = np.array([injected.get(int(d_start[i]), 0) for i in k.tolist()], np.int64)
    unmatched = set(injected) - {int(d_start[i]) for i in k.tolist()}
    recorded = bundle.injections.where(cpu=cpu)
    starts = np.sort(recorded["start_ns"])
    starts = starts[inside_windows(starts, starts, windows)]
    return labelled, d_end[k] - at, count, unmatched, delivered, starts


def in_length(labelled: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Whether each detour's injected time is what its spins were configured
    to take (a spin the host stalled is longer, one the tick interrupted shorter)."""
    return (labelled >= count * SIGNAL_LENGTH_NS) & (
        labelled <= count * (SIGNAL_LENGTH_NS + SPIN_OVERSHOOT_NS))


@needs_tracefs
def test_signal_injections_are_injected_where_the_kernel_delivered_the_signal(
        measured_cpu, signal_deliveries_recorded):
    """Ground truth: 990 Hz x 20 us spun in a signal handler on the sampler's
    own thread, in user space where the kernel records nothing. The label
    'injected signal' is built from the injector's own record, so the
    evidence that it is right comes from elsewhere:

    - the kernel's signal_deliver events: a detour has injected time exactly
      when the kernel delivered the injection signal in it; that time fits
      between the delivery and the detour's end, and is the configured
      length (not the recorded one); the deliveries come once a period of
      the timer, and the injector's recorded starts follow them by
      the time the kernel takes to enter the handler;
    - the same detours attributed with the injector's record withheld: the
      time labelled injected is then exactly what is left 'unexplained', and
      no other cause changes, not even in the spins a tick interrupted (the
      label takes only what the kernel cannot explain)."""
    def good(bundle):
        labelled, _, count, unmatched, _, _ = signal_evidence(bundle, measured_cpu)
        # (and some spins interrupted by the tick, which the check of the record
        # withheld needs: the tick and the signal's timer expire in one interrupt
        # when they fall close, so in some runs none lands inside a spin)
        return (len(labelled) > 0 and not unmatched and np.mean(in_length(labelled, count)) >= 0.9
                and np.any(labelled < count * SIGNAL_LENGTH_NS))

    bundle = measure_quietly(lambda: traced_scan(measured_cpu, inject=True, mode="signal",
                                                 rate_hz=SIGNAL_RATE_HZ),
                             good, run_delay_fraction)
    labelled, room, count, unmatched, delivered, starts = signal_evidence(bundle, measured_cpu)
    context = (np.percentile(labelled, [1, 50, 99]) if len(labelled) else None,
               len(unmatched), run_delay_fraction(bundle))
    seconds = measured_s(bundle, measured_cpu, "detour")
    planned = bundle.parameters["duration_ns"] / 1e9
    windows = bundle.windows.where(cpu=measured_cpu).rows
    # The kernel delivered the signal once a period, as for the thread above,
    # less the expirations it merged into a pending signal while another
    # task held the CPU (the handler counts them: coalesced).
    coalesced = bundle.summaries["detour"][0]["injections"]["coalesced"]
    assert 0.95 * planned * SIGNAL_RATE_HZ <= len(delivered) + coalesced, (len(delivered), coalesced)
    assert len(delivered) <= seconds * SIGNAL_RATE_HZ + windows, context
    period = 1e9 / SIGNAL_RATE_HZ
    assert abs(np.median(np.diff(delivered)) - period) <= 0.01 * period
    # Injected time where, and only where, the kernel delivered the signal.
    assert not unmatched, context
    assert np.all(labelled > 0), context
    assert count.sum() >= 0.99 * len(delivered), (count.sum(), len(delivered))
    # After the delivery, never before it; about the configured length.
    assert np.all(labelled <= room), context
    assert np.mean(in_length(labelled, count)) >= 0.9, context
    # Some spins were interrupted (by the tick): less of them is injected.
    # Those make the check below bite.
    assert np.any(labelled < count * SIGNAL_LENGTH_NS), context
    # The injector's record agrees with the kernel: each recorded start
    # follows a delivery by the time the handler takes to begin.
    last = np.searchsorted(delivered, starts, side="right") - 1
    lag = starts[last >= 0] - delivered[last[last >= 0]]
    assert len(lag) >= 0.99 * len(starts)
    assert np.mean((lag >= 0) & (lag <= DELIVERY_TO_HANDLER_NS)) >= 0.95, np.percentile(lag, [1, 50, 99])

    # Withheld: the injected time would otherwise be unexplained, exactly,
    # and every other cause keeps its time.
    detours = bundle.detours
    spans = Table({c: detours[c] for c in ("cpu", "start_ns", "duration_ns")})
    withheld = attribute(spans, event_source(bundle), bundle.trace_coverage).causes
    causes = bundle.detour_causes
    with_record, without = cause_time(causes), cause_time(withheld)
    assert with_record.keys() == without.keys()
    for start, by_cause in with_record.items():
        assert "injected" not in without[start]
        assert without[start].get("unexplained", 0) == (by_cause.get("unexplained", 0)
                                                        + by_cause.get("injected", 0))
    assert explained_by_the_kernel(withheld) == explained_by_the_kernel(causes)
    (row,) = bundle.summaries["attribution"]
    labels = {(c["cause"], c["detail"]) for c in row["causes"]}
    assert ("timer", "posix_timer_fn") in labels and ("injected", "signal") in labels


def run(*args, timeout=120, **kwargs):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


@needs_tracefs
def test_scan_explain_and_no_trace_through_the_cli(tmp_path):
    out = tmp_path / "traced"
    done = run("scan", "--duration", "1s", "--probes", "detour", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "Causes of detours" in done.stdout and "Worst detours" in done.stdout
    assert "trace: x86-tsc clock" in done.stdout or "trace: mono_raw clock" in done.stdout
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert "cost" not in bundle.manifest["trace"] and "tracing cost" not in done.stdout  # opt-in
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
def test_without_root_the_scan_runs_and_says_why(measured_cpu):
    """As `nobody`: tracing and SCHED_FIFO are refused, each is said to be
    skipped with its reason, and the scan still measures and writes its bundle."""
    package = Path(noisescope.__file__).parent
    with as_nobody([package]) as (nobody, shared):
        whoami = subprocess.run([*nobody, sys.executable, "-c", "import os; print(os.geteuid())"],
                                capture_output=True, text=True, timeout=60, cwd=shared)
        assert whoami.stdout.strip() == "65534", whoami.stderr
        done = subprocess.run([*nobody, *CLI, "scan", "--cpus", str(measured_cpu), "--duration",
                               "300ms", "--probes", "detour", "--rt", "-o", str(shared / "b")],
                              capture_output=True, text=True, timeout=60, cwd=shared,
                              env={**os.environ, "HOME": str(shared)})
        assert done.returncode == 0, done.stderr
        trace_line = [line for line in done.stdout.splitlines() if line.startswith("trace: off")]
        assert len(trace_line) == 1 and "denied" in trace_line[0], done.stdout
        assert "SCHED_FIFO priority 95 skipped (not permitted)" in done.stdout, done.stdout
        bundle = noisescope.load(shared / "b")
        validate(bundle.manifest)
        assert bundle.complete and bundle.manifest["privileges"]["root"] == "no"
        assert bundle.manifest["privileges"]["rt"].startswith("skipped: SCHED_FIFO not permitted")
        assert bundle.parameters["priority"] == 0
        assert bundle.manifest["trace"]["enabled"] is False
        assert "denied" in bundle.manifest["trace"]["reason"]
        codes = [w["code"] for w in bundle.manifest["warnings"]]
        assert "tracing_unavailable" in codes and "privileges" in codes
        assert "events" not in bundle.manifest["tables"]
        assert "detour_causes" not in bundle.manifest["tables"]
        (summary,) = bundle.summaries["detour"]
        assert summary["cpu"] == measured_cpu and summary["measured_ns"] > 0
        assert summary["iterations"] > 0 and bundle.detours.rows == summary["stored"]


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
