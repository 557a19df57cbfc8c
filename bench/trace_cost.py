"""Tracing's own cost: noise fraction and detour rate with tracing on and off.

    sudo python bench/trace_cost.py [--duration 5s] [--rounds 4] [--cpus 1]

Alternates untraced and traced detour scans (off, on, off, on, ...) in one
session so that the machine's drift cancels, and reports the medians and
the median of the paired differences. Goal: tracing adds <= 0.2 percentage
points of noise.
"""

from __future__ import annotations

import argparse
import statistics

from noisescope.scan import ScanOptions, scan
from noisescope.trace.scanning import TraceOptions
from noisescope.units import parse_cpu_list, parse_positive_duration

GOAL_POINTS = 0.2


def measure(cpus, duration_ns: int, traced: bool) -> list[dict]:
    bundle = scan(ScanOptions(cpus=cpus, duration_ns=duration_ns, probes=("detour",),
                              trace=TraceOptions(enabled=traced, cost_reference_ns=0)), argv=["bench"])
    if traced and not bundle.manifest["trace"]["enabled"]:
        raise SystemExit(f"tracing is unavailable: {bundle.manifest['trace']['reason']}")
    return bundle.summaries["detour"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="5s")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--cpus", help="CPUs to measure (default: all)")
    args = parser.parse_args()
    duration = parse_positive_duration(args.duration, what="--duration")
    cpus = parse_cpu_list(args.cpus) if args.cpus else None
    rows: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for traced in (False, True):
            summaries = measure(cpus, duration, traced)
            rows[traced].append((statistics.mean(s["noise_pct"] for s in summaries),
                                 statistics.mean(s["detours_per_s"] for s in summaries),
                                 max(s["run_delay_ns"] / s["measured_ns"] for s in summaries)))
    for traced in (False, True):
        noise, rate, delay = zip(*rows[traced], strict=True)
        print(f"tracing {'on ' if traced else 'off'}: noise median {statistics.median(noise):.3f} % "
              f"(runs {', '.join(f'{n:.3f}' for n in noise)}), detours/s median "
              f"{statistics.median(rate):.1f}, worst run delay {100 * max(delay):.1f} %")
    noise_diff = [on[0] - off[0] for off, on in zip(rows[False], rows[True], strict=True)]
    rate_diff = [on[1] - off[1] for off, on in zip(rows[False], rows[True], strict=True)]
    print(f"traced - untraced, median of {args.rounds} pairs: noise "
          f"{statistics.median(noise_diff):+.3f} percentage points (goal <= {GOAL_POINTS}), "
          f"detours {statistics.median(rate_diff):+.1f}/s")


if __name__ == "__main__":
    main()
