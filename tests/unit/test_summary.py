import numpy as np
import pytest

from noisescope import _native
from noisescope.analysis.groundtruth import match_injections, match_probe_injections
from noisescope.probes.summary import ftq_summary, fwq_summary, histogram_quantiles
from noisescope.tables import Table, inside_windows


def test_histogram_buckets_are_increasing_and_log_scale():
    lower = np.array(_native.histogram_lower_bounds(), dtype=np.float64)
    assert lower[0] == 0 and lower[1] == _native.HISTOGRAM_FLOOR_TICKS
    assert np.all(np.diff(lower) > 0)
    widths = np.diff(lower[1:]) / lower[1:-1]
    assert widths.max() <= 1 / 16 + 1e-12  # at most ~6% relative resolution


def test_histogram_quantiles_of_uniform_buckets():
    lower = np.array([100, 200, 300, 400])
    upper = np.array([200, 300, 400, 500])
    counts = np.array([25, 25, 25, 25])
    p50, p99 = histogram_quantiles(lower, upper, counts, [0.5, 0.99])
    assert lower[1] <= p50 <= upper[1]
    assert lower[3] <= p99 <= upper[3]


def test_ftq_summary_noise_is_the_average_shortfall():
    stats = {"cpu": 0, "measured_ns": 4}
    s = ftq_summary(stats, np.array([100, 100, 90, 0]))
    assert s["work_max"] == 100 and s["missed_quanta"] == 1
    assert s["noise_pct"] == pytest.approx(100 * (1 - 72.5 / 100))


def test_fwq_summary():
    s = fwq_summary({"cpu": 1}, np.array([1000, 1000, 1500, 2500]))
    assert s["duration_min_ns"] == 1000 and s["duration_max_ns"] == 2500
    assert s["noise_pct"] == pytest.approx(100 * (1 - 1000 / 1500))


def test_injection_matching():
    windows = Table({"cpu": [0], "probe": np.array(["detour"], object), "start_ns": [0],
                     "end_ns": [10_000]})
    injections = Table({"cpu": [0, 0, 0, 0], "start_ns": [100, 2000, 5000, 9990],
                        "duration_ns": [50, 50, 50, 50]})
    # covers the first, misses the second (too short), nothing near the third;
    # the fourth runs past the window's end and does not count.
    detours = Table({"cpu": [0, 0], "start_ns": [90, 2010], "duration_ns": [70, 100]})
    found = match_injections(detours, injections, windows, cpu=0)
    assert found.injected == 3
    assert found.found == 1
    assert found.detected_ns.tolist() == [70, -1, -1]


def test_inside_windows():
    windows = Table({"start_ns": [0, 100], "end_ns": [50, 150]})
    mask = inside_windows(np.array([10, 40, 60, 120, -5]), np.array([20, 60, 70, 150, 1]),
                          windows)
    assert mask.tolist() == [True, False, False, True, False]


def test_probe_injection_summaries_add_what_the_detours_found_to_what_the_injector_counted():
    windows = Table({"cpu": [0, 1], "probe": np.array(["detour", "detour"], object),
                     "start_ns": [0, 0], "end_ns": [10_000, 10_000]})
    injections = Table({"cpu": [0, 0], "start_ns": [100, 2000], "duration_ns": [50, 50]})
    detours = Table({"cpu": [0, 1], "start_ns": [90, 500], "duration_ns": [70, 30]})
    tables = {"detours": detours, "injections": injections, "windows": windows}
    summaries = [{"cpu": 0, "injections": {"coalesced": 3}}, {"cpu": 1}]
    match_probe_injections("detour", tables, summaries)
    assert summaries[0]["injections"] == {
        "cpu": 0, "injected": 2, "found": 1, "found_pct": 50.0, "injected_mean_ns": 50.0,
        "detected_mean_ns": 70.0, "coalesced": 3}
    assert list(summaries[0]["injections"])[-1] == "coalesced"  # the manifest's order
    assert "injections" not in summaries[1]  # no injections on CPU 1: nothing to match
