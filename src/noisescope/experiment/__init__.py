"""Experiments: workloads x configurations x repetitions, and the bundle they make.

`noisescope bench` is an experiment of one workload in one configuration;
`noisescope run FILE.toml` reads a whole suite from a TOML file (see
`load_experiment`). Every run is kept in the bundle's `runs` table, failed,
timed-out and warm-up runs included (marked, and left out of statistics).

Order: by default the repetitions are interleaved (round r runs every
configuration and workload once) so that drift of the machine over time
spreads evenly over the configurations instead of biasing one of them.
Ctrl-C (or another stopping signal: `interrupts`) ends the current run and
keeps every completed one; from then on the bundle is written whatever comes.

One module per concept, imports one way (model <- results <- running; model <- files):
`model` (what an experiment is; the plan of runs, what was decided and recorded),
`running` (checks, the runs, the probes around them), `results` (the `bench`
bundle) and `files` (experiment files).
"""

from .files import load_experiment
from .model import Configuration, Experiment, ProbePlan, override, plan_steps
from .running import ExperimentOutcome, measure, prepare, run_experiment, run_steps

__all__ = ["Configuration", "Experiment", "ExperimentOutcome", "ProbePlan", "load_experiment",
           "measure", "override", "plan_steps", "prepare", "run_experiment", "run_steps"]
