"""noisescope timerlat against the real cyclictest, side by side.

    python bench/timerlat_vs_cyclictest.py [--cpu N] [--interval-us 200] [--priority 90]
                                           [--loops 5000] [--rounds 20] [--default-system]

Both run alternately on the same CPU with the same interval, priority and
loop count; both lock memory, and both hold /dev/cpu_dma_latency at 0 as
cyclictest does by default (--default-system: neither does). Latencies are
compared the way cyclictest bins them (whole microseconds, truncated), with
the same percentile method for both: the goal is a ratio (ours / cyclictest)
of 0.8-1.25 for the median and the p99. The verdict uses the median over
rounds of each round's ratio (a round is one run of each tool, back to back):
on a shared machine a burst of someone else's work lands in one tool's round
and decides the pooled p99 of all rounds, which is printed too. Needs root
and the Debian package rt-tests (installed here when missing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from noisescope.probes.summary import linear_histogram_quantiles
from noisescope.timerlat import TimerlatOptions, timerlat

HISTOGRAM_US = 10_000
QUANTILES = [0.5, 0.99]
GOAL = (0.8, 1.25)


def ensure_cyclictest() -> str:
    found = shutil.which("cyclictest")
    if found:
        return found
    if os.geteuid() != 0:
        sys.exit("cyclictest is missing: apt-get install rt-tests (as root)")
    subprocess.run(["apt-get", "install", "-y", "-qq", "rt-tests"], check=True)
    return shutil.which("cyclictest") or sys.exit("rt-tests did not install cyclictest")


def quantiles_us(counts: np.ndarray) -> list[float]:
    """Median and p99 of whole-microsecond buckets (bucket k: [k, k+1) us), in us."""
    lower = np.arange(len(counts)) * 1000
    values = linear_histogram_quantiles(lower, lower + 1000, counts, QUANTILES, HISTOGRAM_US * 1000)
    return [v / 1000 if v is not None else float("nan") for v in values]


def noisescope_round(args) -> np.ndarray:
    options = TimerlatOptions(cpus=(args.cpu,), interval_ns=args.interval_us * 1000,
                              loops=args.loops, priority=args.priority,
                              histogram_ns=HISTOGRAM_US * 1000,
                              dma_latency_us=None if args.default_system else 0,
                              trace=False)  # cyclictest records no kernel events either
    bundle = timerlat(options, argv=["bench"])
    latency_ns = bundle.timerlat.latency_ns
    return np.bincount(np.minimum(latency_ns // 1000, HISTOGRAM_US), minlength=HISTOGRAM_US + 1)


def cyclictest_round(binary: str, args, workdir: Path) -> np.ndarray:
    out = workdir / "cyclictest.json"
    command = [binary, "-q", "-m", "-t", "1", "-a", str(args.cpu), "-p", str(args.priority),
               "-i", str(args.interval_us), "-l", str(args.loops), "-h", str(HISTOGRAM_US),
               f"--json={out}"]
    if args.default_system:
        command.append("--default-system")
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    thread = json.loads(out.read_text())["thread"]["0"]
    counts = np.zeros(HISTOGRAM_US + 1, np.int64)
    for bucket, count in thread["histogram"].items():
        counts[int(bucket)] += count
    counts[HISTOGRAM_US] += thread["cycles"] - counts.sum()  # beyond the histogram
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    parser.add_argument("--interval-us", type=int, default=200)
    parser.add_argument("--priority", type=int, default=90)
    parser.add_argument("--loops", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--default-system", action="store_true",
                        help="leave /dev/cpu_dma_latency alone in both tools")
    args = parser.parse_args()
    binary = ensure_cyclictest()
    version = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    ours_total = np.zeros(HISTOGRAM_US + 1, np.int64)
    theirs_total = np.zeros(HISTOGRAM_US + 1, np.int64)
    print(f"CPU {args.cpu}, interval {args.interval_us} us, SCHED_FIFO {args.priority}, "
          f"{args.loops} loops per round, {args.rounds} rounds alternating, "
          f"dma_latency {'untouched' if args.default_system else '0'}; "
          f"{version.splitlines()[0] if version else 'cyclictest'}")
    print("round  noisescope p50/p99 (us)  cyclictest p50/p99 (us)")
    ratios = []
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            ours = noisescope_round(args)
            theirs = cyclictest_round(binary, args, Path(workdir))
            ours_total += ours
            theirs_total += theirs
            a, b = quantiles_us(ours), quantiles_us(theirs)
            ratios.append([x / y for x, y in zip(a, b, strict=True)])
            print(f"{r + 1:5d}  {a[0]:10.1f} / {a[1]:6.1f}       {b[0]:10.1f} / {b[1]:6.1f}")
    a, b = quantiles_us(ours_total), quantiles_us(theirs_total)
    ratio = [x / y for x, y in zip(a, b, strict=True)]
    print(f"all rounds: noisescope p50 {a[0]:.1f} us, p99 {a[1]:.1f} us; "
          f"cyclictest p50 {b[0]:.1f} us, p99 {b[1]:.1f} us")
    paired = [statistics.median(r[i] for r in ratios) for i in range(len(QUANTILES))]
    print(f"ratio noisescope/cyclictest of the pooled rounds: median {ratio[0]:.3f}, "
          f"p99 {ratio[1]:.3f}")
    print(f"ratio noisescope/cyclictest, median over rounds: median {paired[0]:.3f}, "
          f"p99 {paired[1]:.3f} (goal {GOAL[0]}-{GOAL[1]})")
    sys.exit(0 if all(GOAL[0] <= x <= GOAL[1] for x in paired) else 1)


if __name__ == "__main__":
    main()
