"""The native core stays safe where Python or the clock does something unusual:
mismatched buffers are refused."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from noisescope import _native

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
