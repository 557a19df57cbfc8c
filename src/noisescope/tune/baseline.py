"""`noisescope tune`: check -> traced baseline scan of the target CPUs (detour
probe) -> plan -> (--measure, --apply: the trials of measure.py; --apply then
makes the changes that helped again and keeps them) -> bundle of kind `tune`
(the baseline with the plan in `summaries["plan"]`; the trials with their
comparison and verdict, every round's summary; the persistent snippets in
`persistent/`).

The dry run is read-only: the only thing it writes is the bundle; the scan's
own settings (tracing, PM QoS) are restored by it. --measure puts back every
change it makes (measure.Rounds); --apply hands the changes it keeps to a kept
journal (knobs.KnobJournal.keep) once the bundle with their snippets is on
disk, which `restore_applied()` (`tune --restore`) puts back."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .. import interrupts
from ..bundle import Bundle, check_destination
from ..diagnostics import Code, Diagnostic
from ..errors import UsageError, option
from ..host import HostFacts, HostRoot, check_cpus, live_host_facts
from ..knobs import KnobJournal, restore_kept
from ..privileges import is_root
from ..scan import ScanOptions, ScanProgress, scan
from ..system import Finding
from ..tables import Table
from ..units import SECOND, format_cpu_list, format_duration
from .actions import KERNEL_CMDLINE, action_for, kernel_cmdline, snippet_files
from .measure import (
    COMBINED,
    DEFAULT_PAIRS,
    DEFAULT_ROUND_NS,
    HELPS,
    SLICE_NS,
    Rounds,
    TrialResult,
    combination,
    trials_of,
)
from .plan import PlanEntry, make_plan

CAUSE_COLUMNS = {"cpu": np.int32, "start_ns": np.int64, "cause": object, "detail": object,
                 "duration_ns": np.int64}


PLAN, MEASURE, APPLY = "plan", "measure", "apply"  # what tune does after the baseline
PERSISTENT = "persistent"  # the bundle's directory of snippets
ONLY_TOKEN = re.compile(r"^((irq|pid):\d+|[a-z][a-z0-9_.-]*)$")
MAX_PAIRS = 1000


@dataclass(frozen=True)
class TuneOptions:
    cpus: tuple[int, ...]  # the target CPUs
    duration_ns: int = 10 * SECOND  # of the baseline
    label: str | None = None
    mode: str = PLAN
    rounds: int = DEFAULT_PAIRS  # pairs of rounds (baseline, changed) per trial
    round_duration_ns: int | None = None  # None: the baseline's, up to DEFAULT_ROUND_NS
    only: tuple[str, ...] = ()  # try only these entries: irq:N, pid:N or an action's name

    def check(self) -> None:
        if not self.cpus:
            raise UsageError("no target CPUs", f"name them with {option('cpus', '1')}")
        if self.mode not in (PLAN, MEASURE, APPLY):
            raise UsageError(f"unknown tune mode {self.mode!r}", f"use {PLAN}, {MEASURE} or {APPLY}")
        wrong = [token for token in self.only if not ONLY_TOKEN.match(token)]
        if wrong:
            raise UsageError(f"cannot read {option('only')} entry {wrong[0]!r}",
                             f"name entries as irq:N, pid:N or by their action, e.g. "
                             f"{option('only', 'irq:36,pid:1234,vm.stat_interval')}")
        if self.mode == PLAN:
            return
        if self.rounds > MAX_PAIRS:
            raise UsageError(f"{option('rounds')} {self.rounds} is too many",
                             f"give at most {MAX_PAIRS} pairs of rounds")
        if self.rounds < 2:
            raise UsageError(f"{option('rounds')} {self.rounds} is too few: one pair of rounds "
                             "cannot tell a change from the machine's drift",
                             f"use at least {option('rounds', '2')}")
        if self.round_ns < 2 * SLICE_NS:
            raise UsageError(f"rounds of {format_duration(self.round_ns)} are too short (each "
                             f"round is compared in slices of {format_duration(SLICE_NS)})",
                             f"use at least {option('round_duration_ns', format_duration(2 * SLICE_NS))}")

    @property
    def round_ns(self) -> int:
        return self.round_duration_ns or min(self.duration_ns, DEFAULT_ROUND_NS)


@dataclass
class TuneResult:
    bundle: Bundle  # the baseline (kind `tune`), with the plan in summaries["plan"]
    housekeeping: tuple[int, ...]
    plan: list[PlanEntry] = field(default_factory=list)
    trials: list[TrialResult] = field(default_factory=list)
    kept: list[PlanEntry] = field(default_factory=list)  # --apply: the changes left in place
    kept_journal: Path | None = None  # where they are journalled (restore_applied)
    restore_failures: list[str] = field(default_factory=list)


def housekeeping_cpus(targets: tuple[int, ...], facts: HostFacts) -> tuple[int, ...]:
    """The online CPUs left for IRQs and tasks moved off the targets (isolated ones excluded)."""
    keep = tuple(c for c in facts.online if c not in targets and c not in facts.isolated)
    if not keep:
        raise UsageError(
            f"CPUs {format_cpu_list(targets)} leave no housekeeping CPU (online: "
            f"{facts.online_cpus}, isolated: {facts.isolated_cpus or 'none'})",
            f"leave at least one online, non-isolated CPU out of {option('cpus')}")
    return keep


def tune(options: TuneOptions, *, facts: HostFacts | None = None,
         destination: str | os.PathLike[str] | None = None, argv: list[str] | None = None,
         progress: ScanProgress | None = None, say=lambda line: None,
         journal_dir: Path | None = None) -> TuneResult:
    """Measure the baseline of `options.cpus` and plan; with --measure/--apply try
    the plan (`say` hears a line per trial); write the bundle to `destination`
    if given. Refuses (UsageError, before measuring) unknown or offline CPUs,
    targets that leave no housekeeping CPU, and a user who is not root: without
    tracing there is no attribution to plan from. A stopping signal ends the
    rounds; every change is put back and what was measured is written, marked
    incomplete."""
    options.check()
    facts = facts or live_host_facts()
    targets = check_cpus(tuple(sorted(set(options.cpus))), facts)
    keep = housekeeping_cpus(targets, facts)
    if not is_root():
        raise UsageError("tune needs root: its baseline traces the kernel to find what takes "
                         "the CPUs' time (and reads every task's /proc entries)",
                         "run it as root (sudo noisescope tune ...)")
    if destination is not None:
        check_destination(Path(destination))
    baseline = ScanOptions(cpus=targets, duration_ns=options.duration_ns, probes=("detour",),
                           label=options.label)
    with interrupts.keeping(destination, stopping="stopping the tuning rounds (every change "
                                                  "is put back)") as frame:
        frame.measured = False
        # The bundle is written once the plan (and the trials) are in it.
        bundle = scan(baseline, argv=argv, facts=facts, progress=progress, kind="tune")
        frame.measured = True
        plan = plan_bundle(bundle, targets, keep, own_pid=os.getpid())
        bundle.manifest["parameters"]["housekeeping"] = list(keep)
        bundle.manifest["parameters"]["mode"] = options.mode
        bundle.manifest["summaries"]["plan"] = [entry.to_dict() for entry in plan]
        if not bundle.has_table("detour_causes"):
            bundle.manifest["warnings"].append(Diagnostic(
                Code.TRACING_UNAVAILABLE, "no attribution (tracing was unavailable): the plan holds only the "
                              "system settings, no IRQ or task candidates").to_dict())
        result = TuneResult(bundle, keep, plan)
        applied = KnobJournal("tune", journal_dir)
        try:
            if options.mode != PLAN and not interrupts.interrupted():
                rounds = Rounds(targets, keep, options.rounds, lambda: scan(
                    replace(baseline, duration_ns=options.round_ns), facts=facts, kind="tune"),
                    journal_dir=journal_dir, say=say)
                result.trials = try_plan(rounds, trials_of(plan, targets, options.only))
                result.restore_failures = rounds.restore_failures
                if options.mode == APPLY and not rounds.stopped:
                    result.kept = rounds.make(applied, kept_entries(result.trials))
                    if rounds.stopped:  # a signal while they were made: keep nothing
                        result.restore_failures += applied.restore()
                        result.kept = []
                    else:
                        lapsing = let_go_of_held(applied, result)
                        bundle.files = persistent_files(result.kept + lapsing, plan, keep)
                record_trials(bundle, result, options)
            if destination is not None:
                bundle.write(destination)
            result.kept_journal = applied.keep()
        finally:
            result.restore_failures += applied.restore()  # nothing, once kept
    return result


def try_plan(rounds: Rounds, trials) -> list[TrialResult]:
    """Each trial, then the combination of those that helped (while no signal came)."""
    results = [rounds.run(trial) for trial in trials]
    together = combination(trials, [r.trial for r in results if r.verdict == HELPS])
    if together is not None and not rounds.stopped:
        results.append(rounds.run(together))
    return results


def let_go_of_held(applied: KnobJournal, result: TuneResult) -> list[PlanEntry]:
    """The kept changes that last only while this process holds a file open
    (/dev/cpu_dma_latency): they cannot outlive it, so they are let go now,
    left out of `result.kept` and said; only their persistent snippet stays."""
    lapsing = [e for e in result.kept if e.action in applied.held]
    if lapsing:
        applied.revert(*(e.action for e in lapsing))
        result.kept = [e for e in result.kept if e not in lapsing]
        result.bundle.manifest["warnings"].append(Diagnostic(
            Code.NOT_KEPT, f"{', '.join(e.source for e in lapsing)}: helped, but lasts only while "
            f"a process holds its request open, so it ends with tune; its persistent snippet "
            f"is in the bundle").to_dict())
    return lapsing


def kept_entries(results: list[TrialResult]) -> list[PlanEntry]:
    """What --apply keeps: the actions that helped; if their combination was
    measured and did not help, only the first of them (the largest share)."""
    helped = [r for r in results if r.verdict == HELPS and r.trial.name != COMBINED]
    together = next((r for r in results if r.trial.name == COMBINED), None)
    if together is not None and together.verdict != HELPS:
        helped = helped[:1]
    return [e for r in helped for e in r.trial.entries]


def persistent_files(kept: list[PlanEntry], plan: list[PlanEntry],
                     housekeeping: tuple[int, ...]) -> dict[str, str]:
    """The bundle's persistent/ snippets: what makes the kept changes last, and
    the kernel command line the plan advises."""
    lines = [action_for(e).persist(e, housekeeping) for e in kept]
    cmdline = kernel_cmdline(plan)
    if cmdline is not None:  # after any kept setting's own line there (clocksource=tsc)
        lines.append((KERNEL_CMDLINE, cmdline))
    return {f"{PERSISTENT}/{name}": text for name, text in snippet_files(lines).items()}


def record_trials(bundle: Bundle, result: TuneResult, options: TuneOptions) -> None:
    """The trials into the bundle: their verdicts with their comparison, and
    their rounds as summaries; per-round causes and detour lengths as tables."""
    kept = {e.source for e in result.kept}
    summaries, parameters = bundle.manifest["summaries"], bundle.manifest["parameters"]
    parameters.update(rounds=options.rounds, round_duration_ns=options.round_ns,
                      slice_ns=SLICE_NS, only=list(options.only))
    summaries["trials"] = [r.row(kept=(all(e.source in kept for e in r.trial.entries)
                                       if options.mode == APPLY else None))
                           for r in result.trials]
    summaries["rounds"] = [row for r in result.trials for row in r.rounds]
    for name, rows in (("round_causes", [row for r in result.trials for row in r.causes]),
                       ("round_histogram", [row for r in result.trials for row in r.histogram])):
        if rows:
            bundle.add_table(name, Table.from_rows(rows))
    if bundle.files:
        summaries["persistent"] = [{"file": name} for name in bundle.files]
    stopped = [r.trial.name for r in result.trials if "interrupted" in r.status]
    if interrupts.interrupted():
        during = ", ".join(stopped) or "between them"
        bundle.manifest["complete"] = False
        bundle.manifest["warnings"].append(Diagnostic(
            Code.INTERRUPTED, f"interrupted during the trials ({during}): what was measured "
                              f"is kept, every change was put back").to_dict())
    for failure in result.restore_failures:
        bundle.manifest["warnings"].append(Diagnostic(
            Code.RESTORE_FAILED, f"could not put back {failure}").to_dict())


def restore_applied(journal_dir: Path | None = None) -> tuple[list[str], list[str]]:
    """Put back what `tune --apply` kept: ('path = value' lines, failures)."""
    if not is_root():
        raise UsageError("tune --restore needs root (it writes IRQ and task affinities)",
                         "run it as root (sudo noisescope tune --restore)")
    return restore_kept(journal_dir)


def plan_bundle(bundle: Bundle, targets: tuple[int, ...], housekeeping: tuple[int, ...],
                root: str = "/", own_pid: int | None = None) -> list[PlanEntry]:
    """The plan from a traced bundle of this machine (or of the tree under `root`);
    `own_pid`: the process that measured it (not a candidate)."""
    causes = (bundle.table("detour_causes") if bundle.has_table("detour_causes")
              else Table({name: np.array([], dtype) for name, dtype in CAUSE_COLUMNS.items()}))
    switches = bundle.table("sched_switch") if bundle.has_table("sched_switch") else None
    measured = {s["cpu"]: s["measured_ns"] for s in bundle.summaries.get("detour", [])}
    findings = [Finding.from_dict(f) for f in bundle.manifest.get("system", [])]
    return make_plan(causes, switches, measured, targets, housekeeping, HostRoot(root),
                     findings, own_pid)
