"""The decoding and the attribution's replay of one CPU's events: nanoseconds per event.

    python bench/replay.py [--seconds 1] [--rounds 7]

Decodes `--seconds` of one CPU of bench/many_cpus.py's synthetic recording
(the captured buffer of tests/fixtures/trace/kvm-detour-inject repeated, its
events and switches 20,000 a second: ticks, hrtimers, softirqs, switches),
timing the decoding (which a scan does twice), then times
`switches.complete_switches` and `attribute.build_timeline` (which
calls it) on them, the least CPU time of `--rounds` runs: the replay that
attribute() runs for every chunk of a CPU's detours. Per event of both tables.
Run it with another checkout's code on PYTHONPATH to compare the two. Goal
(issue 15): the replay well under 1 us per event.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # many_cpus, beside this script

from many_cpus import FIXTURE, Capture  # noqa: E402

from noisescope.trace.attribute import Labels, build_timeline  # noqa: E402
from noisescope.trace.events import Symbols, decode_raw  # noqa: E402
from noisescope.trace.session import TraceClock  # noqa: E402
from noisescope.trace.switches import complete_switches  # noqa: E402

GOAL_NS = 1_000


def least_cpu_seconds(work, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        begun = time.process_time()
        work()
        best = min(best, time.process_time() - begun)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    capture = Capture()
    pages = capture.tiled_pages(capture.shifts_ticks(args.seconds))
    symbols = Symbols(FIXTURE / "kallsyms")

    def decode():
        return decode_raw({1: pages}, capture.formats, capture.layout,
                          TraceClock("x86-tsc", capture.clock).to_ns, symbols)[0]

    trace = decode()
    events, switches = trace.events, trace.switches
    count = events.rows + switches.rows
    decoding = least_cpu_seconds(decode, args.rounds)
    completing = least_cpu_seconds(lambda: complete_switches(switches, events), args.rounds)
    replaying = least_cpu_seconds(lambda: build_timeline(events, switches, Labels(), {}, set()),
                                  args.rounds)
    per_event = replaying / count * 1e9
    print(f"{events.rows:,} events and {switches.rows:,} switches of one CPU ({args.seconds:g} s); "
          f"least CPU time of {args.rounds} rounds, per event:")
    print(f"  decoding          {decoding / count * 1e9:8.0f} ns")
    print(f"  complete_switches {completing / count * 1e9:8.0f} ns")
    print(f"  build_timeline    {per_event:8.0f} ns (complete_switches included)")
    print(f"goal: the replay under {GOAL_NS} ns per event: {'met' if per_event < GOAL_NS else 'NOT met'}")
    sys.exit(0 if per_event < GOAL_NS else 1)


if __name__ == "__main__":
    main()
