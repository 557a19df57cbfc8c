"""noisescope explain: why the detours (and late timer wakeups) of a stored scan happened."""

from __future__ import annotations

import click
import numpy as np

from ..bundle import Bundle, load
from ..errors import UsageError
from ..render.terminal import header_lines, print_warnings
from ..render.trace import LATE_WAKEUPS, causes_table, worst_table
from ..tables import Table
from ..trace import event_source, explain_detours
from ..trace.explain import attribution_summary
from ..trace.store import EventSource
from ..trace.wakeups import explain_late_wakeups, wakeup_summary
from ..units import parse_cpu_list, parse_duration
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
@click.option("--worst", default=5, show_default=True, help="longest detours (late wakeups) shown per CPU")
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
    bundle = load(bundle_path)
    trace = event_source(bundle)
    has_detours, has_wakeups = bundle.has_table("detour_causes"), bundle.has_table("timerlat")
    if not (has_detours or has_wakeups):
        raise UsageError(f"{bundle.name} has no explained detours or timer wakeups (neither the "
                         f"detour nor the timerlat probe ran while tracing)",
                         "scan with --probes detour or --probes timerlat")
    if trace_threshold is not None and not has_wakeups:
        raise UsageError(f"--trace-threshold explains timer wakeups, and {bundle.name} has none",
                         "use it with bundles of noisescope timerlat or scan --probes timerlat")
    if worst < 0:
        raise UsageError("--worst must be 0 or more", "e.g. --worst 5")
    wanted = parse_cpu_list(cpus) if cpus else None
    measured = bundle.parameters["cpus"]
    if wanted is not None and not set(wanted) & set(measured):
        raise UsageError(f"{bundle.name} did not measure CPUs {cpus}",
                         f"it measured CPUs {','.join(map(str, measured))}")
    tables = []
    if osnoise and not has_detours:
        raise UsageError(f"--osnoise explains detours, and {bundle.name} has none",
                         "use it with bundles of noisescope scan --probes detour --osnoise on")
    if has_detours:
        detours, causes = bundle.detours, bundle.detour_causes
        if osnoise:
            attribution = explain_detours(bundle, osnoise="prefer")
            detours, causes = attribution.annotate(detours), attribution.causes
        detours, causes = _only(detours, wanted), _only(causes, wanted)
        rows = attribution_summary(detours, causes, trace, worst=worst)
        tables += [causes_table(rows, limit=None), worst_table(rows) if worst else None]
    if has_wakeups:
        rows = _late_wakeup_rows(bundle, trace, wanted, worst, trace_threshold)
        tables += [causes_table(rows, limit=None, explained=LATE_WAKEUPS),
                   worst_table(rows, explained=LATE_WAKEUPS) if worst else None]
    for line in header_lines(bundle):
        stdout.print(line, highlight=False, markup=False)
    for table in tables:
        if table is not None:
            stdout.print()
            stdout.print(table)
    print_warnings(bundle, stdout)


def _only(table: Table, cpus: list[int] | None) -> Table:
    return table if cpus is None else table.filter(np.isin(table["cpu"], cpus))


def _late_wakeup_rows(bundle: Bundle, trace: EventSource, cpus: list[int] | None, worst: int,
                      threshold: str | None) -> list[dict]:
    """Summary rows of the late wakeups: those explained when measuring, or
    attributed again at another threshold from the bundle's trace."""
    summaries = [s for s in bundle.summaries.get("timerlat", []) if cpus is None or s["cpu"] in cpus]
    if threshold is None:
        if not bundle.has_table("late_wakeup_causes"):
            raise UsageError(f"{bundle.name} has no explained late wakeups",
                             "give --trace-threshold, e.g. --trace-threshold 50us")
        stored = bundle.summaries["late_wakeups"][0]["threshold_ns"]
        return wakeup_summary(_only(bundle.late_wakeups, cpus), _only(bundle.late_wakeup_causes, cpus),
                              trace, [s["cpu"] for s in summaries], stored, worst)
    threshold_ns = parse_duration(threshold, what="--trace-threshold", default_unit="us")
    return explain_late_wakeups(_only(bundle.timerlat, cpus), threshold_ns, summaries, trace,
                                bundle.trace_coverage, worst).summary
