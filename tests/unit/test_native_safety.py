"""The native core stays safe where Python, the clock or other signal senders
do something unusual: mismatched buffers are refused, stray signals are no
injections, concurrent runs share the signal handler."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from noisescope import _native

from ..helpers import RT

HERE = Path(__file__).parent
SOURCE = HERE.parents[1]
NATIVE = SOURCE / "src" / "noisescope" / "_native"


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
    samplers, _ = _native.run("detour", [spec], [], schedule(windows), np.zeros(2, np.int64))
    return samplers[0]


# The binding ----------------------------------------------------------------

def test_window_buffers_of_different_lengths_are_refused():
    spec = detour_spec(window_end=np.zeros(1, np.uint64))  # two windows, room for one end
    with pytest.raises(ValueError, match="window buffers differ in length"):
        run_detour(spec)


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


def assert_counts_match_the_timer(run: dict) -> None:
    """Every injection a run counts is one expiration of its own timer: the
    deliveries plus the expirations the kernel merged into them equal the
    timer's expirations up to the last delivery (the timer starts with the
    window), whatever the machine's load delayed. Signals that are not the
    timer's would add deliveries without expirations."""
    assert run["error"] == 0, run
    period, last = run["period_ns"], run["last_start_ns"]
    assert last >= run["duration_ns"] - 1.5 * period, run  # the timer ran the whole run
    expirations = last // period + 1
    assert expirations - 1 <= run["stored"] + run["coalesced"] <= expirations + 1, run


def test_stray_signals_to_an_injection_target_are_ignored():
    """tgkill (SI_TKILL), sigqueue with a bogus value (SI_QUEUE) and a forged
    SI_TIMER siginfo carrying a bogus pointer, 20 of each, sent to the
    signal-mode target thread during its run: the process survives and none
    of them is counted."""
    report = injection_child("forged")
    assert report["sent"] == {"tgkill": [0], "sigqueue": [0], "forged_timer": [0]}  # delivered
    [run] = report["runs"]
    assert_counts_match_the_timer(run)
    assert run["stored"] <= run["duration_ns"] // run["period_ns"] + 2


def test_concurrent_injection_runs_share_the_signal_handler():
    """Two runs from two Python threads on one CPU, the first ending while the
    second still runs: both count their own timer's injections, the handler
    stays installed while any run needs it and is removed after the last."""
    report = injection_child("concurrent")
    first, second = report["runs"]
    for run in (first, second):
        assert_counts_match_the_timer(run)
    assert abs(first["median_spacing_ns"] - 40e6) < 4e6  # each run's own period
    assert abs(second["median_spacing_ns"] - 100e6) < 10e6
    assert report["installed"] == {"both_running": True, "second_running": True,
                                   "second_was_running": True, "none_running": False}
