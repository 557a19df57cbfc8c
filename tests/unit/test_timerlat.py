"""The timerlat pieces that need no measuring: binding checks, histograms, PM QoS."""

import struct

import numpy as np
import pytest

from noisescope import _native
from noisescope.pmqos import cpu_latency_request
from noisescope.probes.native import control_array
from noisescope.probes.summary import linear_histogram_quantiles
from noisescope.probes.timerlat import histogram_table


def timerlat_spec(**overrides):
    spec = {"cpu": 0, "priority": 0, "interval_ns": 1_000_000,
            "histogram": np.zeros(100, np.uint64), "latency": np.zeros(64, np.uint64),
            "wakeup": np.zeros(64, np.uint64), "window_start": np.zeros(1, np.uint64),
            "window_end": np.zeros(1, np.uint64)}
    spec.update(overrides)
    return spec


SCHEDULE = {"start_mono_ns": 0, "runtime_ns": 20_000_000, "period_ns": 20_000_000,
            "last_runtime_ns": 20_000_000, "windows": 1, "ticks_per_ns": 1.0}


def test_binding_rejects_a_zero_interval_and_mismatched_series():
    with pytest.raises(ValueError, match="timerlat"):
        _native.run("timerlat", [timerlat_spec(interval_ns=0)], [], SCHEDULE,
                    control_array(1))
    with pytest.raises(ValueError, match="latency.*wakeup.*differ"):
        _native.run("timerlat", [timerlat_spec(wakeup=np.zeros(3, np.uint64))], [], SCHEDULE,
                    control_array(1))


def test_every_deadline_of_a_window_is_sampled_or_missed():
    spec = timerlat_spec()
    result = _native.run("timerlat", [spec], [], SCHEDULE, control_array(1))[0][0]
    assert result["error"] == 0
    assert result["samples"] + result["missed"] == 20  # 20 ms at 1 ms
    assert result["stored"] == result["samples"]
    assert spec["histogram"].sum() + result["histogram_overflow"] == result["samples"]
    latency = spec["latency"][:result["stored"]]
    assert latency.min() == result["min_ns"] and latency.max() == result["max_ns"]
    assert latency.sum() == result["sum_ns"]


def test_without_a_series_only_the_histogram_counts():
    spec = timerlat_spec(latency=np.zeros(0, np.uint64), wakeup=np.zeros(0, np.uint64))
    result = _native.run("timerlat", [spec], [], SCHEDULE, control_array(1))[0][0]
    assert result["stored"] == 0 and result["overflow"] == 0
    assert spec["histogram"].sum() + result["histogram_overflow"] == result["samples"] > 0


def test_histogram_table_keeps_the_overflow_as_an_open_bucket():
    counts = np.zeros(10, np.uint64)
    counts[[2, 5]] = [7, 1]
    table = histogram_table(3, counts, overflow=2, max_ns=25_400)
    assert table["lower_ns"].tolist() == [2000, 5000, 10_000]
    assert table["upper_ns"].tolist() == [3000, 6000, 25_401]
    assert table["count"].tolist() == [7, 1, 2] and set(table["cpu"]) == {3}


def test_linear_quantiles_use_the_bucket_middle_and_refuse_the_overflow():
    lower = np.array([0, 1000, 2000, 10_000])
    upper = np.array([1000, 2000, 3000, 50_000])
    counts = np.array([50, 40, 9, 1])
    p50, p90, p999 = linear_histogram_quantiles(lower, upper, counts, [0.5, 0.9, 0.999], 10_000)
    assert p50 == 500 and p90 == 1500 and p999 is None


def test_cpu_latency_request_holds_the_value_while_open(tmp_path):
    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(b"")
    with cpu_latency_request(0, str(device)) as outcome:
        assert outcome == "0 us while measuring"
        assert struct.unpack("i", device.read_bytes()) == (0,)
    with cpu_latency_request(None, str(device)) as outcome:
        assert outcome == "not held"
    with cpu_latency_request(5, str(tmp_path / "missing")) as outcome:
        assert outcome.startswith("skipped")


def test_late_wakeups_are_detour_shaped_intervals_ending_at_the_wakeup():
    from noisescope.tables import Table
    from noisescope.trace.wakeups import late_wakeups

    series = Table({"cpu": np.array([0, 0, 1], np.int32), "wakeup_ns": np.array([100, 5000, 900]),
                    "latency_ns": np.array([20, 3000, 150])})
    late = late_wakeups(series, threshold_ns=150)
    assert late.columns == ["cpu", "start_ns", "duration_ns"]
    assert late["start_ns"].tolist() == [2000, 750] and late["duration_ns"].tolist() == [3000, 150]
