"""noisescope import: read a cyclictest, oslat, sysjitter or rtla output file into a bundle."""

from __future__ import annotations

from pathlib import Path

import click

from ..imports import TOOLS, import_file
from ..units import parse_cpu_list
from .common import report

EXAMPLES = """
\b
EXAMPLES
  cyclictest -p 90 -m -a 1 -t 1 -i 200 -h 100 -q -l 100000 > ct.txt
  noisescope import cyclictest ct.txt --label vm-direct-irq --cpus 1
  noisescope import cyclictest results.json         # cyclictest --json=results.json
  noisescope import oslat oslat.json --label baseline
  noisescope import sysjitter sysjitter.txt -o old-run
  rtla timerlat hist -c 0-3 -d 1m > tl.txt
  noisescope import rtla tl.txt --label rt-kernel
  noisescope import rtla osnoise-top.txt            # rtla osnoise top, -q or live
"""


@click.command(epilog=EXAMPLES)
@click.argument("tool", type=click.Choice(TOOLS))
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--label", help="configuration label stored in the bundle, e.g. vanilla-vm")
@click.option("--cpus", help="CPUs of the tool's threads in thread order, where the file does "
              "not say them (cyclictest's text output), e.g. 0-3")
@click.option("-o", "--output", help="bundle directory to write (default: noisescope-TOOL-FILE)")
def import_command(tool, file, label, cpus, output):
    """Import another tool's results into a bundle that show, compare and
    report read like noisescope's own.

    cyclictest: the text output with -h (with or without -q), or --json.
    oslat: --json or its text summary. sysjitter: its summary output.
    rtla: the text of osnoise top, timerlat top (-q, or live: the last
    table), timerlat hist or osnoise hist."""
    destination = output or f"noisescope-{tool}-{file.stem}"
    return report(import_file(tool, file, label=label, destination=destination,
                              cpus=parse_cpu_list(cpus) if cpus else None))
