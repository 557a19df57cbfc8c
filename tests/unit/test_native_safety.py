"""The native core stays safe where Python, the clock, other signal senders or
the harness's pipes do something unusual: mismatched buffers and thresholds
are refused, a clock going backwards or standing still is no detour and no
division by zero, stray signals are no injections, concurrent runs share the
signal handler, and the launcher delivers every line it writes."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from noisescope import _native
from noisescope.clock import measurement_clock
from noisescope.diagnostics import Code
from noisescope.probes import detour as detour_probe
from noisescope.probes.base import ProbeContext
from noisescope.probes.native import control_array
from noisescope.probes.schedule import plan_windows

from ..helpers import RT, measure_quietly

HERE = Path(__file__).parent
SOURCE = HERE.parents[1]
NATIVE = SOURCE / "src" / "noisescope" / "_native"
LAUNCHER = Path(_native.__file__).parent / "libexec" / "noisescope-launch"
FLOOR = _native.HISTOGRAM_FLOOR_TICKS


def schedule(windows: int = 1) -> dict:
    return {"start_mono_ns": 0, "runtime_ns": 1_000_000, "period_ns": 1_000_000,
            "last_runtime_ns": 1_000_000, "windows": windows, "ticks_per_ns": 1.0}


def detour_spec(**overrides) -> dict:
    spec = {"cpu": max(os.sched_getaffinity(0)), "priority": 0, "threshold_ticks": 10_000,
            "hourglass_ticks": 1000, "start": np.zeros(16, np.uint64),
            "length": np.zeros(16, np.uint64),
            "histogram": np.zeros(_native.HISTOGRAM_BINS, np.uint64),
            "window_start": np.zeros(2, np.uint64), "window_end": np.zeros(2, np.uint64)}
    spec.update(overrides)
    return spec


def run_detour(spec: dict, windows: int = 2) -> dict:
    samplers, _ = _native.run("detour", [spec], [], schedule(windows), control_array(1))
    return samplers[0]


# The binding ----------------------------------------------------------------

def test_window_buffers_of_different_lengths_are_refused():
    spec = detour_spec(window_end=np.zeros(1, np.uint64))  # two windows, room for one end
    with pytest.raises(ValueError, match="window buffers differ in length"):
        run_detour(spec)


@pytest.mark.parametrize("threshold, hourglass", [(FLOOR - 1, 1000), (10_000, FLOOR - 2)])
def test_a_threshold_below_what_the_loop_records_is_refused(threshold, hourglass):
    """Gaps under the histogram floor are only counted by the loop, never
    recorded: a threshold (or Hourglass cut) there would miss detours silently."""
    spec = detour_spec(threshold_ticks=threshold, hourglass_ticks=hourglass)
    with pytest.raises(ValueError, match=f"threshold_ticks must be at least {FLOOR}"):
        run_detour(spec)


def test_the_lowest_threshold_the_loop_records_is_accepted():
    result = run_detour(detour_spec(threshold_ticks=FLOOR, hourglass_ticks=FLOOR - 1))
    assert result["error"] == 0 and result["windows"] == 2
    assert result["clock_backwards"] == 0  # a sane clock, reported as such


def test_a_clock_stepping_back_is_surfaced_as_a_warning(monkeypatch, live_facts):
    """The count the core reports for a sampler reaches the probe's warnings.
    A real run, whose count is replaced: no real clock steps back on demand
    (the core's counting is tested with the harness below)."""
    real_run = _native.run

    def stepping_back(*args):
        samplers, injectors = real_run(*args)
        samplers[0]["clock_backwards"] = 3
        return samplers, injectors

    monkeypatch.setattr(_native, "run", stepping_back)
    cpu = max(os.sched_getaffinity(0))
    schedule, _ = plan_windows(20_000_000, rt=False)
    ctx = ProbeContext((cpu,), schedule, measurement_clock(live_facts.tsc_flags))
    result = detour_probe.run(ctx, threshold_ns=10_000)
    [note] = [d for d in result.diagnostics if d.code is Code.CLOCK]
    assert f"CPU {cpu}: the clock stepped back 3 times" in note.message


# The C functions, driven with a scripted clock ------------------------------

@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    """tests/unit/native_harness.c linked with the core, both clocks scripted."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not NATIVE.is_dir():
        pytest.skip("needs a C compiler and the source checkout")
    program = tmp_path_factory.mktemp("harness") / "harness"
    sources = [HERE / "native_harness.c", *(NATIVE / name for name in (
        "calibrate.c", "detour.c", "inject.c", "quantum.c", "runner.c", "timerlat.c"))]
    subprocess.run([compiler, "-O2", "-std=gnu11", "-Wall", "-Wextra",
                    "-DNS_SCRIPTED_CLOCK", f"-I{NATIVE}", "-o", str(program), *map(str, sources),
                    "-lpthread", "-lrt"], check=True, capture_output=True)
    return program


def run_harness(program: Path, *args) -> dict:
    done = subprocess.run([str(program), *map(str, args)], capture_output=True, text=True,
                          timeout=30, check=True)
    return dict(field.split("=", 1) for field in done.stdout.split())


def test_a_clock_stepping_back_is_counted_not_taken_for_a_detour(harness):
    # Readings: two short steps, a 18900-tick detour, a step back of 1000
    # ticks, a short step, a 20950-tick detour (the window ends there).
    readings = [1000, 1050, 1100, 20000, 19000, 19050, 40000]
    found = run_harness(harness, "detour", 1000, *readings)
    assert found["backwards"] == "1"
    assert found["lengths"] == "18900,20950" and found["detours"] == "2"
    assert int(found["lost"]) == 18900 + 20950
    assert int(found["max_gap"]) == 20950
    assert int(found["gaps"]) == len(readings) - 2  # every step but the one back


@pytest.mark.parametrize("ticks_per_read, ns_per_read, rate", [
    (5, 2, 2.5),   # both clocks move: their ratio
    (5, 0, 0.0),   # CLOCK_MONOTONIC_RAW stands still: no rate (was a division by zero)
    (-5, 2, 0.0),  # the tick counter goes back: no rate (was a wrapped, huge one)
])
def test_calibration_needs_both_clocks_to_move_forward(harness, ticks_per_read, ns_per_read,
                                                       rate):
    found = run_harness(harness, "calibrate", ticks_per_read, ns_per_read)
    assert float(found["rate"]) == rate


def test_a_run_never_writes_past_the_window_end_buffer(harness):
    found = run_harness(harness, "windows", max(os.sched_getaffinity(0)))
    assert found["error"] == "0" and found["thread_error"] == "0"
    assert found["windows"] == "3"
    assert found["canaries"] == "intact"


# Signal-mode injection: stray signals, concurrent runs ----------------------

def injection_child(mode: str) -> dict:
    cpu = max(os.sched_getaffinity(0))
    done = subprocess.run([sys.executable, str(HERE / "injection_child.py"), mode, str(cpu),
                           str(95 if RT else 0)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"the child died ({done.returncode}): {done.stderr[-2000:]}"
    return json.loads(done.stdout)


def timer_expirations(run: dict) -> int:
    """Expirations of the run's timer up to its last delivery; the timer
    starts with the window, which injection times count from."""
    return int(run["last_start_ns"] // run["period_ns"]) + 1


def counts_match_the_timer(run: dict) -> bool:
    """Every injection a run counts is one expiration of its own timer: the
    deliveries plus the expirations the kernel merged into them make the
    timer's expirations (+-1 for one at either end). Signals that are not the
    timer's would add deliveries without expirations; a run whose thread
    waited for its CPU may see its window start late, hence busy() below."""
    counted = run["stored"] + run["coalesced"]
    return (run["error"] == 0 and run["last_start_ns"] >= run["duration_ns"] - 1.5 * run["period_ns"]
            and abs(counted - timer_expirations(run)) <= 1)


def busy(report: dict) -> float:
    return max(run["run_delay_ns"] / run["duration_ns"] for run in report["runs"])


def measure_injection(mode: str, good) -> dict:
    return measure_quietly(lambda: injection_child(mode), good, busy)


def test_stray_signals_to_an_injection_target_are_ignored():
    """tgkill (SI_TKILL), sigqueue with a bogus value (SI_QUEUE) and a forged
    SI_TIMER siginfo carrying a bogus pointer, 20 of each, sent to the
    signal-mode target thread during its run: the process survives and none
    of them is counted."""
    report = measure_injection("forged", lambda r: counts_match_the_timer(r["runs"][0]))
    assert report["sent"] == {"tgkill": [0], "sigqueue": [0], "forged_timer": [0]}  # delivered
    [run] = report["runs"]
    assert counts_match_the_timer(run), (run, timer_expirations(run))
    assert run["stored"] <= run["duration_ns"] // run["period_ns"] + 2, run


def test_concurrent_injection_runs_share_the_signal_handler():
    """Two runs from two Python threads on one CPU, the first ending while the
    second still runs: both count their own timer's injections at their own
    period, the handler stays installed while any run needs it and is
    removed after the last."""
    def own_period(run: dict) -> bool:
        return abs(run["median_spacing_ns"] - run["period_ns"]) < 0.1 * run["period_ns"]

    report = measure_injection("concurrent", lambda r: all(
        counts_match_the_timer(run) and own_period(run) for run in r["runs"]))
    for run in report["runs"]:
        assert counts_match_the_timer(run), (run, timer_expirations(run))
        assert own_period(run), run
    assert [run["period_ns"] for run in report["runs"]] == [40_000_000, 100_000_000]
    assert report["installed"] == {"both_running": True, "second_running": True,
                                   "second_was_running": True, "none_running": False}


# The workload launcher -------------------------------------------------------

def launcher_request(argv: list[str]) -> bytes:
    fields = [argv[0], str(len(argv)), *argv, "0", ""]
    payload = b"".join(os.fsencode(f) + b"\0" for f in fields)
    return struct.pack("=I", len(payload)) + payload


@pytest.mark.skipif(not LAUNCHER.exists(), reason="noisescope-launch not built")
def test_the_launcher_waits_out_non_blocking_pipes():
    """Its result pipe non-blocking and full, its request pipe non-blocking and
    empty at first: the launcher waits for both instead of dropping its lines
    (a write that fails with EAGAIN) or quitting (a read that does)."""
    request_read, request_write = os.pipe()
    result_read, result_write = os.pipe()
    for fd in (request_read, result_write):
        os.set_blocking(fd, False)
    filled = 0
    try:
        while True:
            filled += os.write(result_write, b"\n" * 4096)
    except BlockingIOError:
        pass
    launcher = subprocess.Popen([str(LAUNCHER), str(request_read), str(result_write)],
                                pass_fds=(request_read, result_write))
    os.close(request_read)
    os.close(result_write)
    time.sleep(0.2)  # the launcher meets an empty request pipe
    os.write(request_write, launcher_request(["/bin/true"]))
    os.close(request_write)
    time.sleep(0.5)  # and a full result pipe
    output = b""
    while chunk := os.read(result_read, 65536):
        output += chunk
    os.close(result_read)
    assert launcher.wait(timeout=10) == 0
    assert output[:filled] == b"\n" * filled
    lines = output[filled:].decode().split()
    assert lines[0] == "P" and int(lines[1]) > 0
    report = output[filled:].decode().splitlines()[-1].split()
    assert report[0] == "R" and report[1:3] == ["0", "0"]  # spawned, exit status 0
    assert len(report) == 11
