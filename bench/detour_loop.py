"""Cost per iteration of noisescope's detour loop against a plain C rdtsc loop.

    python bench/detour_loop.py [--cpu N] [--rounds 10] [--seconds 1]

Both loops run on the same CPU, alternating, for the same time. Each one's
cost per iteration excludes the time lost in detours (gaps >= 1 us), so that
noise hitting one round and not the other does not count as loop cost. The
goal is a ratio (ours / plain) <= 1.10 on the median.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from noisescope import _native
from noisescope.clock import measurement_clock
from noisescope.host import read_host_facts
from noisescope.probes.detour import DETOUR, DetourSettings
from noisescope.probes.native import Ring, run_native, window_buffers
from noisescope.probes.schedule import plan_windows

HERE = Path(__file__).parent


def build_plain(workdir: Path) -> ctypes.CDLL:
    library = workdir / "plain_loop.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(library),
                    str(HERE / "plain_loop.c")], check=True)
    lib = ctypes.CDLL(str(library))
    lib.plain_loop.restype = ctypes.c_uint64
    lib.plain_loop.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]
    return lib


def plain_round(lib, cpu: int, ticks: int, threshold: int) -> float:
    os.sched_setaffinity(0, {cpu})
    lost = ctypes.c_uint64()
    iterations = lib.plain_loop(ticks, threshold, ctypes.byref(lost))
    return (ticks - lost.value) / iterations


def noisescope_round(cpu: int, seconds: float, threshold: int, ticks_per_ns: float) -> float:
    """The loop as a scan runs it: its detours drained from the ring while it runs."""
    schedule, _ = plan_windows(int(seconds * 1e9), rt=False, runtime_ns=int(seconds * 1e9))
    slots = DETOUR.ring_size(DetourSettings(threshold_ns=1000), schedule, 1)
    spec = {"cpu": cpu, "priority": 0, "threshold_ticks": threshold, "hourglass_ticks": 1000,
            "start": np.empty(slots, np.uint64), "length": np.empty(slots, np.uint64),
            "histogram": np.empty(_native.HISTOGRAM_BINS, np.uint64),
            **window_buffers(schedule)}
    run = run_native("detour", [spec], [], schedule, ticks_per_ns, ring=Ring("start", "length"))
    result = run.samplers[0]
    measured = int(spec["window_end"][0]) - int(spec["window_start"][0])
    return (measured - result["lost_ticks"]) / int(spec["histogram"].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    clock = measurement_clock(read_host_facts().tsc_flags)
    threshold = clock.ticks(1000)
    ticks = clock.ticks(args.seconds * 1e9)
    ours, plain = [], []
    with tempfile.TemporaryDirectory() as workdir:
        lib = build_plain(Path(workdir))
        for _ in range(args.rounds):
            ours.append(noisescope_round(args.cpu, args.seconds, threshold, clock.ticks_per_ns))
            plain.append(plain_round(lib, args.cpu, ticks, threshold))
    ratio = statistics.median(ours) / statistics.median(plain)
    print(f"CPU {args.cpu}, {args.rounds} rounds of {args.seconds} s each, alternating")
    print(f"plain C rdtsc loop (-O2): median {statistics.median(plain):.2f} cycles/iteration "
          f"(min {min(plain):.2f}, max {max(plain):.2f})")
    print(f"noisescope detour loop:   median {statistics.median(ours):.2f} cycles/iteration "
          f"(min {min(ours):.2f}, max {max(ours):.2f})")
    print(f"ratio noisescope/plain: {ratio:.3f} (goal <= 1.10)")
    sys.exit(0 if ratio <= 1.10 else 1)


if __name__ == "__main__":
    main()
