"""The binding checks what Python hands to C."""

import numpy as np
import pytest

from noisescope import _native
from noisescope.probes.native import control_array


def schedule():
    return {"start_mono_ns": 0, "runtime_ns": 10_000_000, "period_ns": 10_000_000,
            "last_runtime_ns": 10_000_000, "windows": 1, "ticks_per_ns": 1.0}


def detour_spec(**overrides):
    spec = {"cpu": 0, "priority": 0, "threshold_ticks": 10_000, "hourglass_ticks": 1000,
            "start": np.zeros(16, np.uint64), "length": np.zeros(16, np.uint64),
            "histogram": np.zeros(_native.HISTOGRAM_BINS, np.uint64),
            "window_start": np.zeros(1, np.uint64), "window_end": np.zeros(1, np.uint64)}
    spec.update(overrides)
    return spec


def test_rejects_buffers_of_the_wrong_type():
    with pytest.raises(TypeError, match="64-bit"):
        _native.run("detour", [detour_spec(start=np.zeros(16, np.float32),
                                           length=np.zeros(16, np.float32))], [], schedule(),
                    control_array(1))


def test_rejects_read_only_buffers():
    frozen = np.zeros(16, np.uint64)
    frozen.flags.writeable = False
    with pytest.raises((BufferError, ValueError, TypeError)):
        _native.run("detour", [detour_spec(start=frozen)], [], schedule(), control_array(1))


def test_rejects_missing_keys_and_unknown_probes():
    spec = detour_spec()
    del spec["threshold_ticks"]
    with pytest.raises(KeyError):
        _native.run("detour", [spec], [], schedule(), control_array(1))
    with pytest.raises(ValueError, match="unknown probe"):
        _native.run("nope", [], [], schedule(), control_array(0))


def test_rejects_a_short_control_array():
    with pytest.raises(ValueError, match="control"):
        _native.run("detour", [detour_spec()], [], schedule(), control_array(0))


def test_a_short_run_counts_every_iteration():
    spec = detour_spec()
    samplers, _ = _native.run("detour", [spec], [], schedule(), control_array(1))
    result = samplers[0]
    assert result["error"] == 0 and result["windows"] == 1
    assert spec["histogram"].sum() > 1000  # 10 ms of a loop of tens of ns
    assert spec["window_end"][0] > spec["window_start"][0]


def test_a_bad_cpu_is_reported_per_thread():
    spec = detour_spec(cpu=100_000)
    samplers, _ = _native.run("detour", [spec], [], schedule(), control_array(1))
    assert samplers[0]["error"] != 0
    assert samplers[0]["error_stage"] == "sched_setaffinity"
