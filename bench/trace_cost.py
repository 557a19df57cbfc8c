"""Tracing's own cost: noise fraction and detour rate with tracing on and off.

    sudo python bench/trace_cost.py [--duration 5s] [--rounds 4] [--cpus 1] [--rt]

Alternates untraced and traced detour scans (off, on, off, on, ...) in one
session so that the machine's drift cancels, and reports the medians and
the median of the paired differences. Goal: tracing adds <= 0.2 percentage
points of noise. On a machine busy with other work, --rt (SCHED_FIFO
samplers) keeps other tasks' time out of the comparison; the noise from
detours shorter than 100 us (interrupts, not preemptions) is shown too.
"""

from __future__ import annotations

import argparse
import statistics

from noisescope.scan import ScanOptions, scan
from noisescope.trace.scanning import TraceOptions
from noisescope.units import parse_cpu_list, parse_positive_duration

GOAL_POINTS = 0.2
SHORT_NS = 100_000


def measure(cpus, duration_ns: int, traced: bool, rt: bool) -> tuple[float, float, float, float]:
    """Mean over CPUs: noise %, detours/s, share of time in short detours %, run delay."""
    bundle = scan(ScanOptions(cpus=cpus, duration_ns=duration_ns, probes=("detour",), rt=rt,
                              trace=TraceOptions(enabled=traced)), argv=["bench"])
    if traced and not bundle.manifest["trace"]["enabled"]:
        raise SystemExit(f"tracing is unavailable: {bundle.manifest['trace']['reason']}")
    summaries = bundle.summaries["detour"]
    detours = bundle.detours
    short = [100 * detours.where(cpu=s["cpu"]).filter(detours.where(cpu=s["cpu"])["duration_ns"] < SHORT_NS)
             ["duration_ns"].sum() / s["measured_ns"] for s in summaries]
    return (statistics.mean(s["noise_pct"] for s in summaries),
            statistics.mean(s["detours_per_s"] for s in summaries), statistics.mean(short),
            max(s["run_delay_ns"] / s["measured_ns"] for s in summaries))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="5s")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--cpus", help="CPUs to measure (default: all)")
    parser.add_argument("--rt", action="store_true", help="SCHED_FIFO samplers (root)")
    args = parser.parse_args()
    duration = parse_positive_duration(args.duration, what="--duration")
    cpus = parse_cpu_list(args.cpus) if args.cpus else None
    rows: dict[bool, list[tuple[float, float, float, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for traced in (False, True):
            rows[traced].append(measure(cpus, duration, traced, args.rt))
    for traced in (False, True):
        noise, rate, short, delay = zip(*rows[traced], strict=True)
        print(f"tracing {'on ' if traced else 'off'}: noise median {statistics.median(noise):.3f} % "
              f"(runs {', '.join(f'{n:.3f}' for n in noise)}), in detours < 100 us "
              f"{statistics.median(short):.3f} %, detours/s {statistics.median(rate):.1f}, "
              f"worst run delay {100 * max(delay):.1f} %")

    def paired(i: int) -> float:
        return statistics.median(on[i] - off[i] for off, on in zip(rows[False], rows[True], strict=True))

    print(f"traced - untraced, median of {args.rounds} pairs: noise {paired(0):+.3f} percentage "
          f"points (goal <= {GOAL_POINTS}), in detours < 100 us {paired(2):+.3f} points, "
          f"detours {paired(1):+.1f}/s")


if __name__ == "__main__":
    main()
