"""noisescope system show: what on this machine adds noise, with advice."""

from __future__ import annotations

import click

from ..render.terminal import findings_table
from ..system import check_system
from ..units import format_cpu_list, parse_cpu_list
from .common import stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope system show                 # the isolated CPUs, or all online CPUs
  noisescope system show --cpus 2-7      # the CPUs you will measure
  noisescope system show --root node17/  # a /proc and /sys tree captured elsewhere
"""


@click.group(epilog=EXAMPLES)
def system_group():
    """Check the machine's configuration for sources of noise."""


@system_group.command("show", epilog=EXAMPLES)
@click.option("--cpus", help="CPUs you will measure, e.g. 2-7 (default: the isolated CPUs, "
              "else all online CPUs)")
@click.option("--root", default="/", show_default=True, type=click.Path(exists=True, file_okay=False),
              help="read /proc and /sys below this directory (a captured tree)")
def show_command(cpus, root):
    """Read-only check of what adds noise (governor, turbo, idle states, SMT,
    isolation, IRQs, RT throttling, watchdogs, THP, vm.stat_interval, timer
    migration, workqueue cpumask, tick, clocksource, virtualization), each
    finding with advice.

    Exit status: 0 nothing to advise, 1 advice applies (or a check could not be
    made), 2 bad input (with a one-line error on stderr)."""
    result = check_system(root, parse_cpu_list(cpus) if cpus else None)
    if result.cpus:
        stdout.print(f"Checked for CPUs {format_cpu_list(result.cpus)}", highlight=False)
    stdout.print(findings_table(result.to_list()))
    found = sum(f.state != "ok" for f in result.findings)
    stdout.print(f"\n{found} of {len(result.findings)} checks found something (exit status "
                 f"{result.exit_code})", highlight=False)
    return result.exit_code
