"""A scan survives every stopping signal at every phase: measuring, reading and
explaining the trace, writing the bundle. Each run is signalled when it
reaches the phase, seen from its own output or from the files it makes (no
sleeping and hoping): what was measured is in a loadable bundle that says
what is missing, tracefs is as it was, and nothing is left behind.

The thirteen scans run three at a time (module fixture); each case asserts on
its own. A scan whose reader left the pipe (`| head`) measures on, too."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import noisescope

from ..unit.test_bundle import validate
from .test_trace import global_settings, needs_tracefs, our_instances

CLI = [sys.executable, "-m", "noisescope"]
PROBES = ("detour", "ftq")
PHASES = ("measuring", "analysing", "writing")
CASES = [(phase, sig, 1) for phase in PHASES for sig in ("SIGINT", "SIGTERM", "SIGHUP")] + \
        [("measuring", "SIGQUIT", 1)] + [(phase, "SIGINT", 2) for phase in PHASES]
TIMEOUT_S = 120


@dataclass
class Outcome:
    directory: Path
    returncode: int
    stderr: list[str]
    pid: int


def _reached(phase: str, out: Path, pid: int, lines: list[str], cpu: int) -> bool:
    """Whether the scan writing `out` is in `phase`, from its stderr and its files."""
    if phase == "measuring":  # the detour sampler has measured a while (it spins for 2 s)
        return _cpu_time_s(pid, "ns-detour/") >= 0.3
    if phase == "analysing":  # the last probe's trace is being copied: the analysis is next
        return (out.parent / f".{out.name}.trace-{pid}" / f"1-ftq.cpu{cpu}.raw").exists()
    return (out.parent / f".{out.name}.partial-{pid}" / "manifest.json").exists()


def _cpu_time_s(pid: int, prefix: str) -> float:
    """CPU time of the process's threads whose names start with `prefix`."""
    ticks = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if name.startswith(prefix):
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _signalled_scan(directory: Path, cpu: int, phase: str, sig: str, times: int) -> Outcome:
    out = directory / "b"
    proc = subprocess.Popen([*CLI, "scan", "--cpus", str(cpu), "--duration", "2s", "--probes",
                             ",".join(PROBES), "--trace-cost", "0", "--no-report", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    arrived: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            arrived.put(line)
        arrived.put(None)  # the end
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not _reached(phase, out, proc.pid, lines, cpu):
        assert proc.poll() is None and time.monotonic() < deadline, (phase, lines)
        time.sleep(0.005)
    for _ in range(times):
        announced = len([line for line in lines if "interrupt" in line])
        proc.send_signal(getattr(signal, sig))
        # the next one only once this one was taken (two pending signals would merge)
        while len([line for line in lines if "interrupt" in line]) == announced:
            if arrived.get(timeout=TIMEOUT_S) is None:
                break
    proc.wait(timeout=TIMEOUT_S)
    reader.join(timeout=TIMEOUT_S)
    return Outcome(directory, proc.returncode, lines, proc.pid)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, measured_cpu):
    before = global_settings()
    directories = {case: tmp_path_factory.mktemp("signalled") for case in CASES}
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {case: pool.submit(_signalled_scan, directories[case], measured_cpu, *case)
                   for case in CASES}
        for future in futures.values():
            future.exception()  # each case raises its own failure, if any
    assert global_settings() == before  # tracefs as it was
    return futures


@needs_tracefs
@pytest.mark.parametrize("phase, sig, times", CASES, ids=[f"{p}-{s}x{t}" for p, s, t in CASES])
def test_the_measurement_survives(outcomes, phase, sig, times):
    outcome = outcomes[(phase, sig, times)].result()
    err = outcome.stderr
    assert outcome.returncode == 130, err
    assert not any("Traceback" in line for line in err), err
    bundle = noisescope.load(outcome.directory / "b")
    validate(bundle.manifest)
    assert f"noisescope-{outcome.pid}" not in our_instances()
    assert sorted(p.name for p in outcome.directory.iterdir()) == ["b"]  # no work directory left
    interrupted = [w.message for w in bundle.warnings if w.code.value == "interrupted"]
    announced = [line for line in err if "interrupt" in line and line.startswith("noisescope: ")]
    assert announced[0].startswith(f"noisescope: interrupted ({sig}): ")
    assert len(announced) == times + 1  # each signal, and the end
    assert announced[-1] == "noisescope: interrupted; kept what was measured"

    measured = [k for k in bundle.summaries if k in PROBES]
    if phase == "measuring":  # the detour probe stops early; ftq never runs
        assert measured == ["detour"] and not bundle.complete
        assert "interrupted during detour; probes not run: ftq" in interrupted
        assert 0 < bundle.summaries["detour"][0]["measured_ns"] < 2e9
    else:  # every probe measured in full
        assert measured == list(PROBES)
        assert all(s["measured_ns"] >= 1.5e9 for p in PROBES for s in bundle.summaries[p])
    assert bundle.detours.rows > 0 and bundle.windows.rows > 0
    if phase != "measuring":
        assert bundle.ftq.rows > 1000

    analysis_cut = [m for m in interrupted if m.endswith("the rest of the analysis was left out")]
    if phase == "analysing" or (phase == "measuring" and times == 2):
        # the signal that came after the probes ends the analysis (the second one
        # says so); what it had not done is missing, and the bundle says so
        assert len(analysis_cut) == 1 and not bundle.complete
        assert "attribution" not in bundle.summaries and "detour_causes" not in bundle.table_names
        if times == 2:
            assert announced[1].startswith("noisescope: second interrupt (SIGINT): leaving out "
                                           "the rest of the analysis and of the trace; the "
                                           "measurement is kept at ")
    else:
        assert not analysis_cut
        assert "attribution" in bundle.summaries and bundle.detour_causes.rows > 0

    stopped = {"measuring": "stopping the probes", "analysing": "ending the analysis",
               "writing": "saving the measurement first; it will be"}[phase]
    assert f"({sig}): {stopped}" in announced[0]
    if phase == "writing":
        left_out = [m for m in interrupted if m.startswith("the tables events, sched_switch left "
                                                           "out")]
        gave_up = times == 2 and announced[1].startswith(
            "noisescope: second interrupt (SIGINT): leaving out the tables events, sched_switch")
        # what the second signal announced is what the bundle lacks, and no more
        assert bool(left_out) == gave_up
        assert ("events" in bundle.table_names) == (not gave_up)
        assert bundle.complete == (not gave_up)  # the measurement itself was whole
    elif phase == "measuring" and times == 1:
        assert bundle.events.rows > 0  # the trace of what was measured is kept and explained


def test_a_reader_gone_from_the_pipe_does_not_end_the_scan(tmp_path, measured_cpu):
    """`noisescope scan 2>&1 | head -1`: the progress lines after the first go
    nowhere (SIGPIPE is ignored, the write fails); the scan measures on and
    writes its bundle."""
    read, write = os.pipe()
    proc = subprocess.Popen([*CLI, "scan", "--cpus", str(measured_cpu), "--duration", "1s",
                             "--probes", ",".join(PROBES), "--trace-cost", "0", "--no-report",
                             "-o", str(tmp_path / "b")], stdout=write, stderr=write)
    os.close(write)
    with os.fdopen(read, "rb") as reader:
        assert reader.readline().startswith(b"detour: measuring")
    proc.wait(timeout=TIMEOUT_S)
    bundle = noisescope.load(tmp_path / "b")
    assert bundle.complete and [k for k in bundle.summaries if k in PROBES] == list(PROBES)
    assert bundle.ftq.rows > 500
