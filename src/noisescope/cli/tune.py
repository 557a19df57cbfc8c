"""noisescope tune: a traced baseline of the target CPUs and the plan of what to
change; with --measure each change tried in interleaved rounds and put back,
with --apply the helpful ones kept; --restore puts back what --apply kept."""

from __future__ import annotations

import click

from .. import interrupts
from ..bundle import default_output
from ..errors import UsageError, option
from ..host import live_host_facts
from ..render.terminal import print_warnings
from ..render.tune import plan_table, trials_table
from ..tune import TuneOptions, restore_applied, tune
from ..tune.baseline import APPLY, MEASURE, PLAN
from ..tune.measure import DEFAULT_PAIRS
from ..units import format_cpu_list, format_duration, parse_count, parse_cpu_list, parse_positive_duration
from .common import EXIT_INTERRUPTED, Progress, stderr, stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope tune --cpus 1                 # 10 s traced baseline of CPU 1, then the plan
  noisescope tune --cpus 2-7 --duration 30s -o node17-plan   # and keep the baseline with it
  noisescope tune --cpus 1 --measure       # try each change: 3 pairs of 5 s rounds, put back
  noisescope tune --cpus 1 --apply -o node17-tuned   # keep what helped, snippets in persistent/
  noisescope tune --restore                # put back what --apply kept
"""


@click.command(epilog=EXAMPLES)
@click.option("--cpus", help="the CPUs to tune, e.g. 2-7 (at least one online CPU must stay "
              "out of them for housekeeping)")
@click.option("--measure", is_flag=True, help="try each runtime change of the "
              "plan in interleaved rounds (baseline, changed, ...), then the helpful ones "
              "together; everything is put back")
@click.option("--apply", "apply_", is_flag=True, help="measure, then make the helpful "
              "changes again and keep them (until tune --restore); the bundle's persistent/ "
              "holds what makes them last across boots")
@click.option("--restore", is_flag=True, help="put back what --apply kept")
@click.option("--duration", default="10s", show_default=True, help="length of the baseline")
@click.option("--rounds", default=str(DEFAULT_PAIRS), show_default=True,
              help="pairs of rounds (baseline, changed) per change tried")
@click.option("--round-duration", help="length of each round [default: --duration, at most 5s]")
@click.option("--only", help="with --measure/--apply, try only these candidates: irq:N, "
              "pid:N or an action's name, comma-separated (e.g. irq:36,pid:1234)")
@click.option("--label", help="configuration label stored in the bundle")
@click.option("-o", "--output", help="bundle directory to write the baseline and the plan to "
              "(must not exist; --measure and --apply: default a new directory named for the "
              "host and time)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on stderr")
def tune_command(cpus, measure, apply_, restore, duration, rounds, round_duration, only, label,
                 output, quiet):
    """Measure a traced baseline of the target CPUs and print the plan of
    candidate actions, each with its evidence and its share of the CPU's lost
    time: device IRQ affinity, process and kernel-thread affinity, the unbound
    workqueue cpumask, per-CPU kernel threads that cannot move, the system
    settings that apply (watchdogs, RT throttling, THP, idle states, ...), and
    boot parameters (nohz_full, rcu_nocbs, isolcpus), advised only.

    By default a dry run: nothing on the machine is changed. --measure tries
    every runtime change in interleaved rounds and compares them (noise %,
    detours/s, p99, max and the targeted cause's own share) with compare's
    statistics; every change is journalled in /run/noisescope before it is
    made and put back after its round, on Ctrl-C and SIGTERM, and by
    noisescope cleanup after a SIGKILL. Boot parameters are never applied.
    Needs root (the baseline is traced)."""
    chosen = [name for name, given in (("--measure", measure), ("--apply", apply_),
                                       ("--restore", restore)) if given]
    if len(chosen) > 1:  # --apply measures already; --restore undoes what it keeps
        raise UsageError(f"{' and '.join(chosen)} cannot be given together",
                         "choose one of --measure (try, put back), --apply (try, keep what "
                         "helps) or --restore")
    if restore:
        return _restore(cpus)
    if cpus is None:
        raise UsageError("no target CPUs", f"name them with {option('cpus', '1')}")
    mode = MEASURE if measure else APPLY if apply_ else PLAN
    options = TuneOptions(cpus=parse_cpu_list(cpus),
                          duration_ns=parse_positive_duration(duration, what="--duration"),
                          label=label, mode=mode, rounds=parse_count(rounds, what="--rounds"),
                          round_duration_ns=parse_positive_duration(
                              round_duration, what="--round-duration") if round_duration else None,
                          only=tuple(t.strip() for t in (only or "").split(",") if t.strip()))
    if output is None and mode != PLAN:
        output = default_output(live_host_facts())
    say = (lambda line: None) if quiet else (
        lambda line: stderr.print(f"tune: {line}", highlight=False, markup=False))
    result = tune(options, destination=output,
                  progress=Progress(options.duration_ns, enabled=not quiet), say=say)
    bundle = result.bundle
    for summary in bundle.summaries.get("detour", []):
        stdout.print(f"baseline CPU {summary['cpu']}: {format_duration(summary['measured_ns'])} "
                     f"measured, {summary['detours']:,} detours, {summary['noise_pct']:.3f}% of "
                     f"the time lost", highlight=False, markup=False)
    stdout.print(f"housekeeping CPUs: {format_cpu_list(result.housekeeping)}", highlight=False)
    table = plan_table(bundle.summaries["plan"])
    stdout.print()
    stdout.print(table if table is not None else "nothing to propose: no candidate found")
    if mode == PLAN:
        stdout.print("dry run: nothing was changed", highlight=False)
    else:
        _print_trials(result, mode)
    print_warnings(bundle, stdout)
    if output:
        stderr.print(f"bundle: {bundle.path}" + ("" if bundle.complete else " (incomplete)"),
                     highlight=False)
    return 0 if bundle.complete else EXIT_INTERRUPTED


def _print_trials(result, mode: str) -> None:
    table = trials_table(result.bundle.summaries.get("trials", []))
    stdout.print()
    stdout.print(table if table is not None else
                 "nothing to try: no runtime change noisescope can make in the plan")
    say = lambda line: stdout.print(line, highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    for trial in result.trials:
        for why in trial.not_applied:
            say(f"not applied: {why}")
    if result.restore_failures:
        say("could NOT put back: " + "; ".join(result.restore_failures)
            + " (noisescope cleanup retries from the journal)")
    if mode == MEASURE:
        if not result.restore_failures:
            say("every change was put back")
        return
    if result.kept:
        say("kept: " + ", ".join(e.source for e in result.kept)
            + f" (journal {result.kept_journal}); put back with: noisescope tune --restore")
        say("what makes them last across boots: persistent/ in the bundle")
    else:
        why = "interrupted" if interrupts.interrupted() else "no change helped"
        say(f"kept nothing ({why}); everything was put back")


def _restore(cpus) -> int:
    if cpus is not None:
        raise UsageError("--restore puts back every change --apply kept, on all CPUs",
                         f"leave out {option('cpus')}")
    restored, failed = restore_applied()
    for line in restored:
        stdout.print(f"restored {line}", highlight=False, markup=False, soft_wrap=True)
    for line in failed:
        stdout.print(f"could not restore {line}", highlight=False, markup=False, soft_wrap=True)
    if not (restored or failed):
        stdout.print("nothing to restore: no change kept by tune --apply")
    return 1 if failed else 0
