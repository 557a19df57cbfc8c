"""Peak resident memory of a whole `noisescope scan` on all CPUs.

    python bench/scan_memory.py [--duration 60s] [--probes detour,ftq,fwq] [--no-trace]
                                [--inject 5kHz:2us@cpu0 ...] [--timer-noise 5000]

Runs the real CLI in child processes and reads each child's peak RSS from
wait4(). Detours are stored, iterations are not, and the kernel trace is
never held in memory (its events are decoded batch by batch from the copies
of the buffers), so memory must not grow with the number of loop iterations
or trace events, only with the stored results; the goal is < 100 MB for
--duration 60s. The line says how many detours and trace events there were.
Samples are spooled to files as they are measured, so a longer scan must not
peak higher either (issue 15: memory flat in duration); to see that in
minutes, make many detours: `--inject` (noisescope's own injector, whose
records of what it injected are ground truth kept in memory: 16 B each, at
most 1,000,000 per injection) or `--timer-noise HZ`, cyclictest (rt-tests)
waking at HZ on every CPU at SCHED_FIFO 50 beside the scan: a detour per
wakeup, nothing recorded by noisescope but the detours.
`scan` draws report.html in a separate process once the measurement is over
(matplotlib and the loaded tables never enter the measuring process); the two
are measured separately here: the scan with --no-report, then `noisescope
report` on the bundle it wrote. wait4's peak is the larger of the process's
own and those of the children it waited for: with --no-report the scan
starts none that are larger (at most mount/umount of tracefs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from noisescope.units import parse_duration

GOAL_MIB = 100


def timer_noise(hz: int, seconds: float) -> subprocess.Popen:
    """cyclictest waking every 1/hz s on every CPU (SCHED_FIFO 50) for `seconds`."""
    cpus = os.cpu_count() or 1
    return subprocess.Popen(["cyclictest", "-q", "-t", str(cpus), "-a", f"0-{cpus - 1}",
                             "-p", "50", "-i", str(max(1, round(1e6 / hz))),
                             "-D", f"{int(seconds)}s"], stdout=subprocess.DEVNULL)


def peak_mib(command: list[str]) -> tuple[int, float, float]:
    """(exit status, seconds, peak RSS in MiB) of a child process."""
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    return os.waitstatus_to_exitcode(status), time.monotonic() - started, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="60s")
    parser.add_argument("--probes", default="detour,ftq,fwq")
    parser.add_argument("--no-trace", action="store_true", help="scan without kernel tracing")
    parser.add_argument("--inject", action="append", default=[],
                        help="noise injected by the scan (its --inject), e.g. 5kHz:2us@cpu0")
    parser.add_argument("--timer-noise", type=int, default=0, metavar="HZ",
                        help="cyclictest waking at HZ on every CPU beside the scan")
    args = parser.parse_args()
    noisescope = [sys.executable, "-m", "noisescope"]
    with tempfile.TemporaryDirectory() as workdir:
        bundle = os.path.join(workdir, "bundle")
        command = [*noisescope, "scan", "--duration", args.duration, "--probes", args.probes,
                   "-q", "--no-report", "-o", bundle]
        command += [flag for spec in args.inject for flag in ("--inject", spec)]
        noise = None
        if args.timer_noise:  # until well after the scan's end; stopped below
            noise = timer_noise(args.timer_noise, 10 * parse_duration(args.duration) / 1e9 + 600)
        try:
            status, elapsed, scan_peak = peak_mib(command + (["--no-trace"] if args.no_trace
                                                             else []))
        finally:
            if noise is not None:
                noise.terminate()
                noise.wait()
        contents = _contents(os.path.join(bundle, "manifest.json"))
        report_status, report_s, report_peak = peak_mib(
            [*noisescope, "report", bundle, "-q", "-o", os.path.join(workdir, "report.html")])
    extra = "".join(f" --inject {spec}" for spec in args.inject) + (
        f" beside cyclictest at {args.timer_noise} Hz" if args.timer_noise else "")
    print(f"noisescope scan --duration {args.duration} --probes {args.probes}{extra} (all CPUs): "
          f"exit {status}, {elapsed:.0f} s, peak RSS {scan_peak:.1f} MiB (goal < {GOAL_MIB} MiB), "
          f"{contents}")
    print(f"its report.html, drawn afterwards in its own process: exit {report_status}, "
          f"{report_s:.1f} s, peak RSS {report_peak:.1f} MiB")
    sys.exit(0 if scan_peak < GOAL_MIB and status == 0 and report_status == 0 else 1)


def _contents(manifest_path: str) -> str:
    """How many detours the bundle stores and trace events were recorded."""
    try:
        with open(manifest_path) as manifest:
            data = json.load(manifest)
    except (OSError, ValueError):
        return "no bundle"
    stored = sum(s.get("stored", 0) for s in data["summaries"].get("detour", []))
    seen = sum(s.get("detours", 0) for s in data["summaries"].get("detour", []))
    detours = f"{stored:,} detours" + (f" stored of {seen:,} seen" if seen != stored else "")
    trace = data.get("trace") or {}
    if not trace.get("enabled"):
        return f"{detours}, not traced"
    count = sum(r["events"] + r["sched_switch"] for r in trace.get("recordings", []))
    return f"{detours}, {count:,} trace events"


if __name__ == "__main__":
    main()
