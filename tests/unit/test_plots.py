"""Plot helpers: envelopes keep every spike; bundle text is drawn literally."""

from __future__ import annotations

import numpy as np

from noisescope.bundle import Bundle
from noisescope.render.plots import COLUMNS, batched_envelope, envelope, noise_bars
from noisescope.tables import Table


def test_envelope_keeps_the_extremes_of_a_long_series():
    rng = np.random.default_rng(2)
    x = np.arange(1_200_000, dtype=np.int64)
    y = rng.normal(1000, 5, len(x))
    y[777_777] = 50_000  # one spike among 1.2 million samples
    y[123_456] = -40_000  # and one dip
    cx, low, high = envelope(x, y)
    assert len(cx) == COLUMNS
    assert np.nanmax(high) == 50_000 and np.nanmin(low) == -40_000
    column = int(777_777 / len(x) * COLUMNS)
    assert high[column] == 50_000 and cx[column] <= 777_777 + len(x) / COLUMNS


def test_envelope_marks_empty_columns_as_gaps():
    x = np.r_[np.arange(0, 5_000), np.arange(10_000, 15_000)]  # a gap between two windows
    cx, low, high = envelope(x, np.ones(len(x)))
    empty = np.isnan(high)
    assert empty.any() and not empty[0] and not empty[-1]
    assert np.all((cx[empty] > 4_990) & (cx[empty] < 10_010))


def test_short_series_are_drawn_point_by_point():
    x, y = np.array([3, 1, 2]), np.array([30, 10, 20])
    cx, low, high = envelope(x, y)
    assert cx.tolist() == [1, 2, 3] and low.tolist() == high.tolist() == [10, 20, 30]



def test_an_envelope_read_batch_by_batch_is_that_of_the_whole_series():
    """A report draws an hour's series a row group at a time: the same bins,
    extremes and gaps as from the series whole, on linear and log axes."""
    rng = np.random.default_rng(5)
    for points in (40, 2 * COLUMNS, 250_000):
        x = np.sort(rng.uniform(1, 1e6, points))
        x[points // 3: points // 2] += 5e5  # a gap, then a jump
        y = rng.lognormal(8, 1, points)
        cuts = np.sort(rng.choice(np.arange(1, points), 6, replace=False))
        pieces = list(zip(np.split(x, cuts), np.split(y, cuts), strict=True))
        rng.shuffle(pieces)  # batches need not come in order of x
        for log in (False, True):
            for drop_empty in (False, True):
                whole = envelope(x, y, log=log, drop_empty=drop_empty)
                batched = batched_envelope(lambda pieces=pieces: pieces, log=log,
                                           drop_empty=drop_empty)
                assert all(np.array_equal(a, b, equal_nan=True)
                           for a, b in zip(whole, batched, strict=True))
        assert len(envelope(x, y)[0]) == (points if points <= 2 * COLUMNS else COLUMNS)

def test_dollar_signs_in_labels_are_not_tex():
    def bundle(label, noise):
        return Bundle({"kind": "scan", "label": label, "summaries": {
            "detour": [{"cpu": 0, "noise_pct": noise}, {"cpu": 1, "noise_pct": noise * 2}]}})

    (figure,) = noise_bars([bundle("cost $5", 1.0), bundle("$x^2", 2.0)])
    assert figure.png()[:4] == b"\x89PNG"  # unbalanced '$' would fail as TeX
    labels = [t.get_text() for t in figure.figure.axes[0].get_xticklabels()]
    assert labels == [r"cost \$5", r"\$x^2"]


def _png_ok(figures, key):
    assert [f.key for f in figures] == [key]
    assert figures[0].png()[:4] == b"\x89PNG"
    return figures[0]


def test_cause_breakdown_stacks_the_shares_per_cpu():
    from noisescope.render.plots import cause_breakdown

    causes = [{"cause": "tick", "detail": "", "share_pct": 60.0},
              {"cause": "thread", "detail": "kworker", "share_pct": 30.0},
              {"cause": "thread", "detail": "sshd", "share_pct": 10.0}]
    bundle = Bundle({"kind": "scan", "summaries": {"attribution": [{"cpu": 3, "causes": causes}]}})
    figure = _png_ok(cause_breakdown([bundle]), "causes").figure
    bars = figure.axes[0].patches
    assert sorted(round(b.get_width()) for b in bars) == [40, 60]  # thread = 30 + 10


def test_every_cause_has_a_colour_of_its_own():
    from noisescope.render.plots import CAUSE_COLORS
    from noisescope.trace.attribute import CAUSES

    assert tuple(CAUSE_COLORS) == CAUSES
    assert len(set(CAUSE_COLORS.values())) == len(CAUSES)


def test_timer_latency_histogram_leaves_gaps_between_buckets_empty():
    from noisescope.render.plots import timerlat_histogram

    histogram = Table({"cpu": np.array([1, 1, 1]), "lower_ns": np.array([1000, 5000, 9000]),
                       "upper_ns": np.array([2000, 6000, 9000]),  # the last one is empty
                       "count": np.array([7, 2, 1])})
    bundle = Bundle({"kind": "timerlat", "summaries": {"timerlat": [{"cpu": 1}]}},
                    {"timerlat_histogram": histogram})
    figure = _png_ok(timerlat_histogram([bundle]), "timerlat").figure
    (stairs,) = figure.axes[0].patches
    values, edges = stairs.get_data().values, stairs.get_data().edges
    assert values.tolist() == [7, 0, 2] and edges.tolist() == [1000, 2000, 5000, 6000]


def test_run_time_cdfs_and_bars_per_configuration():
    from noisescope.render.plots import run_time_cdfs, workload_bars

    n = 6
    runs = Table({"workload": np.array(["make"] * 2 * n, dtype=object),
                  "configuration": np.array(["smt-on"] * n + ["nosmt"] * n, dtype=object),
                  "status": np.array(["ok"] * (2 * n - 1) + ["timeout"], dtype=object),
                  "warmup": np.array([True] + [False] * (2 * n - 1)),
                  "wall_ns": np.arange(2 * n) * 10 + 1000, "user_ns": np.full(2 * n, 900),
                  "sys_ns": np.full(2 * n, 50)})
    bundle = Bundle({"kind": "bench", "summaries": {"workloads": [{"workload": "make"}]}},
                    {"runs": runs})
    cdf = _png_ok(run_time_cdfs([bundle]), "runs-cdf").figure
    wall = cdf.axes[0]
    assert [line.get_label() for line in wall.get_lines()] == ["smt-on", "nosmt"]
    # the warm-up and the timed-out run are left out: 5 runs each, after the curve's start at 0
    assert [len(line.get_xdata()) for line in wall.get_lines()] == [6, 6]
    assert wall.get_lines()[0].get_xdata()[1] == 1010
    _png_ok(workload_bars([bundle]), "workloads")


def test_slowdown_curve_per_prediction():
    from noisescope.render.plots import slowdown_curves

    points = [{"procs": p, "slowdown_mean": s, "slowdown_min": s * 0.9, "slowdown_max": s * 1.1,
               "analytic_slowdown": s * 1.05} for p, s in ((2, 0.001), (64, 0.01), (4096, 0.2))]
    bundle = Bundle({"kind": "prediction", "label": "vm", "summaries": {"prediction": points}})
    figure = _png_ok(slowdown_curves([bundle]), "slowdown").figure
    mean = figure.axes[0].get_lines()[0]
    assert mean.get_xdata().tolist() == [2, 64, 4096]
    assert np.allclose(mean.get_ydata(), [0.1, 1.0, 20.0])


def _many_cpu_bundle(cpus: int, detours: dict[int, list[tuple[int, int]]]) -> Bundle:
    """A scan of `cpus` CPUs, each measured in two windows, [0, 1 s) and
    [1.5 s, 2.5 s), with the given detours (cpu -> [(start_ns, duration_ns)])."""
    second = 1_000_000_000
    rows = [(cpu, s, d) for cpu, spans in detours.items() for s, d in spans]
    table = Table({"cpu": np.array([r[0] for r in rows], np.int32),
                   "start_ns": np.array([r[1] for r in rows], np.int64),
                   "duration_ns": np.array([r[2] for r in rows], np.int64)})
    windows = Table({"cpu": np.repeat(np.arange(cpus, dtype=np.int32), 2),
                     "probe": np.full(2 * cpus, "detour", dtype=object),
                     "start_ns": np.tile(np.array([0, 3 * second // 2], np.int64), cpus),
                     "end_ns": np.tile(np.array([second, 5 * second // 2], np.int64), cpus)})
    summaries = [{"cpu": cpu, "noise_pct": 0.0, "threshold_ns": 1000} for cpu in range(cpus)]
    return Bundle({"kind": "scan", "summaries": {"detour": summaries}},
                  {"detours": table, "windows": windows})


def test_lost_time_grid_is_the_share_of_measured_time_per_cpu_and_bin():
    from noisescope.render.plots import lost_time_grid

    ms = 1_000_000
    bundle = _many_cpu_bundle(12, {5: [(200 * ms, 100 * ms)],  # all of bin 2 (100 ms bins)
                                   7: [(1_640 * ms, 10 * ms), (1_695 * ms, 10 * ms)],
                                   9: [(950 * ms, 100 * ms)]})  # half of it between windows
    grid = lost_time_grid(bundle.table("detours"), bundle.table("windows"), list(range(12)),
                          columns=25)
    assert grid.bin_ns == 100 * ms and grid.begin_ns == 0 and grid.cpus == list(range(12))
    lost = grid.lost_pct
    assert np.isnan(lost[:, 10:15]).all()  # 1.0-1.5 s: no window, nothing measured
    assert lost[5, 2] == 100.0 and np.nansum(lost[5]) == 100.0
    assert lost[7, 16] == 15.0 and lost[7, 17] == 5.0  # the second detour crosses 1.7 s
    assert lost[9, 9] == 50.0  # 50 of the bin's 100 measured ms
    quiet = [cpu for cpu in range(12) if cpu not in (5, 7, 9)]
    assert np.nansum(lost[quiet]) == 0.0


def test_heatmap_is_drawn_when_the_panels_leave_cpus_out():
    from noisescope.render.plots import HEATMAP_FLOOR_PCT, MAX_PANELS, detour_heatmap

    spans = {3: [(100_000_000, 20_000_000)]}
    assert detour_heatmap([_many_cpu_bundle(MAX_PANELS, spans)]) == []
    (figure,) = detour_heatmap([_many_cpu_bundle(256, spans)])
    assert figure.key == "detours-heatmap" and figure.png()[:4] == b"\x89PNG"
    image = np.ma.filled(figure.figure.axes[0].get_images()[0].get_array(), np.nan)
    assert image.shape == (256, 600)  # one row per CPU; 600 bins of 2.5 s / 600
    assert np.nanmax(image[3]) == 100.0 and np.nanmax(np.delete(image, 3, 0)) == HEATMAP_FLOOR_PCT
    assert np.isnan(image[:, 300]).all()  # 1.25 s: between the windows


def test_spectrum_panels_have_a_column_per_series_the_bundles_have():
    from noisescope.render.plots import spectrum_figure

    def bundle(series: list[str]) -> Bundle:
        frequency = np.tile(np.linspace(0, 500, 50), len(series))
        spectrum = Table({"cpu": np.zeros(len(frequency), np.int32),
                          "series": np.repeat(np.array(series, dtype=object), 50),
                          "frequency_hz": frequency, "power": np.ones(len(frequency))})
        summaries = [{"cpu": 0, "series": name, "sources": []} for name in series]
        return Bundle({"kind": "scan", "summaries": {"spectrum": summaries}},
                      {"spectrum": spectrum})

    detour_only = _png_ok(spectrum_figure([bundle(["detour"])]), "spectrum")
    assert detour_only.figure.axes[0].get_subplotspec().get_gridspec().get_geometry() == (1, 1)
    assert "FTQ" not in detour_only.caption and "(left)" not in detour_only.caption
    both = _png_ok(spectrum_figure([bundle(["detour", "ftq"])]), "spectrum")
    assert both.figure.axes[0].get_subplotspec().get_gridspec().get_geometry() == (1, 2)
    assert [ax.get_title(loc="left").rsplit(": ", 1)[-1] for ax in both.figure.axes] == [
        "detour", "ftq"]
    assert "(left)" in both.caption and "(right)" in both.caption


def test_figures_drawn_side_by_side_come_back_in_their_order():
    import struct

    from noisescope.render.plots import Figure, new_figure
    from noisescope.render.report import rendered

    # panels 1, 3, 2: drawn most panels first, each PNG in its figure's place
    figures = [Figure(f"f{rows}", "", "", new_figure(rows)[0]) for rows in (1, 3, 2)]
    heights = [struct.unpack(">I", png[20:24])[0] for png in rendered(figures)]  # IHDR height
    assert heights == [struct.unpack(">I", f.png()[20:24])[0] for f in figures]
    assert heights[0] < heights[2] < heights[1]
