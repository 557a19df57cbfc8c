"""Noise sources (bundle, synthetic spec, netgauge/LogGOPSim trace file), process
counts, and the prediction result as a dict and as a bundle."""

from __future__ import annotations

import numpy as np
import pytest

import noisescope
from noisescope.analysis.predict import (
    Prediction,
    load_noise,
    predict,
    read_trace_file,
    synthetic_trace,
    traces_from_bundle,
    write_trace_file,
)
from noisescope.bundle import Bundle
from noisescope.diagnostics import Code
from noisescope.errors import UsageError
from noisescope.tables import Table
from noisescope.units import format_count, parse_count, parse_count_list

from .test_bundle import minimal_manifest, validate


def scan_bundle(*, overflow=0, run_delay_ns=0, detours=True) -> Bundle:
    # CPU 1 measured in two windows, 1 ms apart: [10, 20) us and [1010, 1030) us.
    windows = Table({"cpu": [1, 1, 1], "probe": np.array(["detour", "detour", "ftq"], dtype=object),
                     "start_ns": [10_000, 1_010_000, 5_000_000],
                     "end_ns": [20_000, 1_030_000, 6_000_000]})
    tables = {"windows": windows}
    if detours:
        tables["detours"] = Table({"cpu": [1, 1, 1, 1], "start_ns": [12_000, 1_015_000, 1_025_000,
                                                                   500_000],
                                   "duration_ns": [1_000, 2_000, 3_000, 9_999]})
    summaries = {"detour": [{"cpu": 1, "overflow": overflow, "run_delay_ns": run_delay_ns}]}
    return Bundle(minimal_manifest(kind="scan", summaries=summaries), tables)


def test_bundle_windows_are_joined_end_to_end():
    [trace] = traces_from_bundle(scan_bundle())
    assert trace.cpu == 1 and trace.kind == "bundle"
    assert trace.span_ns == 30_000  # 10 us + 20 us measured; the gap is left out
    # the detour between the windows (at 500 us) was not measured by a window: dropped
    assert trace.starts_ns.tolist() == [2_000, 15_000, 25_000]
    assert trace.durations_ns.tolist() == [1_000, 2_000, 3_000]
    assert trace.diagnostics == ()


def test_bundle_trace_cut_after_buffer_overflow_and_busy_machine_flagged():
    [trace] = traces_from_bundle(scan_bundle(overflow=5, run_delay_ns=3_000))
    assert trace.span_ns == 28_001  # cut after the last stored detour
    codes = {d.code for d in trace.diagnostics}
    assert codes == {Code.BUFFER_OVERFLOW, Code.MACHINE_BUSY}


def test_bundle_without_detour_data_is_refused():
    with pytest.raises(UsageError, match="has no detour data"):
        traces_from_bundle(scan_bundle(detours=False))


def test_synthetic_spec_sources_and_knees():
    trace = synthetic_trace("1kHz:20us+3Hz:1ms", seed=2)
    # 3 Hz has no whole-ns period: the trace spans 10 periods of the slowest source
    assert trace.span_ns == pytest.approx(10e9 / 3, abs=1)
    per_second = trace.detours / (trace.span_ns / 1e9)
    assert per_second == pytest.approx(1003, rel=1e-3)
    result = predict([trace], [2], 1_000_000, iterations=1, seeds=1)
    knees = {k.length_ns: k.procs for k in result.knees}
    assert knees == {20_000: pytest.approx(1.0), 1_000_000: pytest.approx(1e9 / 3 / 1e6)}


@pytest.mark.parametrize("spec, words", [("1kHz", "cannot read noise"),
                                         ("1kHz:2ms", "whole CPU"),
                                         ("7MHz:10ns", "too many detours")])
def test_bad_synthetic_specs(spec, words):
    with pytest.raises(UsageError, match=words):
        synthetic_trace(spec)


def test_synthetic_trace_spans_at_least_a_second_of_whole_periods():
    trace = synthetic_trace("20kHz:5us")
    assert (trace.span_ns, trace.detours) == (1_000_000_000, 20_000)
    assert np.all(np.diff(trace.starts_ns) == 50_000)
    assert synthetic_trace("4Hz:1ms+5Hz:1ms").span_ns == 10 ** 9  # lcm(250 ms, 200 ms)



def test_trace_file_round_trip(tmp_path):
    trace = synthetic_trace("250Hz:2us+1Hz:200us", seed=3)
    path = write_trace_file(trace, tmp_path / "noise.trace")
    text = path.read_text().splitlines()
    assert text[0].startswith("#") and "\t" in text[-1]
    back = read_trace_file(path)
    assert back.span_ns == trace.span_ns
    np.testing.assert_array_equal(back.starts_ns, trace.starts_ns)
    np.testing.assert_array_equal(back.durations_ns, trace.durations_ns)
    with pytest.raises(UsageError, match="already exists"):
        write_trace_file(trace, path)


def test_trace_file_as_netgauge_writes_it(tmp_path):
    # no span comment: the trace ends with its last detour; floats and spaces are fine
    path = tmp_path / "ng.txt"
    path.write_text("# netgauge noise\n100.4\t20\n\n5000 7.6\n")
    trace = read_trace_file(path)
    assert trace.starts_ns.tolist() == [100, 5000] and trace.durations_ns.tolist() == [20, 8]
    assert trace.span_ns == 5008
    assert load_noise(str(path))[0].name == "ng.txt"


@pytest.mark.parametrize("content, words", [
    ("", "holds no detours"),
    ("# only a comment\n\n", "holds no detours"),
    ("100\t20\n200\n", "line 2: cannot read"),
    ("100\t20\n\nabc\t5\n", "line 3: cannot read"),
    ("100\t-5\n", "line 1: start and duration must be finite and not negative"),
    ("# span_ns=50\n100\t5\n", "ends before the last detour"),
    ("# span_ns=lots\n100\t5\n", "line 1: cannot read the span"),
])
def test_bad_trace_files_name_the_line(tmp_path, content, words):
    path = tmp_path / "bad.trace"
    path.write_text(content)
    with pytest.raises(UsageError, match=words):
        read_trace_file(path)


def test_binary_file_is_not_a_trace(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)))
    with pytest.raises(UsageError, match="not a text noise trace"):
        read_trace_file(path)


def test_unknown_source():
    with pytest.raises(UsageError, match="not a bundle, a trace file or a noise spec"):
        load_noise("/nonexistent/thing")


@pytest.mark.parametrize("text, count", [("1k", 1024), ("16K", 16384), ("1M", 1 << 20),
                                         ("2^20", 1 << 20), ("1000", 1000), (" 3 ", 3)])
def test_process_counts_use_binary_prefixes(text, count):
    assert parse_count(text) == count


@pytest.mark.parametrize("text", ["1.5k", "k", "-4", "1e6", "2^", ""])
def test_bad_process_counts(text):
    with pytest.raises(UsageError):
        parse_count_list(text, what="--procs")


def test_count_lists_and_formatting():
    assert parse_count_list("1M,1k,16k,1k") == (1024, 16384, 1 << 20)
    assert [format_count(n) for n in (2, 1000, 1024, 16384, 1 << 20, 3 << 30)] == \
        ["2", "1000", "1k", "16k", "1M", "3G"]


@pytest.mark.parametrize("kwargs, words", [
    ({"procs": [1]}, "too small"),
    ({"compute_ns": -1}, "negative"),
    ({"collective": "alltoall"}, "unknown collective"),
    ({"message_bytes": 0}, "message size"),
    ({"seeds": 0}, "seeds must be at least 1"),
    ({"compute_ns": 0, "collective": "none"}, "nothing to simulate"),
])
def test_bad_options(kwargs, words):
    arguments = {"procs": [2], "compute_ns": 1000, **kwargs}
    with pytest.raises(UsageError, match=words):
        predict("1kHz:1us", arguments.pop("procs"), **arguments)


def test_result_round_trips_as_dict_and_as_a_valid_bundle(tmp_path):
    result = predict("250Hz:2us+1Hz:200us", [2, 16], 100_000, "barrier", iterations=3, seeds=2)
    assert result.source == "250Hz:2us+1Hz:200us" and result.complete
    assert Prediction.from_dict(result.to_dict()) == result
    path = result.to_bundle(argv=["noisescope", "predict"]).write(tmp_path / "p")
    loaded = noisescope.load(path)
    validate(loaded.manifest)
    assert loaded.kind == "prediction"
    again = Prediction.from_bundle(loaded)
    assert again.points == result.points and again.knees == result.knees
    assert again.options == result.options
    rows = loaded.summaries["prediction"]
    assert [r["procs"] for r in rows] == [2, 16]
    assert all(r["slowdown_min"] <= r["slowdown_mean"] <= r["slowdown_max"] for r in rows)


def test_interrupt_keeps_the_finished_process_counts(monkeypatch):
    calls = []

    def progress(procs, seed, seeds):
        calls.append(procs)
        if procs == 64:
            raise KeyboardInterrupt

    result = predict("1kHz:1us", [2, 16, 64], 10_000, iterations=2, seeds=2, progress=progress)
    assert not result.complete
    assert [p.procs for p in result.points] == [2, 16]
