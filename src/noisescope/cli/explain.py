"""noisescope explain: why the detours (and late timer wakeups) of a stored scan happened."""

from __future__ import annotations

import click

from ..explanation import WORST, explain
from ..render.terminal import header_lines, print_warnings
from ..render.trace import LATE_WAKEUPS, causes_table, worst_table
from .common import stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope explain noisescope-node17-20261130T063836Z
  noisescope explain tuned --cpus 3 --worst 10
  noisescope explain timerlat-run --trace-threshold 20us   # late wakeups, at another threshold
  noisescope explain rt-node --osnoise      # cross-check: causes from the osnoise tracer's events
"""


@click.command(epilog=EXAMPLES)
@click.argument("bundle_path", metavar="BUNDLE")
@click.option("--cpus", help="only these CPUs, e.g. 2-3")
@click.option("--worst", default=WORST, show_default=True,
              help="longest detours (late wakeups) shown per CPU")
@click.option("--trace-threshold", help="timerlat: explain the wakeups at least this late, from the "
              "stored trace (default: those explained when measuring; a plain number is in us)")
@click.option("--osnoise", is_flag=True, help="explain the detours again from the osnoise tracer's "
              "noise events (recorded with scan --osnoise on): the kernel's own accounting, "
              "instead of the entry/exit events")
def explain_command(bundle_path, cpus, worst, trace_threshold, osnoise):
    """Per CPU: what caused the detours (cause, count, total time, share of
    the noise, longest single), and the worst detours with the kernel events
    inside them. For timerlat measurements the same for the late wakeups:
    what held the CPU between the deadline and the thread's wakeup."""
    found = explain(bundle_path, cpus=cpus, worst=worst, trace_threshold=trace_threshold,
                    osnoise=osnoise)
    tables = []
    if found.detours is not None:
        tables += [causes_table(found.detours, limit=None),
                   worst_table(found.detours) if worst else None]
    if found.late_wakeups is not None:
        tables += [causes_table(found.late_wakeups, limit=None, explained=LATE_WAKEUPS),
                   worst_table(found.late_wakeups, explained=LATE_WAKEUPS) if worst else None]
    for line in header_lines(found.bundle):
        stdout.print(line, highlight=False, markup=False)
    for table in tables:
        if table is not None:
            stdout.print()
            stdout.print(table)
    print_warnings(found.bundle, stdout)
