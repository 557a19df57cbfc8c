"""noisescope run: a whole experiment file (workloads x configurations x runs)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import click

from ..experiment import load_experiment, override, run_experiment
from ..host import live_host_facts
from ..render.terminal import print_bundle
from .common import (
    EXIT_INTERRUPTED,
    Progress,
    RunProgress,
    occupancy_choice,
    occupancy_options,
    stderr,
    stdout,
)

EXAMPLES = """
\b
EXAMPLES
  noisescope run suite.toml --label vanilla-vm
  noisescope run suite.toml --label direct-irq -o results/direct-irq
  noisescope run suite.toml --label try --runs 2 --warmup 0     # a quick check of the file
  noisescope run smt.toml --label nosmt --configurations baseline,pinned
  noisescope compare results/*/ --format markdown
"""


@click.command(epilog=EXAMPLES)
@click.argument("experiment_file", metavar="EXPERIMENT.toml")
@click.option("--label", help="label of this environment, e.g. vanilla-vm, nosmt")
@click.option("-o", "--output", help="directory for the bundles (must not exist)")
@click.option("--runs", type=int, help="override the file's runs")
@click.option("--warmup", type=int, help="override the file's warm-up runs")
@click.option("--configurations", help="run only these configurations (comma-separated names)")
@occupancy_options
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
def run_command(experiment_file, label, output, runs, warmup, configurations, occupancy, siblings, quiet):
    """Run an experiment file: probes before, every workload in every configuration
    (repeated, interleaved), probes after. Writes one directory of bundles."""
    experiment = override(load_experiment(experiment_file), runs=runs, warmup=warmup,
                          configurations=configurations.split(",") if configurations else None,
                          occupancy=occupancy_choice(occupancy, siblings))
    facts = live_host_facts()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = experiment.name or Path(experiment_file).stem
    destination = output or f"{name}-{label or facts.hostname or 'host'}-{stamp}"
    outcome = run_experiment(
        experiment, destination, label=label, facts=facts,
        progress=None if quiet else RunProgress(),
        probe_progress=None if quiet else Progress(experiment.probes.duration_ns))
    for when in ("before", "after"):
        if when in outcome.probes:
            stdout.print(f"probes {when}: {outcome.probes[when].path}", highlight=False)
    if outcome.runs is not None:
        print_bundle(outcome.runs, stdout)
    stderr.print(f"bundles in {outcome.directory}" + ("" if outcome.complete else
                                                      " (incomplete)"))
    return 0 if outcome.complete else EXIT_INTERRUPTED
