"""noisescope scan: the main job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from .. import interrupts
from ..bundle import default_output
from ..host import live_host_facts
from ..probes import DEFAULT_PROBES, PROBES, Injection
from ..scan import DEFAULT_RT_PRIORITY, ScanOptions, scan
from ..trace.osnoise import MODES as OSNOISE_MODES
from ..trace.scanning import TraceOptions
from ..trace.session import EVENTS_PER_SECOND
from ..trace.wakeups import DEFAULT_THRESHOLD_NS
from ..units import parse_cpu_list, parse_duration, parse_positive_duration, parse_size_kib
from .common import Progress, report, stderr

REPORT_FILE = "report.html"

EXAMPLES = """
\b
EXAMPLES
  noisescope scan                          # all CPUs, 10 s per probe, bundle in ./noisescope-HOST-TIME
  noisescope scan --cpus 2-3 --duration 60s --rt -o tuned
  noisescope scan --probes detour --threshold 500ns
  noisescope scan --probes detour,timerlat --interval 200us --rt
  noisescope scan --inject 1kHz:20us@cpu1  # add known noise to check the tool finds it
  noisescope scan --probes detour --inject 1kHz:20us@cpu1/thread   # ...and that it names it
  noisescope scan --no-trace               # without kernel tracing (no explanation)
  noisescope scan --probes detour --trace-cost 6s   # and what tracing itself costs (6 pairs)
  noisescope scan --no-report -q           # tables only; no report.html in the bundle
"""


def parse_probes(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def measurement_options(command):
    """The options of what to measure and how, shared with `cluster scan`."""
    decorators = [
        click.option("--cpus", help="CPUs to measure, e.g. 0-3,8 (default: every online CPU "
                     "this process may use, isolated ones included, or those taskset chose)"),
        click.option("--duration", default="10s", show_default=True,
                     help="measuring time per probe"),
        click.option("--probes", "probe_list", default=",".join(DEFAULT_PROBES),
                     show_default=True, help=f"comma-separated probes to run, one after the "
                     f"other ({','.join(PROBES)})"),
        click.option("--threshold", default="1us", show_default=True,
                     help="shortest gap counted as a detour"),
        click.option("--rt", is_flag=True, help="sample at SCHED_FIFO priority (root); measures "
                     "in windows that leave the kernel time and stay clear of RT throttling"),
        click.option("--priority", default=DEFAULT_RT_PRIORITY, show_default=True,
                     help="SCHED_FIFO priority with --rt (1-99)"),
        click.option("--runtime", help="measuring window length (default 1s, or 900ms with --rt)"),
        click.option("--period", help="window period (default 1s)"),
        click.option("--quantum", default="1ms", show_default=True,
                     help="FTQ quantum and FWQ work per sample"),
        click.option("--interval", default="1ms", show_default=True,
                     help="timerlat wakeup period"),
        click.option("--max-detours", type=int, help="detours stored per CPU (more are counted, "
                     "and kept in the histogram)"),
        click.option("--inject", "injections", multiple=True, metavar="RATE:LENGTH@cpuN[/MODE]",
                     help="inject known noise while measuring, e.g. 1kHz:20us@cpu1 (repeatable)"),
        click.option("--label", help="configuration label stored in the bundle, e.g. "
                     "tuned-kernel"),
        click.option("--no-trace", is_flag=True, help="do not record kernel events (detours "
                     "stay unexplained); tracing is on by default when tracefs is writable"),
        click.option("--trace-buffer", metavar="SIZE", help="trace buffer per measured CPU, e.g. "
                     f"64M (default: sized for {EVENTS_PER_SECOND:,} events/s over one probe); "
                     "all of them together at most a quarter of the available memory"),
        click.option("--trace-cost", metavar="DURATION", help="first measure tracing's own "
                     "cost for DURATION: 6 interleaved pairs of an untraced and a traced detour "
                     "run, reported as the median difference with its 97% interval (default: "
                     "not measured; bench/trace_cost.py measures it at length)"),
        click.option("--osnoise", type=click.Choice(OSNOISE_MODES), default="auto",
                     show_default=True, help="also record the kernel osnoise tracer's noise "
                     "events (its hooks, without its workload): auto = where the kernel lacks "
                     "entry/exit events they stand in for"),
        click.option("--trace-threshold", default=f"{DEFAULT_THRESHOLD_NS // 1000}us",
                     show_default=True, help="timerlat: explain every wakeup at least this late"),
    ]
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


def scan_options(cpus, duration, probe_list, threshold, rt, priority, runtime, period, quantum,
                 interval, max_detours, injections, label, no_trace, trace_buffer,
                 trace_cost, trace_threshold, osnoise) -> ScanOptions:
    return ScanOptions(
        cpus=parse_cpu_list(cpus) if cpus else None,
        duration_ns=parse_positive_duration(duration, what="--duration"),
        probes=parse_probes(probe_list),
        threshold_ns=parse_positive_duration(threshold, what="--threshold", default_unit="ns"),
        rt=rt,
        priority=priority,
        runtime_ns=parse_positive_duration(runtime, what="--runtime") if runtime else None,
        period_ns=parse_positive_duration(period, what="--period") if period else None,
        quantum_ns=parse_positive_duration(quantum, what="--quantum", default_unit="ns"),
        interval_ns=parse_positive_duration(interval, what="--interval", default_unit="us"),
        max_detours=_positive(max_detours, "--max-detours"),
        injections=tuple(Injection.parse(spec) for spec in injections),
        label=label,
        trace=TraceOptions(
            enabled=not no_trace,
            buffer_kb=parse_size_kib(trace_buffer, what="--trace-buffer") if trace_buffer else None,
            cost_ns=_not_negative(parse_duration(trace_cost, what="--trace-cost"),
                                  "--trace-cost") if trace_cost else 0,
            wakeup_threshold_ns=parse_duration(trace_threshold, what="--trace-threshold",
                                               default_unit="us"),
            osnoise=osnoise),
    )


@click.command(epilog=EXAMPLES)
@measurement_options
@click.option("-o", "--output", help="bundle directory to write (must not exist)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@click.option("--report/--no-report", "write_report", default=True, show_default=True,
              help="write report.html (plots, tables, system check) into the bundle")
def scan_command(output, quiet, write_report, **measurement):
    """Measure OS noise on every CPU at once and write a result bundle."""
    options = scan_options(**measurement)
    facts = live_host_facts()
    destination = output or default_output(facts)
    progress = Progress(options.duration_ns, enabled=not quiet)
    bundle = scan(options, facts=facts, progress=progress, destination=destination)
    status = report(bundle)
    if write_report:
        write_report_beside(bundle.path, quiet)
    return status


def _not_negative(value: int, name: str) -> int:
    from ..errors import UsageError

    if value < 0:
        raise UsageError(f"{name} must not be negative", f"e.g. {name} 2s, or 0 to skip")
    return value


def write_report_beside(bundle_path: Path, quiet: bool) -> None:
    """report.html into the bundle, drawn by a child process: matplotlib and the
    loaded tables never add to the measuring process's memory. A failure leaves
    the measurement as it is and says so; after a stopping signal it is not drawn."""
    target = bundle_path / REPORT_FILE
    later = f"the bundle is written; to draw it: noisescope report {bundle_path}"
    if interrupts.interrupted():
        stderr.print(f"report.html not written (interrupted); {later}", highlight=False,
                     markup=False)
        return
    try:
        child = subprocess.run([sys.executable, "-m", "noisescope", "report", str(bundle_path),
                                "-o", str(target), "--quiet"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except KeyboardInterrupt:  # the child got the signal too (or is ended by run())
        stderr.print(f"report.html not written (interrupted); {later}", highlight=False,
                     markup=False)
        raise
    if child.returncode != 0:
        reason = (child.stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
        stderr.print(f"warning: the report was not written ({reason}); {later}", style="yellow",
                     highlight=False, markup=False)
    elif not quiet:
        stderr.print(f"report: {target}", highlight=False)


def _positive(value: int | None, name: str) -> int | None:
    from ..errors import UsageError

    if value is not None and value <= 0:
        raise UsageError(f"{name} must be greater than zero", f"e.g. {name} 100000")
    return value

