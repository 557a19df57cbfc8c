"""noisescope report: one self-contained HTML file (or Markdown, or PNGs) for bundles."""

from __future__ import annotations

import click

from ..errors import UsageError
from .common import load_all, stderr

EXAMPLES = """
\b
EXAMPLES
  noisescope report noisescope-node17-20261130T063836Z            # -> report.html
  noisescope report vanilla/ tuned/ -o compare.html              # side by side
  noisescope report tuned/ --format md -o tuned.md               # + tuned_files/*.png
  noisescope report tuned/ -o tuned/report.html --force          # draw a bundle's report again
  noisescope report tuned/ --format png -o figures/
  noisescope report results/vanilla-vm/ -o run.html              # a `run`: probes and runs
  noisescope report fleet/ -o fleet.html                         # cluster scan: ranks side by side
"""
# render.report (matplotlib) is imported only when a report is written: this module
# is loaded by every command, `scan` included.
DEFAULT_OUTPUT = {"html": "report.html", "md": "report.md", "png": "report-figures"}
FORMATS = tuple(DEFAULT_OUTPUT)


@click.command(epilog=EXAMPLES)
@click.argument("bundle_paths", metavar="BUNDLE...", nargs=-1, required=True)
@click.option("-o", "--output", help="file to write (a directory with --format png) "
              "[default: report.html, report.md or report-figures/]")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="html", show_default=True,
              help="html: one self-contained file; md: Markdown with PNG files beside it; "
                   "png: the figures only")
@click.option("--force", is_flag=True, help="replace an existing output (never a file inside a "
              "bundle other than its report.html)")
@click.option("-q", "--quiet", is_flag=True, help="do not print where the report went")
def report_command(bundle_paths, output, fmt, force, quiet):
    """Write a report (summary tables, plots, host facts, system check,
    warnings) for one bundle, or a comparison of several. A directory written
    by `run` stands for the bundles in it; a fleet (cluster scan) brings its
    ranks' own bundles. An existing output is left alone unless --force."""
    from ..render.report import check_output, write_report

    destination = output or DEFAULT_OUTPUT[fmt]
    check_output(destination, fmt, replace=force)
    bundles = load_all(bundle_paths)  # every bundle checked before writing
    try:
        written = write_report(bundles, destination, fmt, replace=force)
    except OSError as error:  # missing directory, a directory in the way, no permission
        raise UsageError(f"cannot write {destination}: {error.strerror}",
                         "choose another -o (its directory must exist)") from None
    if not quiet:
        stderr.print(f"report: {written}", highlight=False)
