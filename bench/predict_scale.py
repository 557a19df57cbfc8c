"""Speed and memory of the prediction engine at scale, beside the analytic estimate.

Goals: 1,048,576 processes x 20 iterations of compute + allreduce with a measured
noise trace in <= 10 s on a 2-core machine, peak RSS <= 4 GB; 16,777,216 processes
(--procs 16M) in <= 30 s and <= 8 GB.

Without --source it first measures a trace on this machine (a 10 s detour scan,
in a child process, so the scan's memory is not counted). As root it samples one
CPU at SCHED_FIFO (--rt), so that other users' processes on a shared machine do
not count as the machine's noise.

    python bench/predict_scale.py
    python bench/predict_scale.py --source noisescope-myhost-20261130T063836Z
    python bench/predict_scale.py --source 250Hz:2us+1Hz:200us --procs 1M
    python bench/predict_scale.py --source 250Hz:2us+1Hz:200us --procs 16M
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from noisescope.analysis.predict import load_noise
from noisescope.analysis.predict.model import PredictOptions, analytic_runtime, delay_samples, simulate
from noisescope.units import format_count, format_duration, parse_count

# (largest process count, seconds, MiB): the goals of the issues that set them
GOALS = ((1 << 20, 10.0, 4096), (1 << 24, 30.0, 8192))


def measured_trace(directory: Path) -> str:
    out = directory / "scan"
    command = [sys.executable, "-m", "noisescope", "scan", "--probes", "detour",
               "--duration", "10s", "-q", "-o", str(out)]
    if os.geteuid() == 0:
        command += ["--rt", "--cpus", str(max(os.sched_getaffinity(0)))]
    print("measuring a noise trace:", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return str(out)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="bundle, trace file or spec (default: measure now)")
    parser.add_argument("--procs", default="1M")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--compute", type=int, default=1_000_000, help="ns")
    parser.add_argument("--collective", default="allreduce")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    procs = parse_count(args.procs)
    time_goal_s, memory_goal_mib = next(((s, m) for most, s, m in GOALS if procs <= most),
                                        GOALS[-1][1:])

    with tempfile.TemporaryDirectory() as scratch:
        source = args.source or measured_trace(Path(scratch))
        traces = load_noise(source)
    for t in traces:
        print(f"trace {t.name}: {t.detours:,} detours in {format_duration(t.span_ns)}, "
              f"{t.rate_hz:,.0f}/s, {100 * t.noise_fraction:.2f}% noise, longest "
              f"{format_duration(int(t.durations_ns.max()) if t.detours else 0)}")
    options = PredictOptions((procs,), args.compute, args.collective, iterations=args.iterations,
                             seed=args.seed)
    baseline_rss = peak_rss_mib()

    began, began_cpu = time.perf_counter(), time.process_time()
    noise_free = simulate(procs, options, [])
    free_s, free_cpu_s = time.perf_counter() - began, time.process_time() - began_cpu

    began, began_cpu = time.perf_counter(), time.process_time()
    noisy = simulate(procs, options, traces, np.random.default_rng([args.seed, procs, 0]))
    noisy_s, noisy_cpu_s = time.perf_counter() - began, time.process_time() - began_cpu
    rss = peak_rss_mib()

    began = time.perf_counter()
    estimate = analytic_runtime(procs, options, noise_free, delay_samples(traces, options))
    analytic_s = time.perf_counter() - began

    print(f"{format_count(procs)} processes x {args.iterations} iterations of "
          f"compute {format_duration(args.compute)} + {args.collective} "
          f"({len(os.sched_getaffinity(0))} CPUs, load average {os.getloadavg()[0]:.1f}):")
    print(f"  simulation with noise: {noisy_s:6.2f} s  (goal <= {time_goal_s:.0f} s)   "
          f"slowdown {100 * (noisy / noise_free - 1):8.2f}%")
    if estimate is None:
        print("  analytic estimate:     none without compute (it covers the compute phase)")
    else:
        print(f"  analytic estimate:     {analytic_s:6.2f} s                 "
              f"slowdown {100 * (estimate / noise_free - 1):8.2f}%")
    print(f"  noise-free simulation: {free_s:6.2f} s  (run time {format_duration(noise_free)})")
    # CPU time of all threads: what the simulations cost whatever else runs beside them
    print(f"  CPU time: {noisy_cpu_s:.2f} s with noise, {free_cpu_s:.2f} s noise-free")
    print(f"  peak RSS {rss:.0f} MiB (goal <= {memory_goal_mib} MiB; "
          f"{baseline_rss:.0f} MiB before simulating)")
    ok = noisy_s <= time_goal_s and rss <= memory_goal_mib
    print("goals met" if ok else "GOALS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
