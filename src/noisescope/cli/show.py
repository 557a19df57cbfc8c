"""noisescope show: print a stored bundle's summary again."""

from __future__ import annotations

import click

from ..render.terminal import print_bundle
from .common import load_all, stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope show noisescope-node17-20261130T063836Z
  noisescope show results/vanilla-vm/        # a `run`: each of its bundles in turn
"""


@click.command(epilog=EXAMPLES)
@click.argument("bundle_path", metavar="BUNDLE")
def show_command(bundle_path):
    """Print the summary of a stored result bundle (or of each bundle in a
    directory written by `run`)."""
    bundles = load_all((bundle_path,))
    for i, bundle in enumerate(bundles):
        if len(bundles) > 1:
            stdout.print(("\n" if i else "") + f"== {bundle.path} ==", highlight=False, markup=False)
        print_bundle(bundle, stdout)
