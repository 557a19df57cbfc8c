"""noisescope compare: configurations side by side, with honest statistics."""

from __future__ import annotations

import click

from ..analysis.compare import ALPHA, compare
from ..render.compare import FORMATS, markdown, print_comparison, print_notes, to_csv, to_json
from .common import load_all, stderr, stdout

# Beyond this the bootstrap's own sampling error is far below the digits shown,
# and a group's resampled means take 8 MB.
MAX_RESAMPLES = 1_000_000

EXAMPLES = """
\b
EXAMPLES
  noisescope compare smt-on/ nosmt/ core-sched/ --baseline smt-on
  noisescope compare results/*/ --format markdown > table.md
  noisescope compare experiment-dir/ --metrics wall_ns,user_ns,sys_ns --format csv
  noisescope compare scan-a1 scan-a2 scan-b1 scan-b2 --per-cpu   # scans: same label = repetitions
  noisescope compare fleet-before/ fleet-after/ --per-node        # cluster scans, node by node
  noisescope compare fleet/ --by-node --baseline fleet/node001    # one fleet: node against node
"""


@click.command(epilog=EXAMPLES)
@click.argument("bundles", nargs=-1, required=True, metavar="BUNDLE...")
@click.option("--baseline", help="configuration the others are compared with (default: the "
              "first); a label, or label/configuration for experiments")
@click.option("--metrics", help="comma-separated metrics, or 'all' (default: wall, user, sys, "
              "system context switches/s and the workloads' own metrics; noise %, detours/s, "
              "p99, max for scans)")
@click.option("--per-cpu", is_flag=True, help="compare per-CPU summaries CPU by CPU instead of "
              "their mean over CPUs")
@click.option("--per-node", is_flag=True, help="fleet bundles: a row per node (default: the "
              "nodes are the units of their fleet)")
@click.option("--by-node", is_flag=True, help="fleet bundles: every node against the others "
              "(each node a configuration, its CPUs the units; beyond 40 nodes the terminal "
              "shows their distribution and those standing out, csv and json every node)")
@click.option("--format", "output_format", type=click.Choice(FORMATS), default="terminal",
              show_default=True)
@click.option("--alpha", default=ALPHA, show_default=True,
              help="significance level for the Benjamini-Hochberg adjusted p-values (the "
              "intervals are at 1 - alpha, adjusted for the number of comparisons)")
def compare_command(bundles, baseline, metrics, per_cpu, per_node, by_node, output_format, alpha):
    """Compare bench, run and scan bundles: per workload, metric and configuration,
    the change vs a baseline (Hodges-Lehmann) with the Mann-Whitney test's confidence
    interval and a corrected p-value; a verdict only where the interval excludes 0."""
    loaded = load_all(bundles)
    comparison = compare(loaded, baseline=baseline,
                         metrics=metrics.split(",") if metrics else None, per_cpu=per_cpu,
                         alpha=alpha, per_node=per_node, by_node=by_node)
    if output_format == "terminal":
        print_comparison(comparison, stdout)
        return 0
    text = {"markdown": markdown, "csv": to_csv, "json": to_json}[output_format](comparison)
    click.echo(text, nl=False)
    if output_format != "markdown":
        print_notes(comparison, stderr)
    return 0
