"""noisescope predict: what measured noise costs a bulk-synchronous run at scale;
noisescope export-trace: a noise trace for netgauge/LogGOPSim."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..analysis.predict import LogGP, load_noise, predict, write_trace_file
from ..analysis.predict.loggp import COLLECTIVES
from ..analysis.predict.model import MAX_PROCS
from ..analysis.predict.traces import check_trace_output
from ..bundle import check_destination
from ..errors import UsageError
from ..manifest import utc_now
from ..render.prediction import print_prediction
from ..units import format_count, parse_count_list, parse_duration
from .common import EXIT_INTERRUPTED, stderr, stdout

PREDICT_EXAMPLES = """
\b
EXAMPLES
  noisescope predict noisescope-node17-20261130T063836Z --procs 1k,16k,1M
  noisescope predict 250Hz:2us+1Hz:200us --compute 1ms --procs 2,64,4k,256k
  noisescope predict 10Hz:2500us --sync-noise --iterations 1000   # co-scheduled: ~2.5% at any P
  noisescope predict cpu3.trace --collective barrier --compute 0 --iterations 100
  noisescope predict tuned/ --procs 1M --seeds 3 -o prediction-tuned
"""

EXPORT_EXAMPLES = """
\b
EXAMPLES
  noisescope export-trace noisescope-node17-20261130T063836Z --cpu 3 -o cpu3.trace
  noisescope export-trace 250Hz:2us+1Hz:200us -o synthetic.trace
  LogGOPSim -f app.bin --noise-trace cpu3.trace          # replay it in LogGOPSim
"""

SOURCE_HELP = ("SOURCE is a bundle from 'noisescope scan' (one noise trace per measured CPU), "
               "a noise trace file (start_ns<TAB>duration_ns lines, as netgauge writes and "
               "LogGOPSim reads), or a synthetic spec RATE:LENGTH[+RATE:LENGTH...] of periodic "
               "sources with random phases.")


@click.command(epilog=PREDICT_EXAMPLES, help=(
    "Predict run time and slowdown of a bulk-synchronous application at scale, replaying "
    "measured noise on every process.\n\n"
    "Each of P processes computes for --compute, then joins --collective (costed with "
    "LogGP), --iterations times. Each process replays a noise trace from its own random "
    "offset (--sync-noise: the same offset for all); noise is charged only while a process "
    "is busy (computing or paying a message overhead), never while it waits. With several "
    "traces, rank r replays trace r mod (number of traces). Printed per P: run time with and "
    "without noise, slowdown and its spread over --seeds, and the order-statistics estimate "
    "(noise-free time plus the expected largest per-step delay among P processes); per "
    "noise source, the knee P* = 1/(rate x compute). The estimate leaves out noise in the "
    "collective and detours a process resumes into after waiting, so it is not given where "
    "detours outlast the compute window (unless the noise is co-scheduled). A run shorter "
    "than a source's period meets it in some seeds and not in others: see the spread.\n\n"
    + SOURCE_HELP))
@click.argument("source")
@click.option("--procs", default="2,16,128,1k,8k,64k", show_default=True,
              help="process counts; k = 1024, M = 1024^2 (binary, the HPC habit: 1M = 1048576); "
                   "2^N also works")
@click.option("--compute", default="1ms", show_default=True,
              help="compute time per iteration (W), e.g. 1ms; 0 for collectives only")
@click.option("--collective", type=click.Choice(COLLECTIVES), default="allreduce",
              show_default=True, help="allreduce: recursive doubling; barrier: dissemination")
@click.option("--bytes", "message_bytes", type=int, default=8, show_default=True,
              help="allreduce message size")
@click.option("--iterations", type=int, default=20, show_default=True)
@click.option("--sync-noise", is_flag=True,
              help="co-scheduled noise: every process replays from the same offset")
@click.option("--seeds", type=int, default=5, show_default=True,
              help="runs per process count, each with new random offsets")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True,
              help="first random seed")
@click.option("--latency", default="2.5us", show_default=True, help="LogGP L")
@click.option("--overhead", default="1.5us", show_default=True, help="LogGP o (send and receive)")
@click.option("--gap", default="1us", show_default=True, help="LogGP g (between messages)")
@click.option("--gap-per-byte", default="6ns", show_default=True, help="LogGP G")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON instead of tables")
@click.option("-o", "--output", help="also write the result as a bundle directory (must not exist)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
def predict_command(source, procs, compute, collective, message_bytes, iterations, sync_noise,
                    seeds, seed, latency, overhead, gap, gap_per_byte, as_json, output, quiet):
    loggp = LogGP(*(parse_duration(text, what=f"--{name}", default_unit="ns") for name, text in
                    (("latency", latency), ("overhead", overhead), ("gap", gap),
                     ("gap-per-byte", gap_per_byte))))
    counts = parse_count_list(procs, what="--procs", maximum=MAX_PROCS)
    compute_ns = parse_duration(compute, what="--compute", default_unit="ns")
    if output:
        check_destination(Path(output))
    started = utc_now()
    show_progress = not quiet and sys.stderr.isatty()
    result = predict(source, counts, compute_ns, collective, message_bytes=message_bytes,
                     iterations=iterations, sync_noise=sync_noise, seeds=seeds, seed=seed,
                     loggp=loggp, progress=_progress if show_progress else None)
    if show_progress:
        print("\r\x1b[K", end="", file=sys.stderr, flush=True)
    if as_json:
        json.dump(result.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print_prediction(result, stdout)
    if output:
        bundle = result.to_bundle(started_utc=started).write(output)
        stderr.print(f"bundle: {bundle}" + ("" if result.complete else " (incomplete)"))
    return 0 if result.complete else EXIT_INTERRUPTED


def _progress(procs: int, seed: int, seeds: int) -> None:
    print(f"\r\x1b[Ksimulating {format_count(procs)} processes, seed {seed} of {seeds}",
          end="", file=sys.stderr, flush=True)


@click.command(epilog=EXPORT_EXAMPLES, help=(
    "Write a noise trace in the netgauge/LogGOPSim text format (start_ns<TAB>duration_ns per "
    "line; a '# span_ns=N' comment keeps the measured length).\n\n" + SOURCE_HELP))
@click.argument("source")
@click.option("--cpu", type=int, help="which measured CPU, when SOURCE is a bundle of several")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True,
              help="phases of a synthetic spec's sources")
@click.option("-o", "--output", required=True, help="trace file to write (must not exist)")
def export_trace_command(source, cpu, seed, output):
    check_trace_output(output)  # before the work
    traces = load_noise(source, seed=seed)
    if cpu is not None:
        chosen = [t for t in traces if t.cpu == cpu]
        if not chosen:
            measured = ", ".join(str(t.cpu) for t in traces if t.cpu is not None) or "none"
            raise UsageError(f"{source} has no trace of CPU {cpu}", f"measured CPUs: {measured}")
        traces = chosen
    if len(traces) > 1:
        raise UsageError(f"{source} holds {len(traces)} traces (CPUs "
                         f"{', '.join(str(t.cpu) for t in traces)}); a trace file holds one",
                         "choose one with --cpu")
    trace = traces[0]
    path = write_trace_file(trace, output)
    stdout.print(f"{path}: {trace.detours:,} detours of {trace.name}", highlight=False,
                 markup=False)
