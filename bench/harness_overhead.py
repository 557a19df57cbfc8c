"""The bench harness's own cost per run vs a bare fork/exec/wait (goal: <= 2 ms extra).

    python bench/harness_overhead.py [--rounds 10] [--runs 50] [--cpu N]

Runs /bin/true over and over, in interleaved rounds so that the machine's
drift hits every method alike:
  bare      os.posix_spawn + os.waitpid from Python (the least a harness can do)
  runner    noisescope's Runner.run (launcher, output files, /proc/stat, wait4 report)
  placed    the same with the child pinned to one CPU (spawned from a placed thread)
  bench     the whole experiment loop (Runner + steps + records), per run
  traced    the same with SMT sibling occupancy traced (root; CPUs 0 and 1
            declared siblings): tracefs start/stop, buffer copy and decoding
            after every run
and prints the median time per run of each and the extra over `bare`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from noisescope.clock import measurement_clock
from noisescope.experiment import Configuration, Experiment, prepare, run_steps
from noisescope.host import live_host_facts
from noisescope.placement import Placement, ResolvedPlacement
from noisescope.trace.siblings import OccupancyOptions, SiblingRecorder
from noisescope.trace.tracefs import TracingUnavailable
from noisescope.workload import Runner, Workload

TRUE = "/bin/true"


def bare(n: int) -> None:
    for _ in range(n):
        pid = os.posix_spawn(TRUE, [TRUE], os.environ)
        os.waitpid(pid, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=50, help="runs per method and round")
    parser.add_argument("--cpu", type=int, help="CPU for the placed runs (default: the last)")
    args = parser.parse_args()
    facts = live_host_facts()
    cpu = args.cpu if args.cpu is not None else facts.online[-1]
    workload = Workload("true", (TRUE,))
    unplaced = ResolvedPlacement(None, 0, False)
    placed = ResolvedPlacement((cpu,), 0, False)
    experiment = Experiment((workload,), (Configuration("", Placement()),), runs=args.runs,
                            warmup=0)
    prepared = prepare(experiment, facts)
    clock = measurement_clock(facts.tsc_flags)
    runner = Runner()

    def with_runner(placement):
        def go(n):
            for _ in range(n):
                runner.run(workload, placement, 10**10)
        return go

    methods = {"bare": bare, "runner": with_runner(unplaced), "placed": with_runner(placed),
               "bench": lambda n: run_steps(experiment, prepared, clock)}
    traced = Experiment((workload,), (Configuration("", Placement(cpus=(0,))),), runs=args.runs,
                        warmup=0, occupancy=OccupancyOptions("on", ((0, 1),)))
    traced_prepared = prepare(traced, facts)
    try:
        recorder = SiblingRecorder.open(traced_prepared.occupancy, clock, traced.occupancy)
        methods["traced"] = lambda n: run_steps(traced, traced_prepared, clock, recorder=recorder)
    except TracingUnavailable as why:
        recorder = None
        print(f"traced: skipped ({why})")
    per_run: dict[str, list[float]] = {name: [] for name in methods}
    for method in methods.values():  # warm-up: page cache, imports
        method(3)
    for _ in range(args.rounds):
        for name, method in methods.items():
            begin = time.perf_counter_ns()
            method(args.runs)
            per_run[name].append((time.perf_counter_ns() - begin) / args.runs / 1e6)
    runner.close()
    if recorder:
        recorder.close()
    base = statistics.median(per_run["bare"])
    print(f"/bin/true, {args.rounds} rounds x {args.runs} runs per method, medians per run:")
    for name, times in per_run.items():
        median = statistics.median(times)
        extra = "" if name == "bare" else f"   extra {median - base:+.3f} ms (goal <= 2 ms)"
        print(f"  {name:7s} {median:7.3f} ms  (min {min(times):.3f}, max {max(times):.3f}){extra}")


if __name__ == "__main__":
    main()
