"""noisescope show: print a stored bundle's summary again."""

from __future__ import annotations

import click

from ..bundle import load
from ..render.terminal import print_bundle
from .common import stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope show noisescope-node17-20261130T063836Z
"""


@click.command(epilog=EXAMPLES)
@click.argument("bundle_path", metavar="BUNDLE")
def show_command(bundle_path):
    """Print the summary of a stored result bundle."""
    print_bundle(load(bundle_path), stdout)
