"""noisescope bench: run one command repeatedly and record what each run cost."""

from __future__ import annotations

import os

import click

from ..bundle import default_output
from ..experiment import Configuration, Experiment, measure
from ..host import live_host_facts
from ..placement import LAYOUTS, Placement
from ..probes import Injection
from ..smt import SETTINGS as SMT_SETTINGS
from ..units import parse_cpu_list, parse_positive_duration
from ..workload import Metric, Workload
from .common import RunProgress, occupancy_choice, occupancy_options, report

EXAMPLES = """
\b
EXAMPLES
  noisescope bench --runs 10 --label vanilla -- make -j2
  noisescope bench --cpus 1 --inject 1kHz:20us@cpu1 --label noisy -- xz -9 -k -c big.tar
  noisescope bench --metric 'tps=tps: ([0-9.]+)' --ncpus 4 --layout spread -- ./db-bench
  noisescope bench --shell -- 'make clean >/dev/null && make -j2'
  noisescope bench --cpus 0 --siblings 0,1 -- ./db-bench   # sibling occupancy without SMT (a test)
"""


@click.command(epilog=EXAMPLES, context_settings={"ignore_unknown_options": True,
                                                 "allow_interspersed_args": False})
@click.option("--runs", default=10, show_default=True, help="measured runs")
@click.option("--warmup", default=1, show_default=True, help="runs before, not measured")
@click.option("--label", help="configuration label stored in the bundle, e.g. nosmt")
@click.option("--name", help="workload name (default: the program's name)")
@click.option("--cpus", help="run the command on these CPUs, e.g. 0-3,8")
@click.option("--ncpus", type=int, help="run it on this many CPUs chosen by --layout")
@click.option("--layout", type=click.Choice(LAYOUTS), default="packed", show_default=True,
              help="with --ncpus: packed fills one NUMA node (socket) first, spread goes "
                   "round-robin over them")
@click.option("--fifo", type=int, default=0, help="run it at this SCHED_FIFO priority (1-99)")
@click.option("--core-sched", is_flag=True,
              help="give it a core-scheduling cookie of its own (prctl PR_SCHED_CORE)")
@click.option("--smt", type=click.Choice(SMT_SETTINGS), help="switch SMT on or off for the runs "
              "(root; restored afterwards): off is what booting with nosmt gives")
@click.option("--inject", "injections", multiple=True, metavar="RATE:LENGTH@cpuN",
              help="inject noise beside each run, e.g. 1kHz:20us@cpu1 (repeatable)")
@click.option("--timeout", default="10m", show_default=True,
              help="end a run (its whole process group) after this long")
@click.option("--metric", "metrics", multiple=True, metavar="NAME[:higher|lower]=REGEX",
              help="figure of merit from the output (first group of the last match; "
                   "higher is better unless :lower)")
@click.option("--shell", is_flag=True, help="run the command through /bin/sh -c")
@occupancy_options
@click.option("-o", "--output", help="bundle directory to write (must not exist)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def bench_command(runs, warmup, label, name, cpus, ncpus, layout, fifo, core_sched, smt, injections,
                  timeout, metrics, shell, occupancy, siblings, output, quiet, command):
    """Run COMMAND repeatedly; record wall, user and system time, memory, context
    switches, faults and figures of merit of every run in a bundle."""
    argv = tuple(command[1:] if command and command[0] == "--" else command)
    if not argv:
        raise click.UsageError("no command given")
    program = (argv[0].split() or [""])[0] if shell else argv[0]
    workload = Workload(name or os.path.basename(program), argv, shell=shell,
                        metrics=tuple(Metric.parse(m) for m in metrics))
    placement = Placement(cpus=parse_cpu_list(cpus) if cpus else None, ncpus=ncpus,
                          layout=layout, fifo_priority=fifo, core_scheduling=core_sched)
    configuration = Configuration(
        "", placement, tuple(Injection.parse(s, default_mode="thread") for s in injections), smt=smt)
    experiment = Experiment((workload,), (configuration,), runs=runs, warmup=warmup,
                            timeout_ns=parse_positive_duration(timeout, what="--timeout"),
                            occupancy=occupancy_choice(occupancy, siblings))
    facts = live_host_facts()
    destination = output or default_output(facts).replace("noisescope-", "noisescope-bench-", 1)
    return report(measure(experiment, label=label, facts=facts, destination=destination,
                          progress=None if quiet else RunProgress()))
