"""noisescope timerlat: timer wakeup latency per CPU, the cyclictest way."""

from __future__ import annotations

import click

from ..bundle import default_output
from ..host import live_host_facts
from ..probes.timerlat import DEFAULT_HISTOGRAM_NS
from ..scan import DEFAULT_RT_PRIORITY
from ..timerlat import TimerlatOptions, timerlat
from ..trace.wakeups import DEFAULT_THRESHOLD_NS
from ..units import parse_cpu_list, parse_duration, parse_positive_duration
from .common import Progress, report

EXAMPLES = """
\b
EXAMPLES
  noisescope timerlat                                  # all CPUs, 1 ms interval, 10 s, FIFO 95
  noisescope timerlat --cpus 1 --interval 200us --loops 100000 --histogram 100
  noisescope timerlat --priority 0 --duration 1m -o normal-prio   # SCHED_OTHER
  noisescope timerlat --dma-latency 0 --label tuned    # keep CPUs out of deep idle, as cyclictest
  noisescope timerlat --cpus 3 --trace-threshold 20us  # explain every wakeup 20 us late or more
  noisescope explain BUNDLE --trace-threshold 10us     # ... or later, from the stored trace
"""


@click.command(epilog=EXAMPLES)
@click.option("--cpus", help="CPUs to measure, e.g. 0-3,8 (default: all online, allowed CPUs)")
@click.option("-i", "--interval", default="1ms", show_default=True,
              help="wakeup period (a plain number is in us, as cyclictest -i)")
@click.option("-l", "--loops", type=int, help="deadlines per CPU (default: --duration)")
@click.option("-D", "--duration", help="how long to measure (default 10s)")
@click.option("-p", "--priority", type=int, default=DEFAULT_RT_PRIORITY, show_default=True,
              help="SCHED_FIFO priority 1-99 (0: normal scheduling); without the privilege the "
                   "run uses normal scheduling and says so")
@click.option("-h", "--histogram", "histogram_us", type=int,
              default=DEFAULT_HISTOGRAM_NS // 1000, show_default=True,
              help="histogram limit in us (1 us buckets; later wakeups are counted as overflow)")
@click.option("--series/--no-series", default=True, show_default=True,
              help="store every latency with its wakeup time, not only the histogram")
@click.option("--dma-latency", "dma_latency", type=int, metavar="US",
              help="hold /dev/cpu_dma_latency at US while measuring (cyclictest does 0)")
@click.option("--trace-threshold", default=f"{DEFAULT_THRESHOLD_NS // 1000}us", show_default=True,
              help="explain every wakeup at least this late: which IRQ, softirq or thread held "
                   "the CPU (a plain number is in us)")
@click.option("--no-trace", is_flag=True, help="do not record kernel events (nothing is explained); "
              "tracing is on by default when tracefs is writable")
@click.option("--label", help="configuration label stored in the bundle, e.g. tuned-kernel")
@click.option("-o", "--output", help="bundle directory to write (must not exist)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
@click.help_option("--help")
def timerlat_command(cpus, interval, loops, duration, priority, histogram_us, series,
                     dma_latency, trace_threshold, no_trace, label, output, quiet):
    """Measure timer wakeup latency (wakeup - deadline) on every CPU at once.

    Like cyclictest, a thread per CPU sleeps to absolute deadlines; unlike
    cyclictest, deadlines it oversleeps entirely are counted as missed. As
    root, kernel events are traced meanwhile and every wakeup at least
    --trace-threshold late is explained."""
    options = TimerlatOptions(
        cpus=parse_cpu_list(cpus) if cpus else None,
        interval_ns=parse_positive_duration(interval, what="--interval", default_unit="us"),
        loops=loops,
        duration_ns=parse_positive_duration(duration, what="--duration") if duration else None,
        priority=priority,
        histogram_ns=histogram_us * 1000,
        keep_series=series,
        dma_latency_us=dma_latency,
        label=label,
        trace=not no_trace,
        trace_threshold_ns=parse_duration(trace_threshold, what="--trace-threshold", default_unit="us"),
    )
    facts = live_host_facts()
    destination = output or default_output(facts)
    progress = Progress(options.measured_ns, enabled=not quiet)
    return report(timerlat(options, facts=facts, progress=progress, destination=destination))
