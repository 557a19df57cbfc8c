"""Importing cyclictest, oslat and sysjitter output captured on this machine
(tests/fixtures/imports, see its README for the commands)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import noisescope
from noisescope.analysis.summary import timerlat_summary
from noisescope.errors import UsageError
from noisescope.imports import import_file, read_source

from ..conftest import FIXTURES
from .test_bundle import validate

IMPORTS = FIXTURES / "imports"
CYCLICTEST = IMPORTS / "cyclictest"
OSLAT = IMPORTS / "oslat"
SYSJITTER = IMPORTS / "sysjitter"


def footer(path, key):
    """The values of a '# key:' line of cyclictest's histogram footer."""
    for line in path.read_text().splitlines():
        if line.startswith(f"# {key}:"):
            return [int(v) for v in line.split(":", 1)[1].split()]
    raise AssertionError(key)


def native_timerlat_keys():
    stats = {"cpu": 0, "windows": 1, "measured_ns": 1, "run_delay_ns": 0,
             "involuntary_switches": 0, "minor_faults": 0, "major_faults": 0}
    return set(timerlat_summary(stats, interval_ns=1, samples=0, missed=0, min_ns=0, max_ns=0,
                                sum_ns=0, histogram=None, histogram_limit_ns=1,
                                histogram_overflow=0))


def test_cyclictest_quiet_histogram_matches_its_footer():
    imported = read_source("cyclictest", CYCLICTEST / "hist-quiet.txt")
    path = CYCLICTEST / "hist-quiet.txt"
    total, overflows = footer(path, "Total"), footer(path, "Histogram Overflows")
    assert imported.probe == "timerlat" and imported.format == "histogram text"
    table = imported.tables["timerlat_histogram"]
    for thread, s in enumerate(imported.summaries):
        assert s["thread"] == thread and s["cpu"] is None  # the text does not say the CPU
        assert s["samples"] == total[thread] + overflows[thread] == 5000
        assert s["histogram_overflow"] == overflows[thread]
        assert s["min_ns"] == footer(path, "Min Latencies")[thread] * 1000
        assert s["max_ns"] == footer(path, "Max Latencies")[thread] * 1000
        assert s["missed"] is None  # cyclictest does not count them
        rows = table.where(thread=thread)
        assert rows["count"].sum() == 5000
        inside = rows.filter(rows["lower_ns"] < 100_000)
        assert np.all(inside["upper_ns"] - inside["lower_ns"] == 1000)
        assert s["p50_ns"] is not None and s["min_ns"] <= s["p50_ns"] <= s["p99_ns"]
    assert imported.parameters["histogram_limit_ns"] == 100_000


def test_cyclictest_text_and_json_of_one_run_agree():
    text = read_source("cyclictest", CYCLICTEST / "hist-quiet.txt")
    data = read_source("cyclictest", CYCLICTEST / "hist.json")
    assert data.format == "json" and data.version == "2.40"
    assert data.command.startswith("cyclictest -p 90")
    assert [s["cpu"] for s in data.summaries] == [0, 1]  # the JSON says where threads ran
    assert data.parameters["interval_ns"] == 200_000 and data.parameters["priority"] == 90
    for a, b in zip(text.summaries, data.summaries, strict=True):
        for key in ("samples", "min_ns", "max_ns", "histogram_overflow", "p50_ns", "p99_ns"):
            assert a[key] == b[key], key
    a, b = text.tables["timerlat_histogram"], data.tables["timerlat_histogram"]
    for column in ("thread", "lower_ns", "upper_ns", "count"):
        assert a[column].tolist() == b[column].tolist()


def test_cyclictest_live_output_takes_the_final_t_lines():
    imported = read_source("cyclictest", CYCLICTEST / "hist-live.txt", cpus=(0, 1))
    assert [s["cpu"] for s in imported.summaries] == [0, 1]
    for s in imported.summaries:
        assert s["samples"] == 5000 and s["interval_ns"] == 200_000
    # the last live line of thread 0 reads Max: 303 (us)
    last = [line for line in (CYCLICTEST / "hist-live.txt").read_text().splitlines()
            if line.startswith("T: 0")][-1]
    assert imported.summaries[0]["max_ns"] == int(last.split("Max:")[1]) * 1000


def test_cyclictest_without_histogram_text_and_json():
    text = read_source("cyclictest", CYCLICTEST / "summary.txt")
    data = read_source("cyclictest", CYCLICTEST / "summary.json")
    # without -h the second thread runs at interval + distance (500 us)
    assert [s["interval_ns"] for s in text.summaries] == [200_000, 700_000]
    assert [s["interval_ns"] for s in data.summaries] == [200_000, 700_000]
    for a, b in zip(text.summaries, data.summaries, strict=True):
        assert a["samples"] == b["samples"] and a["max_ns"] == b["max_ns"]
        assert a["p50_ns"] is None and a["percentiles_from"] is None
    assert not text.tables and not data.tables


def test_imported_cyclictest_uses_the_native_timerlat_keys():
    imported = read_source("cyclictest", CYCLICTEST / "hist.json")
    assert set(imported.summaries[0]) - {"thread"} <= native_timerlat_keys()


def test_oslat_text_and_json_of_one_run_agree():
    text = read_source("oslat", OSLAT / "run.txt")
    data = read_source("oslat", OSLAT / "run.json")
    assert text.version == data.version == "2.40"
    for a, b in zip(text.summaries, data.summaries, strict=True):
        for key in ("cpu", "samples", "min_ns", "max_ns", "p50_ns", "p99_ns", "p999_ns"):
            assert a[key] == b[key], key
        assert a["avg_ns"] == pytest.approx(b["avg_ns"], abs=1)  # text has 3 decimals of us
    json_data = json.loads((OSLAT / "run.json").read_text())
    table = data.tables["oslat_histogram"]
    for cpu_key, thread in json_data["thread"].items():
        rows = table.where(cpu=thread["cpu"])
        assert rows["count"].sum() == sum(thread["histogram"].values())
        # bucket "k" holds [k-1, k) us; the last one runs up to the maximum
        assert rows["lower_ns"][0] == 0 and rows["upper_ns"][-1] >= thread["max"] * 1000 - 1000
        assert data.summaries[int(cpu_key)]["max_ns"] == thread["max"] * 1000


def test_sysjitter_summary_maps_onto_the_detour_keys():
    imported = read_source("sysjitter", SYSJITTER / "summary.txt")
    assert imported.probe == "detour"
    first = imported.summaries[0]
    assert first["cpu"] == 0 and first["threshold_ns"] == 200
    assert first["detours"] == 4911 and first["detours_per_s"] == pytest.approx(491.099)
    assert first["noise_pct"] == pytest.approx(0.823)
    assert first["lost_ns"] == 82259250 and first["max_ns"] == 8071254
    assert first["p50_ns"] == 13287 and first["p9999_ns"] == 8071254
    assert imported.parameters["threshold_ns"] == 200


def test_sysjitter_piped_through_column(tmp_path):
    aligned = tmp_path / "aligned.txt"
    lines = (SYSJITTER / "summary.txt").read_text().splitlines()
    aligned.write_text("\n".join(f"{line.split()[0]:<16}" + "".join(f"{v:>14}" for v in
                                 line.split()[1:]) for line in lines) + "\n")
    a = read_source("sysjitter", SYSJITTER / "summary.txt").summaries
    b = read_source("sysjitter", aligned).summaries
    assert a == b


def cut(path, tmp_path, keep_lines, tail=""):
    out = tmp_path / path.name
    out.write_text("\n".join(path.read_text().splitlines()[:keep_lines]) + tail)
    return out


@pytest.mark.parametrize("tool, path, keep, tail, line, words", [
    ("cyclictest", CYCLICTEST / "hist-quiet.txt", 50, "", 50, "no '# Total:' line"),
    ("cyclictest", CYCLICTEST / "hist-quiet.txt", 50, "\n000048 0000", 51, "row has 1 counts"),
    ("cyclictest", CYCLICTEST / "hist-live.txt", 5, "\nT: 1 (20314) P:90 I:2", 6,
     "cannot read this T: line"),
    ("cyclictest", CYCLICTEST / "hist.json", 30, "", 30, "the JSON ends early"),
    ("cyclictest", CYCLICTEST / "hist.json", 30, "\n]", 31, "not valid JSON"),
    ("cyclictest", OSLAT / "run.txt", 40, "", 1, "unexpected line"),
    ("oslat", OSLAT / "run.txt", 40, "", 40, "no 'Minimum:' row"),
    ("oslat", OSLAT / "run.txt", 20, "\n    008 (us):\t 12", 21, "1 values for 2 CPUs"),
    ("oslat", OSLAT / "run.json", 20, "", 20, "the JSON ends early"),
    ("sysjitter", SYSJITTER / "summary.txt", 9, "", 9, "no 'int_mean(ns):' row"),
    ("sysjitter", SYSJITTER / "summary.txt", 7, "\nint_min(ns): 1203 x", 8, "not a number"),
])
def test_malformed_or_truncated_files_name_the_line(tool, path, keep, tail, line, words,
                                                     tmp_path):
    damaged = cut(path, tmp_path, keep, tail)
    with pytest.raises(UsageError) as error:
        read_source(tool, damaged)
    assert f"{damaged}:{line}:" in str(error.value) and words in str(error.value)


def test_edited_histogram_that_does_not_add_up(tmp_path):
    text = (CYCLICTEST / "hist-quiet.txt").read_text().replace("# Total: 000004997",
                                                               "# Total: 000004990")
    edited = tmp_path / "edited.txt"
    edited.write_text(text)
    with pytest.raises(UsageError, match=r"edited.txt:\d+: the histogram rows add up"):
        read_source("cyclictest", edited)


def test_cpus_must_match_the_threads():
    with pytest.raises(UsageError, match="names 3 CPUs but .* has 2 threads"):
        read_source("cyclictest", CYCLICTEST / "hist-quiet.txt", cpus=(0, 1, 2))


@pytest.mark.parametrize("tool, path, probe, table", [
    ("cyclictest", CYCLICTEST / "hist.json", "timerlat", "timerlat_histogram"),
    ("oslat", OSLAT / "run.json", "oslat", "oslat_histogram"),
    ("sysjitter", SYSJITTER / "summary.txt", "detour", None),
])
def test_import_bundles_validate_and_load(tool, path, probe, table, tmp_path):
    written = import_file(tool, path, label="old-run", argv=["test"],
                          destination=tmp_path / "b").path
    bundle = noisescope.load(written)
    validate(bundle.manifest)
    assert bundle.kind == "import" and bundle.label == "old-run"
    assert bundle.manifest["source"]["tool"] == tool
    assert list(bundle.summaries) == [probe]
    if table:
        assert bundle.table(table).rows > 0
