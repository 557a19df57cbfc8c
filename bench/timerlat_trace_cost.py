"""What tracing costs the timerlat measurement: latency with tracing on and off.

    sudo python bench/timerlat_trace_cost.py [--loops 20000] [--interval 200us] [--rounds 6] [--cpus 1]

Alternates untraced and traced timerlat runs (off, on, off, on, ...) at
SCHED_FIFO 95 so that the machine's drift cancels, and prints the median
over rounds of each run's median and p99 latency and the median of the
paired differences (traced minus untraced). Every traced wakeup records a
few kernel events (the timer interrupt, the hrtimer, sched_wakeup,
sched_switch), each a few hundred nanoseconds: the difference is what
`--trace-threshold` explanations cost the numbers they explain.
"""

from __future__ import annotations

import argparse
import statistics

from noisescope.timerlat import TimerlatOptions, timerlat
from noisescope.units import format_duration, parse_cpu_list, parse_positive_duration


def measure(cpus, loops: int, interval_ns: int, traced: bool) -> tuple[float, float, int]:
    """Mean over CPUs of the median and p99 latency; kernel events recorded."""
    bundle = timerlat(TimerlatOptions(cpus=cpus, loops=loops, interval_ns=interval_ns,
                                      trace=traced, trace_threshold_ns=10**9), argv=["bench"])
    if traced and not bundle.manifest["trace"]["enabled"]:
        raise SystemExit(f"tracing is unavailable: {bundle.manifest['trace']['reason']}")
    rows = bundle.summaries["timerlat"]
    events = sum(r["events"] + r["sched_switch"] for r in bundle.manifest["trace"].get("recordings", []))
    return (statistics.mean(r["p50_ns"] for r in rows), statistics.mean(r["p99_ns"] for r in rows),
            events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000)
    parser.add_argument("--interval", default="200us")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cpus", default="1", help="CPUs to measure (default: 1)")
    args = parser.parse_args()
    interval = parse_positive_duration(args.interval, what="--interval", default_unit="us")
    cpus = parse_cpu_list(args.cpus)
    rows: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for traced in (False, True):
            rows[traced].append(measure(cpus, args.loops, interval, traced))
    for traced in (False, True):
        p50, p99, events = zip(*rows[traced], strict=True)
        print(f"tracing {'on ' if traced else 'off'}: median {format_duration(statistics.median(p50))}"
              f" (runs {', '.join(format_duration(v) for v in p50)}), p99 "
              f"{format_duration(statistics.median(p99))} (runs {', '.join(format_duration(v) for v in p99)})"
              + (f", {statistics.median(events):,.0f} events a run" if traced else ""))
    d50 = statistics.median(on[0] - off[0] for off, on in zip(rows[False], rows[True], strict=True))
    d99 = statistics.median(on[1] - off[1] for off, on in zip(rows[False], rows[True], strict=True))
    print(f"paired difference (on - off), median over {args.rounds} rounds: median latency "
          f"{d50:+,.0f} ns, p99 {d99:+,.0f} ns")


if __name__ == "__main__":
    main()
