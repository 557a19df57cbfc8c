"""Peak resident memory of a whole `noisescope scan` on all CPUs.

    python bench/scan_memory.py [--duration 60s] [--probes detour,ftq,fwq] [--no-trace]

Runs the real CLI in a child process and reads the child's peak RSS from
wait4(). Detours are stored, iterations are not, so memory must not grow
with the number of loop iterations; the goal is < 100 MB for --duration 60s.
Kernel trace events are kept (about 100 bytes each while the scan runs), so
the line also says how many were recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

GOAL_MIB = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="60s")
    parser.add_argument("--probes", default="detour,ftq,fwq")
    parser.add_argument("--no-trace", action="store_true", help="scan without kernel tracing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        command = [sys.executable, "-m", "noisescope", "scan", "--duration", args.duration,
                   "--probes", args.probes, "-q", "-o", os.path.join(workdir, "bundle")]
        command += ["--no-trace"] if args.no_trace else []
        started = time.monotonic()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.monotonic() - started
        events = _trace_events(os.path.join(workdir, "bundle", "manifest.json"))
    peak_mib = usage.ru_maxrss / 1024
    print(f"noisescope scan --duration {args.duration} --probes {args.probes} (all CPUs): "
          f"exit {os.waitstatus_to_exitcode(status)}, {elapsed:.0f} s, peak RSS "
          f"{peak_mib:.1f} MiB (goal < {GOAL_MIB} MiB), {events}")
    sys.exit(0 if peak_mib < GOAL_MIB and status == 0 else 1)


def _trace_events(manifest_path: str) -> str:
    try:
        with open(manifest_path) as manifest:
            trace = json.load(manifest).get("trace") or {}
    except (OSError, ValueError):
        return "no bundle"
    if not trace.get("enabled"):
        return "not traced"
    count = sum(r["events"] + r["sched_switch"] for r in trace.get("recordings", []))
    return f"{count:,} trace events"


if __name__ == "__main__":
    main()
