"""Importing cyclictest, oslat, sysjitter and rtla output (tests/fixtures/imports:
captured, or constructed where the tool could not run; see the READMEs there)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import noisescope
from noisescope.analysis.compare import compare
from noisescope.errors import UsageError
from noisescope.imports import import_file, read_source
from noisescope.probes.summary import timerlat_summary

from ..conftest import FIXTURES
from ..helpers import assert_usage_error
from .test_bundle import validate

IMPORTS = FIXTURES / "imports"
CYCLICTEST = IMPORTS / "cyclictest"
OSLAT = IMPORTS / "oslat"
SYSJITTER = IMPORTS / "sysjitter"
RTLA = IMPORTS / "rtla"


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


# -- rtla ---------------------------------------------------------------------------------


def rtla_hist_columns(path):
    """A captured rtla histogram read by hand: {column name: (bucket indexes, counts,
    {over, count, min, avg, max})}."""
    lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
    names = next(fields[1:] for fields in lines if fields[0] == "Index")
    rows = [fields for fields in lines if fields[0].isdigit()]
    footer = {fields[0][:-1]: fields[1:] for fields in lines if fields[0].endswith(":")}
    return {name: (np.array([int(r[0]) for r in rows]), np.array([int(r[j + 1]) for r in rows]),
                   {k: int(v[j]) for k, v in footer.items()}) for j, name in enumerate(names)}


def median_bucket_middle_ns(indexes, counts, total, unit_ns=1000, width=1):
    """The middle of the bucket that holds the sample of rank total/2."""
    bucket = indexes[np.searchsorted(np.cumsum(counts), 0.5 * total)]
    return (bucket + width / 2) * unit_ns


def test_rtla_osnoise_top_quiet():
    imported = read_source("rtla", RTLA / "osnoise-top.txt")
    assert imported.probe == "osnoise" and imported.format == "osnoise top"
    [s] = imported.summaries
    # the file's row: CPU 0, 4 periods, Runtime 4000000, Noise 1757161, % CPU Aval 56.07097,
    # Max Noise 551551, Max Single 25379, HW 951, NMI 0, IRQ 737, Softirq 105, Thread 6 (us)
    assert s["cpu"] == 0 and s["periods"] == 4
    assert s["runtime_ns"] == 4_000_000_000 and s["noise_ns"] == 1_757_161_000
    assert s["noise_pct"] == pytest.approx(100 - 56.07097, abs=1e-5)
    assert s["max_noise_ns"] == 551_551_000 and s["max_single_ns"] == 25_379_000
    assert [s[f"{k}_count"] for k in ("hw", "nmi", "irq", "softirq", "thread")] == \
        [951, 0, 737, 105, 6]
    assert s["irq_per_s"] == pytest.approx(737 / 4) and s["thread_per_s"] == pytest.approx(6 / 4)
    assert imported.parameters == {"cpus": [0], "session_ns": 4_000_000_000}


def test_rtla_timerlat_top_quiet():
    imported = read_source("rtla", RTLA / "timerlat-top.txt")
    assert imported.probe == "timerlat" and imported.format == "timerlat top"
    [s] = imported.summaries
    # CPU 0, COUNT 3657, IRQ cur/min/avg/max 54 5 150 76476, thread 85 66 219 76777 (us)
    assert s["cpu"] == 0 and s["samples"] == s["irq_samples"] == 3657
    assert (s["min_ns"], s["avg_ns"], s["max_ns"]) == (66_000, 219_000, 76_777_000)
    assert (s["irq_min_ns"], s["irq_avg_ns"], s["irq_max_ns"]) == (5_000, 150_000, 76_476_000)
    assert s["p50_ns"] is None and s["percentiles_from"] is None  # top has no histogram
    assert s["interval_ns"] is None and s["missed"] is None  # the file does not say
    assert not imported.tables


@pytest.mark.parametrize("name", ["osnoise-top-live-2cpus.txt", "timerlat-top-live-2cpus.txt"])
def test_rtla_live_top_imports_its_last_table(name, tmp_path):
    text = (RTLA / name).read_text()
    assert text.count("\x1bc") == 3  # four tables (the first one's ESC was lost in the capture)
    last, first = tmp_path / "last.txt", tmp_path / "first.txt"
    last.write_text(text[text.rindex("\x1bc"):])
    first.write_text(text[:text.index("\x1bc")])
    live = read_source("rtla", RTLA / name)
    assert live.summaries == read_source("rtla", last).summaries
    assert live.summaries != read_source("rtla", first).summaries
    assert live.details["refreshes"] == 4 and [s["cpu"] for s in live.summaries] == [0, 1]


def test_rtla_live_tops_numbers_come_from_the_last_table():
    osnoise = read_source("rtla", RTLA / "osnoise-top-live-2cpus.txt").summaries
    # last table, CPU 1: #3 3033941 2307791 23.93421 884358 53939 180 0 375 81 0
    assert osnoise[1]["periods"] == 3 and osnoise[1]["irq_count"] == 375
    assert osnoise[1]["thread_count"] == 0 and osnoise[1]["max_single_ns"] == 53_939_000
    timerlat = read_source("rtla", RTLA / "timerlat-top-live-2cpus.txt").summaries
    # last table, CPU 1: #2446 | 106 4 315 15890 | 198 51 347 16038
    assert timerlat[1]["samples"] == 2446 and timerlat[1]["irq_min_ns"] == 4_000
    assert timerlat[1]["max_ns"] == 16_038_000


def test_rtla_stop_notes_and_cpus_without_samples(tmp_path):
    """rtla 6.1 ends a run stopped by a threshold with two notes, and prints dashes
    for a context without samples (timerlat_top.c)."""
    text = (RTLA / "timerlat-top.txt").read_text()
    edited = tmp_path / "stopped.txt"
    edited.write_text(text + "  1 #12       |       40        20        30        50 |        -  "
                      "       -         -         -\nrtla timerlat hit stop tracing\n"
                      "  Saving trace to timerlat_trace.txt\n")
    imported = read_source("rtla", edited)
    assert imported.summaries[0] == read_source("rtla", RTLA / "timerlat-top.txt").summaries[0]
    quiet = imported.summaries[1]
    assert quiet["cpu"] == 1 and quiet["samples"] == 0 and quiet["max_ns"] is None
    assert quiet["irq_samples"] == 12 and quiet["irq_max_ns"] == 50_000
    assert imported.details["notes"] == ["rtla timerlat hit stop tracing",
                                         "Saving trace to timerlat_trace.txt"]
    validate(import_file("rtla", edited, argv=["t"]).manifest)


def check_against_footer(s, count_key, table, indexes, counts, footer):
    """One CPU's summary and histogram rows against the hist's own columns
    and footer (in us): count, overflow, min, max, the rows (buckets and the
    overflow row) and the median from the buckets."""
    assert s[count_key] == footer["count"] and s["histogram_overflow"] == footer["over"]
    assert (s["min_ns"], s["max_ns"]) == (footer["min"] * 1000, footer["max"] * 1000)
    assert table.where(cpu=s["cpu"])["count"].sum() == footer["count"]
    assert s["p50_ns"] == median_bucket_middle_ns(indexes, counts, footer["count"])


def test_rtla_timerlat_hist_matches_its_columns():
    path = RTLA / "timerlat-hist.txt"
    columns = rtla_hist_columns(path)
    imported = read_source("rtla", path)
    assert imported.format == "timerlat hist" and imported.probe == "timerlat"
    thread_table = imported.tables["timerlat_histogram"]
    irq_table = imported.tables["timerlat_irq_histogram"]
    assert imported.parameters["bucket_ns"] == 1000
    assert imported.parameters["histogram_limit_ns"] == 256_000  # last printed bucket: 255
    for s in imported.summaries:
        indexes, counts, footer = columns[f"Thr-{s['cpu']:03d}"]
        check_against_footer(s, "samples", thread_table, indexes, counts, footer)
        assert s["avg_ns"] == footer["avg"] * 1000
        rows = thread_table.where(cpu=s["cpu"])
        inside = rows.filter(rows["lower_ns"] < 256_000)
        assert inside["lower_ns"].tolist() == (indexes[counts > 0] * 1000).tolist()
        assert np.all(inside["upper_ns"] - inside["lower_ns"] == 1000)
        assert rows["upper_ns"][-1] > s["max_ns"]  # the overflow row reaches the maximum
        # this emulated run overflowed more than 1% of its samples: p99 is not made up
        assert footer["over"] / footer["count"] > 0.01 and s["p99_ns"] is None
        _, _, irq = columns[f"IRQ-{s['cpu']:03d}"]
        assert s["irq_samples"] == irq["count"] and s["irq_max_ns"] == irq["max"] * 1000
        assert irq_table.where(cpu=s["cpu"])["count"].sum() == irq["count"]


def test_rtla_timerlat_hist_without_irq_columns():
    full = read_source("rtla", RTLA / "timerlat-hist.txt")
    thread_only = read_source("rtla", RTLA / "timerlat-hist-no-irq.txt")
    for a, b in zip(full.summaries, thread_only.summaries, strict=True):
        assert {k: v for k, v in a.items() if not k.startswith("irq_")} == \
            {k: v for k, v in b.items() if not k.startswith("irq_")}
        assert b["irq_samples"] is None and b["irq_max_ns"] is None
    assert list(thread_only.tables) == ["timerlat_histogram"]


def test_rtla_osnoise_hist_maps_onto_the_detour_keys():
    path = RTLA / "osnoise-hist.txt"
    columns = rtla_hist_columns(path)
    imported = read_source("rtla", path)
    assert imported.probe == "detour" and imported.format == "osnoise hist"
    table = imported.tables["osnoise_histogram"]
    for s in imported.summaries:
        indexes, counts, footer = columns[f"CPU-{s['cpu']:03d}"]
        check_against_footer(s, "detours", table, indexes, counts, footer)
        assert s["threshold_ns"] is None and s["noise_pct"] is None  # rtla does not print them
    assert imported.parameters["histogram_limit_ns"] == 251_000  # last printed bucket: 250


def test_rtla_nanoseconds(tmp_path):
    top = tmp_path / "top-ns.txt"
    top.write_text((RTLA / "timerlat-top.txt").read_text().replace("(us)", "(ns)"))
    [s] = read_source("rtla", top).summaries
    assert (s["min_ns"], s["max_ns"], s["irq_min_ns"]) == (66, 76_777, 5)
    hist = tmp_path / "hist-ns.txt"
    hist.write_text((RTLA / "timerlat-hist.txt").read_text().replace(
        "microseconds (us)", "nanoseconds (ns)"))
    imported = read_source("rtla", hist)
    assert imported.parameters["bucket_ns"] == 1 and imported.summaries[0]["min_ns"] == 39
    inside = imported.tables["timerlat_histogram"].where(cpu=0)
    assert np.all((inside["upper_ns"] - inside["lower_ns"])[:-1] == 1)


def test_rtla_bucket_width_from_the_indexes(tmp_path):
    """rtla -b 10 prints each bucket's index as bucket x 10."""
    lines = (RTLA / "timerlat-hist.txt").read_text().splitlines()
    wide = tmp_path / "b10.txt"
    wide.write_text("\n".join(f"{int(line.split()[0]) * 10:<6d}" + line[6:]
                              if line[:1].isdigit() else line for line in lines) + "\n")
    imported = read_source("rtla", wide)
    assert imported.parameters["bucket_ns"] == 10_000
    assert imported.parameters["histogram_limit_ns"] == 2_560_000
    indexes, counts, footer = rtla_hist_columns(RTLA / "timerlat-hist.txt")["Thr-000"]
    s = imported.summaries[0]
    assert s["p50_ns"] == median_bucket_middle_ns(indexes * 10, counts, footer["count"],
                                                  width=10)
    rows = imported.tables["timerlat_histogram"].where(cpu=0)
    assert np.all((rows["upper_ns"] - rows["lower_ns"])[:-1] == 10_000)


def edit_line(number, new):
    """A transformation of a file's text: line `number` (1-based) replaced by `new`."""
    def edit(text):
        lines = text.split("\n")
        lines[number - 1] = new
        return "\n".join(lines)
    return edit


def keep(count, tail=""):
    return lambda text: "\n".join(text.split("\n")[:count]) + tail


def without_columns(prefix):
    """The histogram as rtla prints it without the columns named prefix* (--no-irq, --no-thread)."""
    def edit(text):
        lines = text.split("\n")
        names = lines[3].split()
        kept = [j for j, name in enumerate(names) if not name.startswith(prefix)]
        return "\n".join(lines[:3] + [" ".join(line.split()[j] for j in kept) if line else line
                                      for line in lines[3:]])
    return edit


OSNOISE_ROW_4 = "  0 #4           4000000      1757161    56.07097      551551        25379"


@pytest.mark.parametrize("path, edit, line, words", [
    (RTLA / "osnoise-top-live-2cpus.txt", keep(19), 19, "last table has 1 of the 2 CPU rows"),
    (RTLA / "osnoise-top.txt", keep(3, "\n" + OSNOISE_ROW_4), 4,
     "has 5 values after its period count for 10 columns"),
    (RTLA / "osnoise-top.txt", lambda t: t.replace(" 737 ", " 7x7 "), 4,
     "IRQ value '7x7' is not a whole number"),
    (RTLA / "osnoise-top.txt", lambda t: t.replace("56.07097", "57.07097"), 4,
     "'% CPU Aval' 57.07097 does not match Runtime 4000000 and Noise 1757161"),
    (RTLA / "osnoise-top.txt", lambda t: t + "garbage\n", 5, "unexpected line 'garbage'"),
    (RTLA / "timerlat-top.txt", keep(2), 2, "the table ends before its column names"),
    (RTLA / "timerlat-top.txt", keep(3, "\n  0 #3657      |       54         5       150 "
                                      "    76476 |       85"), 4,
     "the thread latency has 1 values for 4 columns"),
    (RTLA / "timerlat-top.txt", keep(3, "\n  0 #3657      |       54         5"), 4,
     "cannot read the CPU 0 row"),
    (RTLA / "timerlat-hist.txt", keep(100), 100, "the histogram has no 'over:' line"),
    (RTLA / "timerlat-hist.txt", keep(249), 249, "the histogram has no 'min:' line"),
    (RTLA / "timerlat-hist.txt", keep(50, "\n51            0         0"), 51,
     "'51' has 2 values for the 4 columns"),
    (RTLA / "timerlat-hist.txt", lambda t: t.replace("count:     2799", "count:     2798"), 249,
     "column IRQ-000: the rows and 'over:' hold 2799 samples but 'count:' says 2798"),
    (RTLA / "timerlat-hist.txt", edit_line(6, "1             1         0         0         0"),
     6, "bucket 1 after bucket 2"),
    (RTLA / "timerlat-hist.txt", without_columns("Thr"), 4, "no thread latency for CPU 0"),
    (RTLA / "timerlat-hist.txt", edit_line(4, "IRQ-000   Thr-000   IRQ-001   Thr-001"), 4,
     "no Index column (rtla --no-index)"),
    (RTLA / "osnoise-hist.txt", edit_line(2, "# Time unit is parsecs"), 2,
     "expected '# Time unit is ...'"),
    (CYCLICTEST / "hist-quiet.txt", keep(1000), 1, "not rtla output"),
    (SYSJITTER / "summary.txt", keep(1000), 1, "not rtla output"),
    (RTLA / "timerlat-top.txt", lambda t: "\x1b[2;37;40m\x1b[0;0;0m\n", 1,
     "no text besides terminal codes"),
    (RTLA / "timerlat-top.txt", lambda t: "\n\n", 1, "the file is empty"),
])
def test_rtla_bad_files_name_the_line(path, edit, line, words, tmp_path):
    damaged = tmp_path / "damaged.txt"
    damaged.write_text(edit(path.read_text()))
    with pytest.raises(UsageError) as error:
        read_source("rtla", damaged)
    message = str(error.value)
    assert f"{damaged}:{line}:" in message and words in message and "\n" not in message


def test_rtla_no_thread_hist_is_refused_but_no_irq_is_read(tmp_path):
    """The constructed --no-irq fixture is what without_columns makes of the capture."""
    made = tmp_path / "no-irq.txt"
    made.write_text(without_columns("IRQ")((RTLA / "timerlat-hist.txt").read_text()))
    assert read_source("rtla", made).summaries == \
        read_source("rtla", RTLA / "timerlat-hist-no-irq.txt").summaries


@pytest.mark.parametrize("name, probe, tables", [
    ("osnoise-top.txt", "osnoise", []),
    ("osnoise-top-live-2cpus.txt", "osnoise", []),
    ("timerlat-top.txt", "timerlat", []),
    ("timerlat-top-live-2cpus.txt", "timerlat", []),
    ("timerlat-hist.txt", "timerlat", ["timerlat_histogram", "timerlat_irq_histogram"]),
    ("timerlat-hist-no-irq.txt", "timerlat", ["timerlat_histogram"]),
    ("osnoise-hist.txt", "detour", ["osnoise_histogram"]),
])
def test_rtla_bundles_validate_and_load(name, probe, tables, tmp_path):
    written = import_file("rtla", RTLA / name, label="rt", argv=["test"],
                          destination=tmp_path / "b").path
    bundle = noisescope.load(written)
    validate(bundle.manifest)
    assert bundle.manifest["source"]["tool"] == "rtla" and list(bundle.summaries) == [probe]
    assert sorted(bundle.manifest["tables"]) == sorted(tables)
    for table in tables:
        assert bundle.table(table).rows > 0


def test_rtla_osnoise_summaries_are_compared(tmp_path):
    quiet = import_file("rtla", RTLA / "osnoise-top.txt", label="one-cpu", argv=["t"])
    live = import_file("rtla", RTLA / "osnoise-top-live-2cpus.txt", label="two-cpus", argv=["t"])
    result = compare([quiet, live])
    assert [m.name for m in result.metrics()] == ["noise_pct", "max_single_ns", "irq_per_s",
                                                  "thread_per_s"]
    row = result.row("osnoise", "irq_per_s", "two-cpus")
    assert row.stats.mean == pytest.approx(np.mean([s["irq_per_s"] for s in
                                                    live.summaries["osnoise"]]))


def test_rtla_timer_irq_latency_is_shown_beside_the_thread_latency():
    from rich.console import Console

    from noisescope.render.terminal import SUMMARY_TABLES, timer_irq_table

    assert timer_irq_table in SUMMARY_TABLES["timerlat"]
    console = Console(record=True, width=120)
    console.print(timer_irq_table(read_source("rtla", RTLA / "timerlat-top.txt").summaries))
    text = console.export_text()
    assert "Timer IRQ latency" in text and all(v in text for v in ("3,657", "5 us", "76.5 ms"))
    # cyclictest (and noisescope's own timerlat) has no IRQ figures: no such table
    assert timer_irq_table(read_source("cyclictest", CYCLICTEST / "hist.json").summaries) is None


def noisescope_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "noisescope", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_rtla_import_then_show_through_the_cli(tmp_path):
    done = noisescope_cli("import", "rtla", str(RTLA / "osnoise-top.txt"), "-o", "osn",
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = noisescope_cli("show", "osn", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout == done.stdout
    assert "imported: rtla osnoise top from osnoise-top.txt" in shown.stdout
    table = shown.stdout[shown.stdout.index("OS noise"):]
    assert all(value in table for value in ("43.929", "737", "951", "25.4 ms"))
    validate(noisescope.load(tmp_path / "osn").manifest)


def test_rtla_bad_file_through_the_cli_writes_nothing(tmp_path):
    cut_file = tmp_path / "input" / "cut.txt"
    cut_file.parent.mkdir()
    cut_file.write_text(keep(100)((RTLA / "timerlat-hist.txt").read_text()))
    out = tmp_path / "out"
    out.mkdir()
    done = noisescope_cli("import", "rtla", str(cut_file), cwd=out)
    assert_usage_error(done, "cut.txt:100: truncated: the histogram has no 'over:' line", out)
