"""Outputs: checked before any work (a dangling symbolic link, an existing file),
a full disk that keeps the measurement elsewhere and says where, and a report
that never overwrites a file, least of all one inside a bundle."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import noisescope

from ..conftest import FIXTURES, needs_root
from ..unit.test_bundle import validate
from .test_trace import needs_tracefs, our_instances

CLI = [sys.executable, "-m", "noisescope"]
CYCLICTEST = FIXTURES / "imports" / "cyclictest" / "hist.json"


def run(*args, timeout=120, **kwargs):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


def one_line_error(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    assert lines[0].startswith("noisescope: error: ") and "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture
def imported(tmp_path) -> Path:
    """A bundle made without measuring."""
    bundle = tmp_path / "imported"
    assert run("import", "cyclictest", str(CYCLICTEST), "-o", str(bundle)).returncode == 0
    return bundle


@pytest.mark.parametrize("command", [
    ["scan", "--duration", "1s"],
    ["timerlat", "-D", "1s"],
    ["bench", "--runs", "1", "--warmup", "0"],  # the command goes last
    ["predict", "250Hz:2us", "--procs", "2"],
    ["import", "cyclictest", str(CYCLICTEST)],
    ["export-trace", "250Hz:2us"],
    ["report", "BUNDLE"],
    ["run", "EXPERIMENT"],
], ids=lambda c: c[0])
def test_a_dangling_symbolic_link_as_output_is_refused_before_any_work(command, tmp_path,
                                                                        imported):
    work = tmp_path / "work"
    work.mkdir()
    (work / "out").symlink_to(tmp_path / "nowhere")
    experiment = tmp_path / "suite.toml"
    experiment.write_text('[[workload]]\nname = "a"\ncommand = ["true"]\n')
    args = [{"BUNDLE": str(imported), "EXPERIMENT": str(experiment)}.get(a, a) for a in command]
    tail = ["--", "true"] if command[0] == "bench" else []
    done = run(*args, "-o", str(work / "out"), *tail, cwd=work)
    line = one_line_error(done)
    assert str(work / "out") in line
    assert "symbolic link" in line or "already exists" in line
    assert os.listdir(work) == ["out"] and not (tmp_path / "nowhere").exists()


def test_report_refuses_an_existing_output_unless_forced(imported, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("mine")
    line = one_line_error(run("report", str(imported), "-o", str(out)))
    assert line == (f"noisescope: error: cannot write {out}: it already exists; choose another "
                    f"-o, or add --force to replace it")
    assert out.read_text() == "mine"
    done = run("report", str(imported), "-o", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("name, fmt", [("manifest.json", "html"), ("cyclictest.parquet", "html"),
                                       ("new.html", "html"), ("report.md", "md"), ("figs", "png"),
                                       (".", "png")])
def test_report_never_writes_inside_a_bundle_but_its_report_html(imported, name, fmt):
    before = {p.name: p.read_bytes() for p in imported.iterdir() if p.is_file()}
    target = imported / name
    for force in ([], ["--force"]):
        line = one_line_error(run("report", str(imported), "--format", fmt, "-o", str(target),
                                  *force))
        assert f"it is inside the bundle {imported.resolve()}" in line
    assert {p.name: p.read_bytes() for p in imported.iterdir() if p.is_file()} == before


def test_a_bundle_gets_its_own_report_html_once_or_when_forced(imported):
    own = imported / "report.html"
    assert run("report", str(imported), "-o", str(own)).returncode == 0
    first = own.read_bytes()
    assert "it already exists" in one_line_error(run("report", str(imported), "-o", str(own)))
    assert own.read_bytes() == first
    assert run("report", str(imported), "-o", str(own), "--force").returncode == 0
    assert noisescope.load(imported).complete  # the bundle itself untouched


@pytest.fixture
def small_disk(tmp_path):
    """A file system of 192 KiB: room for a directory, not for a scan."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    yield where
    subprocess.run(["umount", str(where)], check=True)


@needs_root
@needs_tracefs
def test_a_full_disk_keeps_the_measurement_elsewhere_and_says_where(small_disk, tmp_path,
                                                                   measured_cpu):
    spare = tmp_path / "spare"
    spare.mkdir()
    out = small_disk / "b"
    done = subprocess.Popen([*CLI, "scan", "--cpus", str(measured_cpu), "--duration", "1s",
                             "--probes", "detour,ftq", "--trace-cost", "0", "-q", "-o", str(out)],
                            env={**os.environ, "TMPDIR": str(spare)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    done.stdout, done.stderr = done.communicate(timeout=120)
    assert f"noisescope-{done.pid}" not in our_instances()
    [kept] = spare.iterdir()
    line = one_line_error(done)
    # the reason is the writer's: ENOSPC, or Arrow's words for the short write it got
    reason = r"(No space left on device|\d+ requested and \d+ written)"
    # the trace's events are spooled while first decoded: kept with the rest, unless
    # the disk had no room for them either (then the bundle spools them, and fails)
    without = re.escape(" (without the tables events, sched_switch)")
    written = re.fullmatch(re.escape(f"noisescope: error: cannot write the bundle {out}: ") + reason
                           + re.escape(f"; the measurement is kept at {kept}") + f"(?P<left>{without})?"
                           + re.escape("; move it where it belongs"), line)
    assert written, line
    assert os.listdir(small_disk) == []  # no partial bundle, no trace copies
    bundle = noisescope.load(kept)
    validate(bundle.manifest)
    assert list(bundle.summaries)[:2] == ["detour", "ftq"]
    assert bundle.detours.rows > 0 and bundle.ftq.rows > 500
    assert bundle.complete == (not written["left"])  # complete unless a table was left out
    failed = [w.message for w in bundle.warnings if w.code.value == "write_failed"]
    left_out = "the tables events, sched_switch left out: the first write failed before they " \
               "were made"
    if written["left"]:
        assert left_out in failed and not bundle.has_table("events")
    else:
        assert left_out not in failed
        recorded = bundle.manifest["trace"]["recordings"]
        assert bundle.table("events").rows == sum(r["events"] for r in recorded) > 0
    shutil.rmtree(kept)
