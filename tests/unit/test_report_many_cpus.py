"""The report of a scan of many CPUs stays readable and small: every CPU's lost
time on one CPU x time heat map, the per-CPU panels only for the noisiest, and
the per-CPU tables whole."""

from __future__ import annotations

import re

import numpy as np

import noisescope
from noisescope.analysis.spectrum import add_spectra
from noisescope.bundle import Bundle
from noisescope.host import read_host_facts
from noisescope.manifest import new_manifest
from noisescope.probes.summary import detour_summary
from noisescope.render.plots import (
    CAUSE_BARS,
    FIGURES,
    MAX_PANELS,
    cause_breakdown,
    spectrum_figure,
)
from noisescope.render.report import write_report
from noisescope.tables import Table

from ..synthetic_fleet import HOST_ROOT, TICKS_PER_NS

SECOND = 1_000_000_000
CPUS = 40  # more than the MAX_PANELS drawn one by one (bench/many_cpus.py: 256 CPUs)
NOISY = (17, 30)  # planted: 100 detours of 200 us, the others 100 of 5 us
GOAL_MB = 10


def many_cpu_scan() -> Bundle:
    rng = np.random.default_rng(3)
    detours, histograms, summaries = [], [], []
    for cpu in range(CPUS):
        starts = np.sort(rng.choice(SECOND // 1_000_000, 100, replace=False)) * 1_000_000
        durations = np.full(100, 200_000 if cpu in NOISY else 5_000, np.int64)
        stats = {"cpu": cpu, "windows": 1, "measured_ns": SECOND, "run_delay_ns": 0,
                 "involuntary_switches": 0, "minor_faults": 0, "major_faults": 0}
        native = {"lost_ticks": int(durations.sum() * TICKS_PER_NS), "detours": 100,
                  "stored": 100, "overflow": 0, "stored_before_loss": 100,
                  "max_gap_ticks": int(durations.max() * TICKS_PER_NS),
                  "resolution_ticks": 40, "hourglass_gaps": 100}
        histogram = Table({"cpu": np.full(2, cpu, np.int32),
                           "lower_ticks": np.array([64, 4096], np.uint64),
                           "upper_ticks": np.array([128, 8192], np.uint64),
                           "lower_ns": np.array([25, 1575]), "upper_ns": np.array([50, 3151]),
                           "count": np.array([SECOND // 20, 100])})
        histograms.append(histogram)
        summaries.append(detour_summary(stats, native, durations, histogram, 1_000, 1_000,
                                        TICKS_PER_NS))
        detours.append(Table({"cpu": np.full(100, cpu, np.int32), "start_ns": starts.astype(np.int64),
                              "duration_ns": durations}))
    windows = Table({"cpu": np.arange(CPUS, dtype=np.int32),
                     "probe": np.full(CPUS, "detour", dtype=object),
                     "start_ns": np.zeros(CPUS, np.int64), "end_ns": np.full(CPUS, SECOND, np.int64)})
    manifest = new_manifest(
        "scan", label=f"{CPUS} CPUs", started_utc="2026-01-01T00:00:00.000000Z", complete=True,
        argv=["noisescope", "scan"], host=read_host_facts(HOST_ROOT).to_dict(),
        clock={"counter": "tsc", "ticks_per_second": TICKS_PER_NS * 1e9,
               "frequency_source": "kernel", "calibrated_ticks_per_second": None,
               "origin_ticks": 0, "origin_monotonic_raw_ns": 0, "origin_realtime_ns": 0},
        parameters={"cpus": list(range(CPUS)), "duration_ns": SECOND, "probes": ["detour"],
                    "threshold_ns": 1_000, "priority": 0, "injections": [],
                    "schedule": {"runtime_ns": SECOND, "period_ns": SECOND, "windows": 1,
                                 "last_runtime_ns": SECOND}},
        summaries={"detour": summaries}, warnings=[], system=[])
    return Bundle(manifest, {"detours": Table.concat(detours), "windows": windows,
                             "gap_histogram": Table.concat(histograms)})


def test_report_of_many_cpus_has_the_heat_map_and_only_the_noisiest_panels(tmp_path):
    many_cpu_scan().write(tmp_path / "bundle")
    html = write_report([noisescope.load(tmp_path / "bundle")], tmp_path / "report.html") \
        .read_text()
    assert len(html.encode()) <= GOAL_MB * 1_000_000
    assert 'id="figure-detours-heatmap"' in html and 'id="figure-detours-time"' in html
    # the timeline, both histograms and the spectrum draw the noisiest MAX_PANELS CPUs, not
    # one line each
    assert html.count(f"{CPUS - MAX_PANELS} more CPUs are not drawn") == 4
    # the per-CPU table has a row for every CPU
    rows = re.findall(r"<tr>\s*<td[^>]*>\s*(\d+)\s*</td>", html)
    assert set(range(CPUS)) <= {int(cpu) for cpu in rows}


def _named_cpus(figure) -> list[int]:
    """The CPUs a figure names: in its panels' titles, its bars' labels, its legends."""
    figure.draw_without_rendering()  # (a bar chart's category labels are set when drawn)
    texts = [ax.get_title(loc="left") for ax in figure.axes]
    texts += [label.get_text() for ax in figure.axes for label in ax.get_yticklabels()]
    texts += [text.get_text() for ax in figure.axes if ax.get_legend()
              for text in ax.get_legend().get_texts()]
    return [int(cpu) for text in texts for cpu in re.findall(r"\bCPU (\d+)\b", text)]


def test_figures_that_leave_cpus_out_show_the_noisiest(tmp_path):
    """Each figure of a panel or a bar per CPU that leaves some of the 40 out
    shows the planted noisy CPUs, as its caption says (the spectrum and the
    cause breakdown showed the first CPUs under that caption)."""
    bundle = many_cpu_scan()
    add_spectra(bundle)
    bundle.summaries["attribution"] = [  # every CPU's time to one cause: only noise ranks them
        {"cpu": cpu, "causes": [{"cause": "tick", "detail": "", "share_pct": 100.0}]}
        for cpu in range(CPUS)]
    figures = [figure for draw in (*FIGURES["detour"], spectrum_figure, cause_breakdown)
               for figure in draw([bundle])]
    leaving_out = {f.key: f for f in figures if "more CPUs are not drawn" in f.caption}
    assert set(leaving_out) == {"detours-time", "detours-histogram", "hourglass", "spectrum",
                                "causes"}
    for key, figure in leaving_out.items():
        shown = CAUSE_BARS if key == "causes" else MAX_PANELS
        assert f"{CPUS - shown} more CPUs are not drawn (the noisiest {shown} are)" \
            in figure.caption, key
        named = _named_cpus(figure.figure)
        assert len(named) == len(set(named)) == shown, key
        assert set(NOISY) <= set(named), key


def _drawn(figure) -> list[np.ndarray]:
    """What a figure shows: its lines', markers', patches' and images' data."""
    out = []
    for axes in figure.axes:
        out += [np.asarray(line.get_xydata()) for line in axes.lines]
        out += [np.asarray(c.get_offsets()) for c in axes.collections]
        out += [c.get_paths()[0].vertices for c in axes.collections if c.get_paths()]
        out += [patch.get_path().vertices for patch in axes.patches]
        out += [np.ma.filled(image.get_array(), np.nan) for image in axes.get_images()]
    return out


def test_the_detour_figures_read_a_stored_bundle_a_cpu_and_a_row_group_at_a_time(
        tmp_path, monkeypatch):
    """An hour's report loaded its detours whole (2.3 GB for 29 M detours): the
    detour figures of a stored bundle read them by CPU and row group (a whole
    read fails here), and draw what they drew from the table in memory."""
    import noisescope.bundle
    from noisescope.render.plots import FIGURES

    many_cpu_scan().write(tmp_path / "bundle")
    stored = noisescope.load(tmp_path / "bundle")
    whole_read = noisescope.bundle._read_table

    def no_whole_detours(path, *args):
        assert path.name != "detours.parquet", "the detours were read whole"
        return whole_read(path, *args)

    monkeypatch.setattr(noisescope.bundle, "_read_table", no_whole_detours)
    keys = []
    for draw in FIGURES["detour"]:
        for made, expected in zip(draw([stored]), draw([many_cpu_scan()]), strict=True):
            keys.append(made.key)
            shown, wanted = _drawn(made.figure), _drawn(expected.figure)
            assert len(shown) == len(wanted) > 0
            assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(shown, wanted, strict=True))
    assert {"detours-heatmap", "detours-time", "detours-histogram"} <= set(keys)
