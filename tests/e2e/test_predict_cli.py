"""`noisescope predict` and `export-trace` end to end, through the installed package."""

from __future__ import annotations

import json

import pytest

import noisescope
from noisescope.bundle import Bundle

from ..helpers import assert_usage_error, interrupted_run
from ..unit.test_bundle import minimal_manifest, validate
from .test_scan_cli import CLI, run


def test_predict_prints_slowdown_per_scale_and_the_knees():
    done = run("predict", "250Hz:2us+1Hz:200us", "--procs", "2,1k", "--iterations", "5",
               "--seeds", "2")
    assert done.returncode == 0, done.stderr
    assert "Predicted run time" in done.stdout and "Knee P*" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("│")]
    assert rows[0].split("│")[1].strip() == "2" and rows[1].split("│")[1].strip() == "1k"
    assert "periodic, 200 us" in done.stdout


def test_json_output_and_bundle_output_agree(tmp_path):
    out = tmp_path / "prediction"
    done = run("predict", "1kHz:20us", "--procs", "16", "--compute", "200us", "--collective",
               "barrier", "--iterations", "3", "--seeds", "2", "--json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    [point] = result["points"]
    assert point["procs"] == 16 and len(point["runtimes_ns"]) == 2
    assert result["options"]["collective"] == "barrier" and result["source"] == "1kHz:20us"
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert bundle.summaries["prediction"] == result["points"]
    shown = run("show", str(out))
    assert shown.returncode == 0 and "Predicted run time" in shown.stdout


def test_export_trace_then_predict_from_it(tmp_path):
    trace = tmp_path / "cpu.trace"
    done = run("export-trace", "100Hz:50us", "-o", str(trace))
    assert done.returncode == 0, done.stderr
    assert trace.read_text().count("\n") == 3 + 100  # header, then 1 s of detours, one per line
    done = run("predict", str(trace), "--procs", "4", "--iterations", "2", "--seeds", "1")
    assert done.returncode == 0, done.stderr
    assert "cpu.trace: 100 detours in 1 s" in done.stdout


def write_bundle_without_detours(path):
    Bundle(minimal_manifest()).write(path)  # an import: a valid bundle without detours
    return path


@pytest.mark.parametrize("args, words", [
    (["predict", "1kHz:1us", "--procs", "1"], "process count 1 is too small"),
    (["predict", "1kHz:1us", "--procs", "1.5k"], "cannot read --procs"),
    (["predict", "1kHz:1us", "--compute", "-1ms"], "--compute '-1ms' is negative"),
    (["predict", "1kHz:1us", "--latency", "-2us"], "--latency '-2us' is negative"),
    (["predict", "1kHz:1us", "--seeds", "0"], "seeds must be at least 1"),
    (["predict", "1kHz:1us", "--collective", "alltoall"], "Invalid value for '--collective'"),
    (["predict", "nothing-here"], "not a bundle, a trace file or a noise spec"),
    (["predict", "1kHz:2ms"], "would take the whole CPU"),
    (["predict", "EMPTY"], "holds no detours"),
    (["predict", "MALFORMED"], "line 3: cannot read"),
    (["predict", "NODETOURS"], "has no detour data"),
    (["predict", "1kHz:1us", "-o", "/proc/nope/out"], "cannot write"),
    (["export-trace", "1kHz:1us"], "Missing option '-o'"),
    (["export-trace", "1kHz:1us", "--cpu", "3", "-o", "x"], "has no trace of CPU 3"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    inputs, work = tmp_path / "inputs", tmp_path / "work"
    inputs.mkdir()
    work.mkdir()
    files = {"EMPTY": inputs / "empty.trace", "MALFORMED": inputs / "bad.trace",
             "NODETOURS": inputs / "ftq-only"}
    files["EMPTY"].write_text("# nothing\n")
    files["MALFORMED"].write_text("100\t5\n200\t5\n300 five\n")
    write_bundle_without_detours(files["NODETOURS"])
    args = [str(files.get(a, a)) for a in args]
    assert_usage_error(run(*args, cwd=work), words, work)


def test_interrupt_keeps_the_finished_process_counts(tmp_path):
    out = tmp_path / "prediction"
    proc = interrupted_run([*CLI, "predict", "250Hz:2us", "--procs", "2,1M", "--seeds", "50",
                            "-q", "-o", str(out)], after_s=5)
    assert proc.returncode == 130, proc.stderr
    bundle = noisescope.load(out)
    assert not bundle.complete
    assert [row["procs"] for row in bundle.summaries["prediction"]] == [2]


def test_help_ends_with_examples():
    for command in ("predict", "export-trace"):
        done = run(command, "--help")
        assert done.returncode == 0
        assert "EXAMPLES" in done.stdout.split("Options:")[-1]
    assert "1M = 1048576" in run("predict", "--help").stdout
