"""`noisescope tune --measure`: every candidate action of the plan tried in
interleaved rounds, judged with `compare`'s statistics.

A trial is one action (or, at the end, the combination of those that
helped). Its rounds alternate: baseline, changed, baseline, changed, ...
(`pairs` of them); each round is a short traced detour scan of the target
CPUs (`measure_round`). The change is made through a KnobJournal (on disk
before the change) just before each changed round and put back right after
it, also when anything goes wrong (the journal's `with`), so between rounds
and after the last the machine is as it was.

The statistics: each round is cut into slices of SLICE_NS of measured time,
and the slices of each phase are the units `analysis.compare` compares
(Mann-Whitney, Hodges-Lehmann change with its interval, Benjamini-Hochberg
over the metrics and CPUs of the trial) on noise %, detours/s, p99 and max,
and on the targeted cause's own lost time (`targeted_pct`: the IRQ's or the
task's time on the CPU, matched as the plan matched it, in % of the measured
time). Slices of one round are not independent (a noise source that comes
and goes for seconds spans several), so a change counts only where every
pair of rounds moved the same way too (`pairs_agree`): a real effect does
that, a burst in one round does not.

The verdict: "hurts" if the time lost (noise %) or the deciding metric (the
targeted share, or noise % for an action with no cause of its own) got
significantly worse in agreement with every pair; else "helps" if the
deciding metric got significantly better so; else "no effect". The tails and
the rate (p99, max, detours/s) do not decide: each is tested and reported
(a false alarm on one of four would otherwise call a good change bad).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from .. import interrupts
from ..analysis.compare import SUMMARY_METRICS, compare
from ..bundle import Bundle
from ..errors import UsageError
from ..host import HostRoot
from ..knobs import KnobJournal
from ..manifest import new_manifest, utc_now
from ..tables import Table
from ..units import SECOND
from .actions import NotApplied, action_for
from .plan import SMALL_SHARE_PCT, PlanEntry, irq_numbers, task_rows

BASELINE, CHANGED = "baseline", "changed"
SLICE_NS = SECOND // 4
DEFAULT_PAIRS = 3
# Each round: 5 s is 20 slices, so 3 pairs compare 60 slices with 60 in 30 s a
# trial; longer rounds add little where the effect is a cause's share.
DEFAULT_ROUND_NS = 5 * SECOND
METRICS = SUMMARY_METRICS["detour"]  # noise_pct, detours_per_s, p99_ns, max_ns
TARGETED = "targeted_pct"
HELPS, NO_EFFECT, HURTS = "helps", "no effect", "hurts"
COMBINED = "combination"
HISTOGRAM_EDGES_NS = 10 ** (np.arange(20, 101) / 10)  # 100 ns .. 10 s, 10 bins a decade


@dataclass(frozen=True)
class Trial:
    """What one trial changes, and the CPUs it is judged on."""

    name: str
    entries: tuple[PlanEntry, ...]
    cpus: tuple[int, ...]

    @property
    def targets_a_cause(self) -> bool:
        """Whether the entries name a cause of their own (an IRQ, a task)."""
        return any(e.irq is not None or e.pid is not None for e in self.entries)


def trials_of(plan: Iterable[PlanEntry], targets: tuple[int, ...],
              only: tuple[str, ...] = ()) -> list[Trial]:
    """A trial for each entry noisescope can change (action_for), except those
    under SMALL_SHARE_PCT of their CPU's lost time; with `only`, just the
    entries it names (irq:N, pid:N or an action's name)."""
    return [Trial(e.source, (e,), targets if e.cpu is None else (e.cpu,)) for e in plan
            if (action := action_for(e)) is not None and action.measurable
            and (e.share_pct is None or e.share_pct >= SMALL_SHARE_PCT)
            and (not only or {f"irq:{e.irq}", f"pid:{e.pid}", e.action} & set(only))]


def combination(trials: list[Trial], helped: list[Trial]) -> Trial | None:
    """The trial of every action that helped, made together (None for fewer than two)."""
    if len(helped) < 2:
        return None
    cpus = tuple(sorted({c for t in helped for c in t.cpus}))
    return Trial(COMBINED, tuple(e for t in helped for e in t.entries), cpus)


def round_phases(pairs: int) -> list[tuple[int, str]]:
    """The rounds of a trial in order: (pair, phase)."""
    return [(pair, phase) for pair in range(pairs) for phase in (BASELINE, CHANGED)]


# -- one round ------------------------------------------------------------------------

class Targeted:
    """Which rows of a round's detour_causes the trial's entries claim: an IRQ's
    rows by its handlers' names, a task's by the thread ids of its process (as
    the plan matched them, plan.task_rows)."""

    def __init__(self, entries: Iterable[PlanEntry], host: HostRoot):
        self.host = host
        names = irq_numbers(host)
        self.irqs = {e.irq for e in entries if e.irq is not None}
        self.handlers = sorted(n for n, number in names.items() if number in self.irqs)
        self.pids = {e.pid for e in entries if e.pid is not None}
        self._tids: set[int] = set()
        for pid in self.pids:
            self._tids.add(pid)
            self._tids.update(int(t) for t in host.listdir(f"/proc/{pid}/task") if t.isdigit())

    def rows(self, causes: Table, switches: Table | None) -> tuple[Table, np.ndarray]:
        """`causes` (split among tasks) and the mask of the rows claimed."""
        split, tids = task_rows(causes, switches, self.host)
        claimed = (split["cause"] == "irq") & np.isin(split["detail"], self.handlers)
        if self._tids:
            claimed |= (split["cause"] == "thread") & np.isin(tids, sorted(self._tids))
        return split, claimed


@dataclass
class RoundResult:
    """What the bundle keeps of one round: per CPU a summary row, the slices'
    metrics, lost time per cause, and a histogram of detour lengths."""

    rows: list[dict]
    slices: list[dict]  # per slice and CPU: slice (its index), cpu and the METRICS (+ TARGETED)
    causes: list[dict]
    histogram: list[dict]
    complete: bool


def _measured_position(starts: np.ndarray, ends: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Where each time falls on the CPU's measured time (the windows laid end to end)."""
    before = np.concatenate([[0], np.cumsum(ends - starts)])
    at = np.searchsorted(starts, times, side="right") - 1
    inside = np.clip(times - starts[np.maximum(at, 0)], 0, (ends - starts)[np.maximum(at, 0)])
    return np.where(at < 0, 0, before[np.maximum(at, 0)] + inside)


def summarise_round(bundle: Bundle, cpus: tuple[int, ...], targeted: Targeted,
                    labels: dict) -> RoundResult:
    """The round's rows (labelled with `labels`: trial, phase, pair, round) from
    its scan; the targeted share is None where the round has no attribution."""
    summaries = {s["cpu"]: s for s in bundle.summaries.get("detour", [])}
    detours, windows = bundle.table("detours"), bundle.table("windows")
    causes = bundle.table("detour_causes") if bundle.has_table("detour_causes") else None
    claimed = None
    if causes is not None:
        causes, claimed = targeted.rows(causes, bundle.table("sched_switch")
                                        if bundle.has_table("sched_switch") else None)
    result = RoundResult([], [], [], [], bundle.complete)
    for cpu in cpus:
        summary = summaries.get(cpu)
        if summary is None or not summary["measured_ns"]:
            continue
        mine = windows.filter(windows["cpu"] == cpu)
        order = np.argsort(mine["start_ns"])
        starts, ends = mine["start_ns"][order], mine["end_ns"][order]
        measured = int((ends - starts).sum())
        lengths = detours["duration_ns"][detours["cpu"] == cpu]
        where = _measured_position(starts, ends, detours["start_ns"][detours["cpu"] == cpu])
        # slices as near SLICE_NS as they divide the round (none in a round cut
        # shorter than half of one: too short to stand beside the others)
        slices = round(measured / SLICE_NS)
        edges = np.linspace(0, measured, slices + 1)
        slice_of = np.clip(np.searchsorted(edges, where, side="right") - 1, 0, max(slices - 1, 0))
        if causes is not None:
            on_cpu = causes["cpu"] == cpu
            target_ns = causes["duration_ns"][on_cpu & claimed]
            target_at = _measured_position(starts, ends, causes["start_ns"][on_cpu & claimed])
            target_slice = np.clip(np.searchsorted(edges, target_at, side="right") - 1, 0,
                                   max(slices - 1, 0))
            for cause in sorted(set(causes["cause"][on_cpu].tolist())):
                rows = on_cpu & (causes["cause"] == cause)
                result.causes.append({**labels, "cpu": cpu, "cause": cause,
                                      "lost_ns": int(causes["duration_ns"][rows].sum()),
                                      "count": int(rows.sum())})
        targeted_ns = int(target_ns.sum()) if causes is not None else None
        result.rows.append({**labels, "cpu": cpu, "measured_ns": measured,
                            "detours": int(summary["detours"]),
                            **{m: summary[m] for m in METRICS},
                            "targeted_ns": targeted_ns,
                            TARGETED: None if targeted_ns is None else 100 * targeted_ns / measured,
                            "complete": bundle.complete})
        counts, _ = np.histogram(lengths, HISTOGRAM_EDGES_NS)
        result.histogram += [{**labels, "cpu": cpu, "lower_ns": int(HISTOGRAM_EDGES_NS[i]),
                              "upper_ns": int(HISTOGRAM_EDGES_NS[i + 1]), "count": int(counts[i])}
                             for i in np.flatnonzero(counts)]
        for index in range(slices):
            span = float(edges[index + 1] - edges[index])
            inside = lengths[slice_of == index]
            row = {"slice": index, "cpu": cpu, "noise_pct": 100 * float(inside.sum()) / span,
                   "detours_per_s": len(inside) / (span / SECOND),
                   "p99_ns": float(np.percentile(inside, 99)) if len(inside) else 0.0,
                   "max_ns": float(inside.max()) if len(inside) else 0.0}
            if causes is not None:
                row[TARGETED] = 100 * float(target_ns[target_slice == index].sum()) / span
            result.slices.append(row)
    return result


# -- judging ------------------------------------------------------------------------------

def _slice_bundle(phase: str, rows: list[dict]) -> Bundle:
    """One slice of every CPU as a bundle `compare` reads (its label the phase)."""
    return Bundle(new_manifest("scan", label=phase, started_utc=utc_now(), complete=True,
                               parameters={}, summaries={"detour": rows}, warnings=[], argv=[]))


def judge(trial: Trial, slices: list[tuple[str, int, list[dict]]], rounds: list[dict]
          ) -> tuple[list[dict], str | None]:
    """The comparison rows (per CPU of the trial and metric) and the verdict (None:
    not both phases measured). `slices`: (phase, round, rows of one slice index of
    every CPU); `rounds`: the round rows (for the agreement of every pair)."""
    phases = {phase for phase, _, _ in slices}
    if phases != {BASELINE, CHANGED}:
        return [], None
    metrics = [*METRICS, *([TARGETED] if trial.targets_a_cause and any(
        TARGETED in row for _, _, rows in slices for row in rows) else [])]
    bundles = [_slice_bundle(phase, rows) for phase, _, rows in slices]
    try:
        comparison = compare(bundles, baseline=BASELINE, metrics=metrics, per_cpu=True)
    except UsageError:  # nothing measured on the trial's CPUs
        return [], None
    out = []
    for cpu in trial.cpus:
        workload = f"detour cpu{cpu}"
        for metric in metrics:
            before, after = (comparison.row(workload, metric, p) for p in (BASELINE, CHANGED))
            if before is None or after is None or after.change is None:
                continue
            change = after.change
            out.append({"trial": trial.name, "cpu": cpu, "metric": metric,
                        "title": after.metric.title, "unit": after.metric.unit,
                        "before_median": before.stats.median, "after_median": after.stats.median,
                        "slices_before": before.stats.n, "slices_after": after.stats.n,
                        "change": change.change, "change_unit": change.change_unit,
                        "ci_low": change.ci_low, "ci_high": change.ci_high,
                        "p_value": change.p_value, "q_value": change.q_value,
                        "significant": change.significant, "verdict": change.verdict,
                        "pairs_agree": pairs_agree(rounds, cpu, metric, change.verdict)})
    return out, verdict(out, TARGETED if TARGETED in metrics else "noise_pct")


def pairs_agree(rounds: list[dict], cpu: int, metric: str, direction: str) -> bool:
    """Whether every complete pair of rounds moved `metric` on `cpu` the way of
    `direction` ("better": lower, "worse": higher); False for other directions."""
    if direction not in ("better", "worse"):
        return False
    values: dict[int, dict[str, float]] = {}
    for row in rounds:
        if row["cpu"] == cpu and row.get(metric) is not None:
            values.setdefault(row["pair"], {})[row["phase"]] = row[metric]
    pairs = [v for v in values.values() if len(v) == 2]
    sign = -1 if direction == "better" else 1
    return bool(pairs) and all(sign * (v[CHANGED] - v[BASELINE]) > 0 for v in pairs)


def verdict(rows: list[dict], deciding: str) -> str:
    """hurts / helps / no effect, from the comparison rows of one trial. Only the
    time lost (noise %) and the deciding metric decide; the tails and the rate
    (p99, max, detours/s) are reported beside it, each with its own test."""
    decides = ("noise_pct", deciding)
    if any(r["metric"] in decides and r["verdict"] == "worse" and r["pairs_agree"] for r in rows):
        return HURTS
    if any(r["metric"] == deciding and r["verdict"] == "better" and r["pairs_agree"]
           for r in rows):
        return HELPS
    return NO_EFFECT


# -- the trials ---------------------------------------------------------------------------

@dataclass
class TrialResult:
    trial: Trial
    rounds: list[dict] = field(default_factory=list)
    causes: list[dict] = field(default_factory=list)
    histogram: list[dict] = field(default_factory=list)
    slices: list[tuple[str, int, list[dict]]] = field(default_factory=list)
    comparison: list[dict] = field(default_factory=list)
    verdict: str | None = None
    status: str = "measured"  # or why not (wholly): "not applied: ...", "interrupted"
    not_applied: list[str] = field(default_factory=list)  # entries of a combination left out

    def row(self, kept: bool | None = None) -> dict:
        entry = self.trial.entries[0]
        return {"trial": self.trial.name, "action": "+".join(dict.fromkeys(
                    e.action for e in self.trial.entries)),
                "cpus": list(self.trial.cpus), "irq": entry.irq if len(self.trial.entries) == 1
                else None, "pid": entry.pid if len(self.trial.entries) == 1 else None,
                "share_pct": entry.share_pct if len(self.trial.entries) == 1 else None,
                "rounds": len({(r["pair"], r["phase"]) for r in self.rounds}),
                "verdict": self.verdict, "status": self.status,
                "not_applied": list(self.not_applied), "kept": kept,
                "comparison": self.comparison}


class Rounds:
    """Runs the trials: `measure_round()` is one scan of the target CPUs (a Bundle);
    changes are made through journals in `journal_dir` (None: the default,
    /run/noisescope), each read back (NotApplied: the trial is skipped)."""

    def __init__(self, cpus: tuple[int, ...], housekeeping: tuple[int, ...], pairs: int,
                 measure_round: Callable[[], Bundle], host: HostRoot | None = None,
                 journal_dir=None, say: Callable[[str], None] = lambda line: None):
        self.cpus, self.housekeeping, self.pairs = cpus, housekeeping, pairs
        self.measure_round, self.host, self.journal_dir, self.say = (
            measure_round, host or HostRoot("/"), journal_dir, say)
        self.rounds_run = 0
        self.restore_failures: list[str] = []

    @property
    def stopped(self) -> bool:
        return interrupts.interrupted()

    def run(self, trial: Trial) -> TrialResult:
        result = TrialResult(trial)
        targeted = Targeted(trial.entries, self.host)
        self.say(f"trying {trial.name}: {2 * self.pairs} rounds")
        for pair, phase in round_phases(self.pairs):
            if self.stopped:
                result.status = "interrupted" if result.rounds else "not run (interrupted)"
                break
            labels = {"trial": trial.name, "phase": phase, "pair": pair,
                      "round": self.rounds_run}
            try:
                bundle = (self.measure_round() if phase == BASELINE
                          else self._changed_round(trial, result))
            except KeyboardInterrupt:  # a signal before the scan measured anything
                result.status = "interrupted"
                break
            if bundle is None:  # the change was not made
                break
            self.rounds_run += 1
            done = summarise_round(bundle, self.cpus, targeted, labels)
            del bundle
            result.rounds += done.rows
            result.causes += done.causes
            result.histogram += done.histogram
            for index in sorted({s["slice"] for s in done.slices}):
                result.slices.append((phase, labels["round"], [
                    {k: v for k, v in s.items() if k != "slice"} for s in done.slices
                    if s["slice"] == index]))
            if not done.complete:
                result.status = "interrupted"
                break
        result.comparison, result.verdict = judge(trial, result.slices, result.rounds)
        self.say(f"{trial.name}: {result.verdict or result.status}")
        return result

    def _changed_round(self, trial: Trial, result: TrialResult) -> Bundle | None:
        """The change made, one round measured, the change put back (always)."""
        journal = KnobJournal("tune", self.journal_dir)
        try:
            made = self.make(journal, trial.entries, result)
            if not made:
                return None
            return self.measure_round()
        finally:
            self.restore_failures += journal.restore()

    def make(self, journal: KnobJournal, entries: Iterable[PlanEntry],
             result: TrialResult | None = None) -> list[PlanEntry]:
        """Make each entry's change; those the kernel refuses are named in
        `result` (a trial of one entry is then not applied at all)."""
        made = []
        for entry in entries:
            try:
                action_for(entry).make(journal, entry, self.housekeeping)
            except NotApplied as why:
                if result is None or len(result.trial.entries) > 1:
                    self.say(f"not applied: {why}")
                if result is not None:
                    if not any(n.startswith(f"{entry.source}: ") for n in result.not_applied):
                        result.not_applied.append(f"{entry.source}: {why}")
                    if len(result.trial.entries) == 1:
                        result.status = f"not applied: {why}"
                continue
            made.append(entry)
        return made
