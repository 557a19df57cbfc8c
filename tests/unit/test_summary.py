import numpy as np
import pytest

from noisescope import _native
from noisescope.analysis.groundtruth import match_injections, match_probe_injections
from noisescope.probes.summary import (
    exact_quantiles,
    ftq_summary,
    fwq_summary,
    histogram_quantiles,
)
from noisescope.tables import SpooledTable, Table, inside_windows


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


def test_exact_quantiles_in_batches_are_numpys_inverted_cdf():
    """Read in batches (never the whole column), the quantiles are exactly the
    samples np.percentile(method="inverted_cdf") picks: sizes where n q is a
    whole number and where it is not, many equal values, a wide range."""
    rng = np.random.default_rng(15)
    quantiles = [0.0, 0.1, 0.5, 0.99, 0.999, 1.0]
    for n in (1, 2, 7, 999, 1000, 1001, 54_321):
        for values in (rng.integers(0, 10**15, n), rng.integers(2_000, 2_010, n),
                       rng.lognormal(8, 2, n).astype(np.int64), np.full(n, 5)):
            def batches(values=values):
                return (values[i:i + 777] for i in range(0, len(values), 777))

            expected = [float(np.percentile(values, 100 * q, method="inverted_cdf"))
                        for q in quantiles]
            assert exact_quantiles(batches, quantiles) == expected


def test_summaries_of_batches_equal_those_of_the_whole_column():
    work = np.array([100, 100, 90, 0, 75, 100, 0])
    durations = np.array([1000, 1000, 1500, 2500, 1200])
    for whole, summary in ((work, ftq_summary), (durations, fwq_summary)):
        def batches(whole=whole):
            return (whole[i:i + 2] for i in range(0, len(whole), 2))

        assert summary({"cpu": 1}, batches) == pytest.approx(summary({"cpu": 1}, whole))


def test_injections_found_batch_by_batch_are_those_found_at_once(tmp_path):
    """Detours spooled in batches of 1, 3 and 50 (an injection's covering detour
    often ends the batch before the one it would be looked for in)."""
    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.integers(500, 5_000, 400))
    whole = Table({"cpu": np.zeros(400, np.int32), "start_ns": starts,
                   "duration_ns": rng.integers(100, 3_000, 400)})
    injected = np.sort(rng.integers(0, int(starts[-1]), 300))
    injections = Table({"cpu": np.zeros(300, np.int32), "mode": np.array(["signal"] * 300, object),
                        "start_ns": injected, "duration_ns": rng.integers(50, 500, 300)})
    windows = Table({"cpu": np.zeros(1, np.int32), "probe": np.array(["detour"], object),
                     "start_ns": np.array([0]), "end_ns": np.array([starts[-1] + 10_000])})
    at_once = match_injections(whole, injections, windows, 0)
    assert 0 < at_once.found < at_once.injected  # some covered, some not
    for size in (1, 3, 50):
        def batches(size=size):
            return (whole.filter(slice(i, i + size)) for i in range(0, whole.rows, size))

        spooled = SpooledTable.of(tmp_path / "detours.parquet", whole.filter(slice(0, 0)),
                                  [(0, whole.rows, batches)])
        by_batch = match_injections(spooled, injections, windows, 0)
        assert np.array_equal(by_batch.detected_ns, at_once.detected_ns)
        assert by_batch.found == at_once.found


def test_the_causes_of_detours_add_up_the_same_batch_by_batch(tmp_path):
    from noisescope.trace.explain import breakdown

    rng = np.random.default_rng(3)
    starts = np.cumsum(rng.integers(1_000, 9_000, 300))
    durations = rng.integers(100, 900, 300)
    detours = Table({"cpu": np.zeros(300, np.int32), "start_ns": starts, "duration_ns": durations})
    kinds = np.array(["irq", "softirq", "thread"], object)
    details = np.array(["a", "b", "c", "d"], object)
    causes = Table({"cpu": np.zeros(600, np.int32), "start_ns": np.repeat(starts, 2),
                    "cause": kinds[rng.integers(0, 3, 600)],
                    "detail": details[rng.integers(0, 4, 600)],
                    "duration_ns": np.repeat(durations // 2, 2)})

    def spooled(table: Table, size: int) -> SpooledTable:
        def batches():
            return (table.filter(slice(i, i + size)) for i in range(0, table.rows, size))

        return SpooledTable.of(tmp_path / "t.parquet", table.filter(slice(0, 0)),
                               [(0, table.rows, batches)])

    expected = breakdown(detours, causes, 0)
    assert len(expected) == 12 and sum(row["count"] for row in expected) == 600
    assert breakdown(spooled(detours, 7), spooled(causes, 14), 0) == expected


def test_a_cpu_explained_part_by_part_is_explained_as_its_tables_read_whole():
    """The summary row gathered as the detours are explained (each part's
    detours, then its causes) is the one made from the whole tables: the
    same counts, breakdown and worst detours with their splits, also when an
    early worst one is pushed out later (its rows must not stay) and for
    equally long detours (the earlier wins)."""
    from noisescope.trace.events import TraceEvents
    from noisescope.trace.explain import CpuExplanation, attribution_summary

    rng = np.random.default_rng(11)
    starts = np.cumsum(rng.integers(1_000, 9_000, 200))
    durations = rng.integers(100, 900, 200)
    durations[5] = 5_000  # the longest of the first part, pushed out by three later
    durations[[120, 150, 180]] = 8_000  # equally long: the earlier ones win
    durations[190] = 8_000
    kinds = np.array(["irq", "softirq", "thread"], object)
    detours = Table({"cpu": np.zeros(200, np.int32), "start_ns": starts,
                     "duration_ns": durations, "cause": kinds[rng.integers(0, 3, 200)],
                     "cause_detail": np.array([""] * 200, object)})
    causes = Table({"cpu": np.zeros(400, np.int32), "start_ns": np.repeat(starts, 2),
                    "cause": kinds[rng.integers(0, 3, 400)],
                    "detail": np.array(["a", "b"] * 200, object),
                    "duration_ns": np.repeat(durations // 2, 2)})
    trace = TraceEvents.empty()
    [whole] = attribution_summary(detours, causes, trace)
    explanation = CpuExplanation(3)
    for first in range(0, 200, 30):  # a part's detours, then their causes
        explanation.add_detours(detours.filter(slice(first, first + 30)))
        explanation.add_causes(causes.filter(slice(2 * first, 2 * first + 60)))
    assert explanation.row(0, trace) == whole
    assert sum(split.rows for split in explanation._splits) == 6  # the worst three's only
    assert [w["start_ns"] for w in whole["worst"]] == starts[[120, 150, 180]].tolist()
    assert all(len(w["split"]) == 2 for w in whole["worst"])
