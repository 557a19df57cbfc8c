"""What a run killed with SIGKILL leaves, and `noisescope cleanup` (or the next
run) afterwards: the bundle it was writing salvaged, its work directories and
tracefs instance removed, a tracefs mount it made unmounted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import noisescope
from noisescope.trace import tracefs
from noisescope.trace.tracefs import cleanup, tracefs_mounts

from ..helpers import dead_pid
from ..unit.test_bundle import validate
from .test_trace import needs_tracefs, our_instances

CLI = [sys.executable, "-m", "noisescope"]


def mounts() -> list[Path]:
    return tracefs_mounts(Path("/proc/self/mounts").read_text())


@needs_tracefs
def test_a_scan_killed_while_writing_is_salvaged_and_its_leftovers_go(tmp_path, measured_cpu):
    out = tmp_path / "b"
    proc = subprocess.Popen([*CLI, "scan", "--cpus", str(measured_cpu), "--duration", "1s",
                             "--probes", "detour,ftq", "--trace-cost", "0", "-q", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = tmp_path / f".b.partial-{proc.pid}"
    deadline = time.monotonic() + 120
    while not any(partial.glob("*.parquet")):  # the tables are parked: Parquet files begin
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    assert partial.is_dir() and (tmp_path / f".b.trace-{proc.pid}").is_dir()
    done = subprocess.run([*CLI, "cleanup", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"salvaged {partial} (a bundle killed run {proc.pid} was "
                               f"writing) as {out}, marked incomplete")
    assert lines[1] == (f"removed {tmp_path}/.b.samples-{proc.pid}: samples spooled by the run "
                        f"(what a salvaged bundle needs of them it has taken), left by killed run "
                        f"{proc.pid}")
    assert lines[2] == (f"removed {tmp_path}/.b.trace-{proc.pid}: copies of trace buffers, which "
                        f"nothing reads without the run, left by killed run {proc.pid}")
    assert sorted(os.listdir(tmp_path)) == ["b"]
    assert f"noisescope-{proc.pid}" not in our_instances()
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert not bundle.complete and "was killed while it wrote this bundle" in \
        bundle.warnings[-1].message
    # every table in memory had been parked: all of them are there
    assert bundle.detours.rows > 0 and bundle.ftq.rows > 500 and bundle.windows.rows > 0
    assert list(bundle.summaries)[:2] == ["detour", "ftq"]


@needs_tracefs
def test_a_tracefs_mount_of_a_killed_run_is_unmounted_later(tmp_path, live_facts, monkeypatch):
    where = tmp_path / "tracing"
    where.mkdir()
    records = tmp_path / "records"
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from noisescope.clock import measurement_clock
        from noisescope.host import read_host_facts
        from noisescope.trace import tracefs
        from noisescope.trace.session import TraceSession
        tracefs.MOUNT_RECORDS = Path({str(records)!r})
        clock = measurement_clock(read_host_facts().tsc_flags)
        TraceSession((0,), clock, mountpoint=Path({str(where)!r})).open()
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    _, err = child.communicate(timeout=60)
    try:
        assert child.returncode == -signal.SIGKILL, err
        assert where in mounts() and f"noisescope-{child.pid}" in our_instances()
        noted = json.loads((records / f"tracefs-{child.pid}.json").read_text())
        assert noted["mountpoint"] == str(where) and noted["pid"] == child.pid
        monkeypatch.setattr(tracefs, "MOUNT_RECORDS", records)
        stale = records / f"tracefs-{dead_pid()}.json"  # its mount was undone by hand
        stale.write_text(json.dumps({**noted, "pid": int(stale.stem.split("-")[1]),
                                     "mountpoint": str(tmp_path / "unmounted")}))
        done, failed = cleanup(where)
        assert not stale.exists()
        assert f"removed tracefs instance noisescope-{child.pid} (its process is gone)" in done
        in_use = os.listdir(where / "instances") if where in mounts() else []
        if not in_use:  # nobody else's instance keeps it mounted
            assert done[-1] == (f"unmounted tracefs at {where} (mounted by noisescope process "
                                f"{child.pid}, which is gone)") and not failed
            assert where not in mounts() and list(records.iterdir()) == []
        else:  # another run's instance: it stays, and says so
            assert "left mounted: instances" in failed[-1] and failed[-1].endswith("are in use")
    finally:
        if where in mounts():
            subprocess.run(["umount", str(where)], check=False)
