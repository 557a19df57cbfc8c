"""noisescope tune: a traced baseline of the target CPUs and the plan of what to change (dry run)."""

from __future__ import annotations

import click

from ..render.terminal import print_warnings
from ..render.tune import plan_table
from ..tune import TuneOptions, tune
from ..units import format_cpu_list, format_duration, parse_cpu_list, parse_positive_duration
from .common import EXIT_INTERRUPTED, Progress, stderr, stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope tune --cpus 1                 # 10 s traced baseline of CPU 1, then the plan
  noisescope tune --cpus 2-7 --duration 30s -o node17-plan   # and keep the baseline with it
"""


@click.command(epilog=EXAMPLES)
@click.option("--cpus", required=True, help="the CPUs to tune, e.g. 2-7 (at least one online "
              "CPU must stay out of them for housekeeping)")
@click.option("--duration", default="10s", show_default=True, help="length of the baseline")
@click.option("--label", help="configuration label stored in the bundle")
@click.option("-o", "--output", help="bundle directory to write the baseline and the plan to "
              "(must not exist)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
def tune_command(cpus, duration, label, output, quiet):
    """Measure a traced baseline of the target CPUs and print the plan of
    candidate actions, each with its evidence and its share of the CPU's lost
    time: device IRQ affinity, process and kernel-thread affinity, the unbound
    workqueue cpumask, per-CPU kernel threads that cannot move, the system
    settings that apply (watchdogs, RT throttling, THP, idle states, ...), and
    boot parameters (nohz_full, rcu_nocbs, isolcpus), advised only.

    A dry run: nothing on the machine is changed. Needs root (the baseline
    is traced)."""
    options = TuneOptions(cpus=parse_cpu_list(cpus),
                          duration_ns=parse_positive_duration(duration, what="--duration"),
                          label=label)
    result = tune(options, destination=output,
                  progress=Progress(options.duration_ns, enabled=not quiet))
    bundle = result.bundle
    for summary in bundle.summaries.get("detour", []):
        stdout.print(f"baseline CPU {summary['cpu']}: {format_duration(summary['measured_ns'])} "
                     f"measured, {summary['detours']:,} detours, {summary['noise_pct']:.3f}% of "
                     f"the time lost", highlight=False, markup=False)
    stdout.print(f"housekeeping CPUs: {format_cpu_list(result.housekeeping)}", highlight=False)
    table = plan_table(bundle.summaries["plan"])
    stdout.print()
    stdout.print(table if table is not None else "nothing to propose: no candidate found")
    print_warnings(bundle, stdout)
    if output:
        stderr.print(f"bundle: {bundle.path}" + ("" if bundle.complete else " (incomplete)"),
                     highlight=False)
    return 0 if bundle.complete else EXIT_INTERRUPTED
