"""What runs killed with SIGKILL leave beside their output, and what becomes of
it: salvaged when it holds a measurement, removed when it does not, never
touched when it is not provably a gone process's."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import noisescope
from noisescope.bundle import check_destination
from noisescope.cli.main import main
from noisescope.leftovers import MARKER, identity, make_workdir, samples_workdir, sweep

from ..helpers import dead_pid
from .test_bundle import results_of_a_scan, validate

ROOT = Path(__file__).parents[2]


def killed_while_writing(directory: Path, table_number: int) -> int:
    """Run a bundle write (tables released to numpy files first, as a scan does)
    in a child that SIGKILLs itself as it starts the Parquet file of table
    number `table_number`; returns its PID."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        import noisescope.bundle as bundle_module
        from tests.unit.test_bundle import results_of_a_scan
        from tests.unit.test_leftovers import scan_manifest
        written = []
        real = bundle_module._write_table
        def write_table(table, path):
            written.append(path)
            if len(written) == {table_number}:
                os.kill(os.getpid(), signal.SIGKILL)
            real(table, path)
        bundle_module._write_table = write_table
        bundle_module.Bundle(scan_manifest(), results_of_a_scan()).write(
            {str(directory / "b")!r}, release_tables=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    _, err = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, err
    return child.pid


def scan_manifest() -> dict:
    from .test_bundle import minimal_manifest

    return minimal_manifest()


def foreign_workdir(path: Path, **marker) -> Path:
    path.mkdir()
    (path / MARKER).write_text(json.dumps({**identity(), **marker}))
    return path


def test_a_bundle_killed_while_written_is_salvaged_with_every_table_it_holds(tmp_path):
    pid = killed_while_writing(tmp_path, table_number=2)
    partial = tmp_path / f".b.partial-{pid}"
    assert (partial / "manifest.json").is_file()  # the manifest comes first
    said = []
    assert sweep(tmp_path, salvage=True, say=said.append)
    assert said == [f"salvaged {partial} (a bundle killed run {pid} was writing) as "
                    f"{tmp_path / 'b'}, marked incomplete"]
    assert sorted(os.listdir(tmp_path)) == ["b"]
    bundle = noisescope.load(tmp_path / "b")
    validate(bundle.manifest)
    assert not bundle.complete
    assert [w.message for w in bundle.warnings] == [
        f"the run (process {pid}) was killed while it wrote this bundle; salvaged by noisescope "
        f"cleanup"]
    for name, table in results_of_a_scan().items():  # one was Parquet, the others still parked
        assert bundle.table(name).columns == table.columns
        for column in table.columns:
            assert bundle.table(name)[column].tolist() == table[column].tolist()
    assert sorted(os.listdir(tmp_path / "b")) == sorted(
        ["manifest.json", *(f"{n}.parquet" for n in results_of_a_scan())])


def test_a_table_cut_short_is_left_out_and_named(tmp_path):
    pid = killed_while_writing(tmp_path, table_number=1)
    partial = tmp_path / f".b.partial-{pid}"
    parked = partial / ".parked" / "spectrum"
    parked.write_bytes(parked.read_bytes()[:parked.stat().st_size // 2])  # cut short
    said = []
    sweep(tmp_path, salvage=True, say=said.append)
    assert said[0].endswith("marked incomplete; tables it had not written: spectrum")
    bundle = noisescope.load(tmp_path / "b")
    assert "spectrum" not in bundle.table_names and bundle.detours.rows == 3
    assert "tables it had not written: spectrum" in bundle.warnings[0].message


def test_the_next_run_reports_a_measurement_and_removes_what_holds_none(tmp_path, capfd,
                                                                       monkeypatch):
    pid = killed_while_writing(tmp_path, table_number=2)
    trace = foreign_workdir(tmp_path / f".b.trace-{pid}", pid=pid)
    check_destination(tmp_path / "next")
    err = capfd.readouterr().err.splitlines()
    partial = tmp_path / f".b.partial-{pid}"
    assert err == [f"noisescope: {partial} holds the measurement of killed run {pid}: "
                   f"'noisescope cleanup {tmp_path}' makes it a bundle",
                   f"noisescope: removed {trace}: copies of trace buffers, which nothing reads "
                   f"without the run, left by killed run {pid}"]
    assert sorted(os.listdir(tmp_path)) == [partial.name]
    # and `noisescope cleanup DIR` makes it a bundle (tracefs is another test's)
    from noisescope.cli import cleanup as command

    monkeypatch.setattr(command, "cleanup", lambda: ([], []))
    assert main(["cleanup", str(tmp_path)]) == 0
    assert capfd.readouterr().out.startswith(f"salvaged {partial}")
    assert (tmp_path / "b" / "manifest.json").is_file()


def test_a_salvaged_bundle_does_not_take_a_name_in_use(tmp_path):
    pid = killed_while_writing(tmp_path, table_number=2)
    (tmp_path / "b").mkdir()
    said = []
    sweep(tmp_path, salvage=True, say=said.append)
    assert (tmp_path / f"b-salvaged-{pid}" / "manifest.json").is_file()
    assert os.listdir(tmp_path / "b") == []


def test_only_provable_leftovers_of_gone_processes_are_touched(tmp_path):
    dead = dead_pid()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        gone = foreign_workdir(tmp_path / f".x.trace-{dead}", pid=dead)
        running = foreign_workdir(tmp_path / f".y.trace-{alive.pid}", pid=alive.pid,
                                  start=int(Path(f"/proc/{alive.pid}/stat").read_text()
                                            .rsplit(")", 1)[1].split()[19]))
        reused = foreign_workdir(tmp_path / f".z.trace-{alive.pid}", pid=alive.pid, start=1)
        mine = make_workdir(tmp_path / f".w.partial-{os.getpid()}")
        elsewhere = foreign_workdir(tmp_path / f".v.trace-{dead}", pid=dead, boot_id="other",
                                    host="another-node")
        container = foreign_workdir(tmp_path / f".r.trace-{dead}", pid=dead,
                                    pid_namespace="pid:[1]")
        rebooted = foreign_workdir(tmp_path / f".u.trace-{dead}", pid=dead, boot_id="earlier",
                                   host=socket.gethostname())
        unmarked = tmp_path / f".t.trace-{dead}"
        unmarked.mkdir()
        wrong_pid = foreign_workdir(tmp_path / f".s.trace-{dead}", pid=dead + 1)
        other_name = foreign_workdir(tmp_path / f"results-{dead}", pid=dead)
        said = []
        assert sweep(tmp_path, salvage=True, say=said.append)
        removed = {p for p in (gone, reused, rebooted) if not p.exists()}
        assert removed == {gone, reused, rebooted}  # a PID taken by another process is gone too
        for kept in (running, mine, elsewhere, container, unmarked, wrong_pid, other_name):
            assert kept.exists()
        assert said[:2] == [f"left {container}: its process ({dead} on {socket.gethostname()}) "
                            f"cannot be checked from here (another machine or container)",
                            f"left {elsewhere}: its process ({dead} on another-node) cannot be "
                            f"checked from here (another machine or container)"]
        assert len(said) == 5
    finally:
        alive.kill()
        alive.wait()


@pytest.mark.parametrize("make", ["dangling", "to a directory"])
def test_an_output_that_is_a_symbolic_link_is_refused_before_measuring(tmp_path, make):
    from noisescope.errors import UsageError

    target = tmp_path / "elsewhere"
    if make == "to a directory":
        target.mkdir()
    (tmp_path / "b").symlink_to(target)
    with pytest.raises(UsageError, match=("dangling " if make == "dangling" else "") +
                       f"symbolic link \\(to {target}\\)"):
        check_destination(tmp_path / "b")


def test_a_salvaged_bundle_takes_its_samples_from_the_spool_the_run_made_them_in(tmp_path):
    """A scan's detours are not parked but made into Parquet in its samples
    directory: the bundle killed before taking them finds them whole there."""
    import pyarrow.parquet as pq

    pid = killed_while_writing(tmp_path, table_number=1)
    partial = tmp_path / f".b.partial-{pid}"
    detours = results_of_a_scan()["detours"]
    (partial / ".parked" / "detours").unlink()  # a spooled table is never parked
    samples = foreign_workdir(samples_workdir(tmp_path / "b", pid), pid=pid)
    (samples / "detour-1" / "samples").mkdir(parents=True)
    pq.write_table(detours.to_arrow(), samples / "detour-1" / "samples" / "detours.parquet")
    said = []
    assert sweep(tmp_path, salvage=True, say=said.append)
    assert said[0].endswith("marked incomplete")  # no table left out
    assert sorted(os.listdir(tmp_path)) == ["b"]  # the samples directory went afterwards
    salvaged = noisescope.load(tmp_path / "b").detours
    for column in detours.columns:
        assert salvaged[column].tolist() == detours[column].tolist()


def test_a_killed_write_salvages_tables_in_parts_whole_and_remakes_broken_ones(tmp_path):
    """A table's file may be a directory of Parquet parts: a whole one (its
    parts hold the manifest's rows) stays as it is; one with a part cut short
    is removed and made again from the parked table."""
    import pyarrow.parquet as pq

    pid = killed_while_writing(tmp_path, table_number=2)
    partial = tmp_path / f".b.partial-{pid}"
    written = next(p for p in sorted(partial.glob("*.parquet")) if p.is_file())
    whole = pq.read_table(written)
    written.unlink()
    written.mkdir()  # the same rows in two parts
    pq.write_table(whole.slice(0, 1), written / "000000-0000.parquet")
    pq.write_table(whole.slice(1), written / "000001-0000.parquet")
    parked = sorted(p.name for p in (partial / ".parked").iterdir())
    broken = partial / f"{next(n for n in parked if n != written.stem)}.parquet"
    broken.mkdir()
    (broken / "000000-0000.parquet").write_bytes(b"PAR1 cut short")
    assert sweep(tmp_path, salvage=True, say=lambda line: None)
    bundle = noisescope.load(tmp_path / "b")
    assert (tmp_path / "b" / written.name).is_dir() and (tmp_path / "b" / broken.name).is_file()
    for name, table in results_of_a_scan().items():
        for column in table.columns:
            assert bundle.table(name)[column].tolist() == table[column].tolist()
