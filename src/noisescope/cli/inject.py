"""noisescope inject: put known noise on a CPU, to disturb an experiment on purpose."""

from __future__ import annotations

import click

from ..probes.inject import inject
from ..probes.injection import MODES, Injection
from ..units import format_duration, format_rate, parse_noise, parse_positive_duration
from .common import EXIT_INTERRUPTED, stderr, stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope inject --cpu 1 --rate 1kHz --length 20us --for 30s
  noisescope inject --cpu 3 --rate 10Hz --length 2ms --mode thread   # until Ctrl-C
"""


@click.command(epilog=EXAMPLES)
@click.option("--cpu", type=int, required=True, help="CPU to disturb")
@click.option("--rate", default="1kHz", show_default=True, help="injections per second")
@click.option("--length", default="20us", show_default=True, help="busy time per injection")
@click.option("--mode", type=click.Choice(MODES), default="thread", show_default=True,
              help="thread: a SCHED_FIFO thread wakes and spins; signal: a timer signal's "
                   "handler spins")
@click.option("--for", "duration", help="how long, on the clock, however far the injections "
              "fall behind their rate (default: until Ctrl-C)")
def inject_command(cpu, rate, length, mode, duration):
    """Inject periodic busy-wait noise of known rate and length on one CPU."""
    injection = Injection(cpu, *parse_noise(rate, length, rate_what="--rate",
                                            length_what="--length"), mode)
    duration_ns = parse_positive_duration(duration, what="--for") if duration else None
    until = f" for {format_duration(duration_ns)}" if duration_ns else " until Ctrl-C"
    outcome = inject(injection, duration_ns,
                     on_start=lambda: stderr.print(f"injecting {injection.describe()}{until}"))
    stdout.print(f"{outcome.count} injections ({format_rate(outcome.achieved_rate_hz)}), "
                 f"mean length "
                 f"{format_duration(outcome.mean_length_ns)}, max "
                 f"{format_duration(outcome.max_length_ns)}"
                 + ("" if outcome.fifo else "; at normal priority (SCHED_FIFO not permitted)"))
    return EXIT_INTERRUPTED if outcome.interrupted else 0
