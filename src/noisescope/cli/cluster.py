"""noisescope cluster scan|bsp: many nodes at once, under mpirun or srun."""

from __future__ import annotations

import click

from ..errors import UsageError
from ..units import parse_cpu_list, parse_positive_duration
from .common import EXIT_INTERRUPTED, EXIT_USAGE, Progress, plain_stdout, report, stderr
from .scan import measurement_options, scan_options, write_report_beside

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
              help="how long a rank waits for each rank below it (its children in the "
              "tree), at the start and after its scan")
@click.option("-o", "--output", required=True,
              help="fleet directory to write (must not exist; on a shared file system)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@click.option("--report/--no-report", "write_report", default=True, show_default=True,
              help="rank 0 writes report.html (ranks side by side) into OUTPUT")
def cluster_scan_command(inject_ranks, timeout, output, quiet, write_report, **measurement):
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
        def note() -> int:  # once the scan has checked its options
            stderr.print("note: one process (not started by mpirun or srun): scanning this node "
                         "only", highlight=False)
            return options.start_mono_ns
        bundle = scan(options, progress=progress, destination=output, on_ready=note)
        status = report(bundle)
        if write_report:
            write_report_beside(bundle.path, quiet)
        return status
    plain_stdout()
    run = cluster_scan(options, output, timeout_ns=timeout_ns, inject_ranks=ranks,
                       progress=progress, world=world, on_fleet=report)
    if run.fleet is not None:
        if write_report:
            write_report_beside(run.fleet.path, quiet)
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


BSP_EXAMPLES = """
\b
EXAMPLES
  mpirun -n 2 noisescope cluster bsp                         # 1 ms work + allreduce, 2000 times
  mpirun -n 2 noisescope cluster bsp --rt --inject 200Hz:300us@cpu1 -o bsp-noisy
  srun -N 16 --ntasks-per-node=1 noisescope cluster bsp --collective barrier --compute 500us
"""


@cluster_group.command("bsp", epilog=BSP_EXAMPLES)
@click.option("--compute", default="1ms", show_default=True,
              help="work per iteration (FWQ work units, calibrated on rank 0)")
@click.option("--iterations", default=2000, show_default=True,
              help="iterations of work alone, and as many with the collective")
@click.option("--collective", type=click.Choice(["allreduce", "barrier"]), default="allreduce",
              show_default=True)
@click.option("--block", default=100, show_default=True,
              help="iterations per block; blocks alone and synchronized alternate")
@click.option("--sample", default="100ms", show_default=True,
              help="detour sampling before each pair of blocks (the noise predict replays)")
@click.option("--threshold", default="1us", show_default=True,
              help="shortest gap counted as a detour")
@click.option("--rt", is_flag=True, help="run the ranks at SCHED_FIFO (root), with a pause each "
              "round to stay inside the RT budget")
@click.option("--priority", default=95, show_default=True, help="SCHED_FIFO priority with --rt")
@click.option("--cpus", help="CPUs the ranks of a node may use (default: their binding)")
@click.option("--inject", "injections", multiple=True, metavar="RATE:LENGTH@cpuN",
              help="known noise on a rank's CPU (thread mode), e.g. 200Hz:300us@cpu1")
@click.option("--inject-ranks", help="run --inject only on these ranks")
@click.option("--seeds", default=5, show_default=True, help="predict's seeds")
@click.option("--timeout", default="60s", show_default=True,
              help="how long a rank waits for each rank below it (its children in the "
              "tree)")
@click.option("--label", help="configuration label stored in the bundle")
@click.option("-o", "--output", help="bundle directory to write (must not exist)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
def cluster_bsp_command(compute, iterations, collective, block, sample, threshold, rt, priority,
                        cpus, injections, inject_ranks, seeds, timeout, label, output, quiet):
    """Measure the slowdown of work + a collective on every rank, beside predict's.

    Each rank alternates a fixed amount of work with an MPI collective, and the
    same work without it; the slowdown of the synchronized loop is printed
    beside the one `predict` computes for the same number of ranks from the
    noise the detour sampler measured on those ranks meanwhile."""
    from ..cluster.bsp import BspOptions, run_bsp
    from ..cluster.mpi import World
    from ..probes import Injection

    options = BspOptions(
        compute_ns=parse_positive_duration(compute, what="--compute"),
        iterations=iterations, collective=collective, block=block,
        sample_ns=parse_positive_duration(sample, what="--sample"),
        threshold_ns=parse_positive_duration(threshold, what="--threshold", default_unit="ns"),
        rt=rt, priority=priority, cpus=parse_cpu_list(cpus) if cpus else None,
        injections=tuple(Injection.parse(s, default_mode="thread") for s in injections),
        inject_ranks=parse_ranks(inject_ranks), seeds=seeds, label=label)
    options.check()  # before MPI starts
    timeout_ns = parse_positive_duration(timeout, what="--timeout")
    world = World()
    plain_stdout()
    progress = None if quiet or world.rank else _round_progress
    bundle = run_bsp(options, destination=output, timeout_ns=timeout_ns, world=world,
                     progress=progress)
    if bundle is None:
        return 0
    if output:
        return report(bundle)
    from ..render.terminal import print_bundle
    from .common import stdout as out

    print_bundle(bundle, out)
    return 0 if bundle.complete else EXIT_INTERRUPTED


def _round_progress(done: int, total: int) -> None:
    import sys

    print(f"round {done + 1} of {total}", file=sys.stderr, flush=True)
