"""noisescope cluster scan|bsp: many nodes at once, under mpirun or srun."""

from __future__ import annotations

import click

from ..errors import UsageError
from ..units import parse_cpu_list, parse_positive_duration
from .common import EXIT_INTERRUPTED, EXIT_USAGE, Progress, plain_stdout, report, stderr
from .scan import measurement_options, scan_options

SCAN_EXAMPLES = """
\b
EXAMPLES
  srun -N 64 --ntasks-per-node=1 noisescope cluster scan --rt -o fleet   # one rank per node
  mpirun -n 2 noisescope cluster scan --duration 5s -o fleet             # two ranks, one CPU each
  mpirun -n 8 noisescope cluster scan --inject 1kHz:50us@cpu0 --inject-ranks 3 -o check
  noisescope show fleet; noisescope compare fleet-before fleet-after --per-node
"""


@click.group()
def cluster_group():
    """Measure many nodes at once: start with mpirun or srun (needs noisescope[mpi])."""


@cluster_group.command("scan", epilog=SCAN_EXAMPLES)
@measurement_options
@click.option("--inject-ranks", help="run --inject only on these ranks, e.g. 3 or 0-7 (default: "
              "every rank that measures the injection's CPU)")
@click.option("--timeout", default="60s", show_default=True,
              help="how long rank 0 waits for the other ranks, at the start and after its scan")
@click.option("-o", "--output", required=True,
              help="fleet directory to write (must not exist; on a shared file system)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
def cluster_scan_command(inject_ranks, timeout, output, quiet, **measurement):
    """Scan every rank's CPUs at the same moments and gather a fleet bundle.

    Every rank writes its own bundle under OUTPUT/nodes/; rank 0 writes the
    fleet bundle in OUTPUT and prints the noisiest ranks and CPUs and how the
    nodes differ. One process per node measures all its CPUs; several ranks on
    one node measure the CPUs they are bound to, or split the node's CPUs.
    Started without mpirun/srun (one process), it scans this node only."""
    from ..cluster.mpi import World
    from ..cluster.scan import cluster_scan
    from ..scan import scan

    options = scan_options(**measurement)
    timeout_ns = parse_positive_duration(timeout, what="--timeout")
    ranks = parse_ranks(inject_ranks)
    world = World()
    progress = Progress(options.duration_ns, enabled=not quiet)
    if world.size == 1:
        stderr.print("note: one process (not started by mpirun or srun): scanning this node "
                     "only", highlight=False)
        return report(scan(options, progress=progress, destination=output))
    plain_stdout()
    run = cluster_scan(options, output, timeout_ns=timeout_ns, inject_ranks=ranks,
                       progress=progress, world=world, on_fleet=report)
    if run.fleet is not None:
        return 0 if run.fleet.complete else EXIT_INTERRUPTED
    if run.failure:
        stderr.print(f"noisescope: rank {run.rank}: {run.failure}", highlight=False,
                     markup=False)
        return EXIT_USAGE
    return 0 if run.bundle is None or run.bundle.complete else EXIT_INTERRUPTED


def parse_ranks(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return parse_cpu_list(text)
    except UsageError:
        raise UsageError(f"cannot read --inject-ranks {text!r}",
                         "write rank numbers, e.g. 3 or 0-7") from None
