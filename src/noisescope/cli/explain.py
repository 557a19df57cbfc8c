"""noisescope explain: why the detours of a stored scan happened."""

from __future__ import annotations

import click
import numpy as np

from ..bundle import load
from ..errors import UsageError
from ..render.terminal import header_lines, print_warnings
from ..render.trace import causes_table, worst_table
from ..trace import event_source
from ..trace.explain import attribution_summary
from ..units import parse_cpu_list
from .common import stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope explain noisescope-node17-20261130T063836Z
  noisescope explain tuned --cpus 3 --worst 10
"""


@click.command(epilog=EXAMPLES)
@click.argument("bundle_path", metavar="BUNDLE")
@click.option("--cpus", help="only these CPUs, e.g. 2-3")
@click.option("--worst", default=5, show_default=True, help="longest detours shown per CPU")
def explain_command(bundle_path, cpus, worst):
    """Per CPU: what caused the detours (cause, count, total time, share of
    the noise, longest single), and the worst detours with the kernel events
    inside them."""
    bundle = load(bundle_path)
    trace = event_source(bundle)
    if not bundle.has_table("detour_causes"):
        raise UsageError(f"{bundle.name} has no explained detours (no detour probe ran while tracing)",
                         "scan with --probes detour")
    if worst < 0:
        raise UsageError("--worst must be 0 or more", "e.g. --worst 5")
    detours, causes = bundle.detours, bundle.detour_causes
    if cpus:
        wanted = parse_cpu_list(cpus)
        keep = [c for c in wanted if c in set(detours["cpu"].tolist())]
        if not keep:
            raise UsageError(f"{bundle.name} has no detours on CPUs {cpus}",
                             f"it measured CPUs {','.join(map(str, bundle.parameters['cpus']))}")
        detours = detours.filter(np.isin(detours["cpu"], keep))
        causes = causes.filter(np.isin(causes["cpu"], keep))
    rows = attribution_summary(detours, causes, trace, worst=worst)
    for line in header_lines(bundle):
        stdout.print(line, highlight=False, markup=False)
    stdout.print()
    stdout.print(causes_table(rows, limit=None))
    if worst:
        stdout.print()
        stdout.print(worst_table(rows, chain_lines=None))
    print_warnings(bundle, stdout)

