"""The trials of `noisescope tune --measure` (tune/measure.py) with fake scans
and knobs in a tree under tmp_path: ground truth we control.

The fake scan of CPU 1 (ROUND_NS of measured time) has background detours
drawn from a seeded generator, plus, while the IRQ knob
(proc/irq/36/smp_affinity_list of a copy of the kvm-guest tree) still lets
IRQ 36 (virtio1-req.0) reach CPU 1, IRQ_RATE handler runs of IRQ_NS each,
evenly spaced: that is 0.4% of the CPU in every slice. A second knob
(`hurting`) adds HURT_RATE detours of HURT_NS each while it reads 1."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from noisescope import interrupts
from noisescope.bundle import Bundle
from noisescope.host import HostRoot
from noisescope.knobs import KnobJournal, kept_journals, read_knob, restore_kept, restore_leftovers
from noisescope.manifest import new_manifest, utc_now
from noisescope.tables import Table
from noisescope.tune import measure
from noisescope.tune.actions import Action, NotApplied, move_irq
from noisescope.tune.baseline import kept_entries, persistent_files
from noisescope.tune.measure import (
    BASELINE,
    CHANGED,
    HELPS,
    HURTS,
    NO_EFFECT,
    SLICE_NS,
    Rounds,
    Trial,
    TrialResult,
    combination,
    pairs_agree,
    trials_of,
    verdict,
)
from noisescope.tune.plan import PlanEntry

FIXTURE = Path(__file__).parents[1] / "fixtures" / "hosts" / "kvm-guest"
CPU = 1
ROUND_NS = 1_000_000_000  # 4 slices a round
IRQ_RATE, IRQ_NS = 200, 20_000  # 0.4% of the CPU
HURT_RATE, HURT_NS = 2_000, 10_000  # 2% of the CPU, and many more detours a second
BACKGROUND_RATE = 500  # detours a second, 2-10 us each (about 0.3% of the CPU)

IRQ = PlanEntry(CPU, "irq-affinity", "runtime", "IRQ 36 virtio1-req.0", "fired", 40.0, 1, 1,
                irq=36)
HURTING = PlanEntry(None, "hurting", "runtime", "hurting", "a setting that adds noise")
NEUTRAL = PlanEntry(None, "neutral", "runtime", "neutral", "a setting that changes nothing")
QUIETING = PlanEntry(None, "quieting", "runtime", "quieting", "a setting that halves the background")


class Machine:
    """The fake machine: its tree (knobs), its scans, and what happened in order."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path / "root"
        shutil.copytree(FIXTURE, self.root, symlinks=True)
        self.irq_knob = self.root / "proc" / "irq" / "36" / "smp_affinity_list"
        self.hurt_knob = tmp_path / "hurting"
        self.hurt_knob.write_text("0\n")
        self.neutral_knob = tmp_path / "neutral"
        self.neutral_knob.write_text("0\n")
        self.quiet_knob = tmp_path / "quieting"
        self.quiet_knob.write_text("0\n")
        self.journals = tmp_path / "journals"
        self.events: list[str] = []
        self.rng = np.random.default_rng(7)
        self.fail_on_scan: int | None = None  # raise in this scan (counted from 0)
        self.signal_on_scan: int | None = None  # SIGTERM to ourselves during this scan
        self.stop_before_scan: int | None = None  # ... before this one measured anything
        self.scans = 0

    def actions(self) -> dict[str, Action]:
        def knob(path: Path):
            return Action(lambda journal, entry, keep: journal.change(path, "1"),
                          lambda entry, keep: ("settings.conf", f"{path.name} = 1\n"))
        return {"irq-affinity": Action(
                    lambda journal, entry, keep: move_irq(journal, entry.irq, keep, str(self.root)),
                    lambda entry, keep: ("irq-affinity.sh", f"irq {entry.irq}\n")),
                "hurting": knob(self.hurt_knob), "neutral": knob(self.neutral_knob),
                "quieting": knob(self.quiet_knob)}

    def journal_exists(self) -> bool:
        return self.journals.is_dir() and any(self.journals.iterdir())

    def scan(self) -> Bundle:
        number, self.scans = self.scans, self.scans + 1
        irq_here = CPU in {int(c) for c in read_knob(self.irq_knob).replace("-", ",").split(",")} \
            or read_knob(self.irq_knob) == "0-1"
        hurting = read_knob(self.hurt_knob) == "1"
        quiet = read_knob(self.quiet_knob) == "1"
        self.events.append(f"scan irq={'on' if irq_here else 'off'} hurt={int(hurting)} "
                           f"journal={int(self.journal_exists())}"
                           + (" quiet=1" if quiet else ""))
        if number == self.fail_on_scan:
            raise RuntimeError("the scan broke")
        if number == self.stop_before_scan:  # as scan() does when a signal came before it
            os.kill(os.getpid(), signal.SIGTERM)  # measured anything
            raise KeyboardInterrupt
        complete = True
        if number == self.signal_on_scan:
            os.kill(os.getpid(), signal.SIGTERM)  # counted by interrupts, not raised
            complete = False  # as a scan whose probe the signal stopped
        return self.bundle(irq_here, hurting, complete, quiet)

    def bundle(self, irq_here: bool, hurting: bool, complete: bool, quiet: bool = False) -> Bundle:
        count = self.rng.poisson(BACKGROUND_RATE * ROUND_NS / 1e9 / (2 if quiet else 1))
        starts = list(self.rng.integers(0, ROUND_NS - 20_000, count))
        lengths = list(self.rng.integers(2_000, 10_000, count))
        causes = ["unexplained"] * count
        details = ["no guest activity"] * count
        extra = []
        if irq_here:
            extra.append((IRQ_RATE, IRQ_NS, "irq", "virtio1-req.0"))
        if hurting:
            extra.append((HURT_RATE, HURT_NS, "softirq", "NET_RX"))
        for rate, length, cause, detail in extra:
            n = rate * ROUND_NS // 1_000_000_000
            starts += list(np.arange(n) * (ROUND_NS // n) + 1_000)
            lengths += [length] * n
            causes += [cause] * n
            details += [detail] * n
        order = np.argsort(starts, kind="stable")
        starts, lengths = np.array(starts)[order], np.array(lengths)[order]
        causes, details = np.array(causes, object)[order], np.array(details, object)[order]
        cpu = np.full(len(starts), CPU, np.int32)
        detours = Table({"cpu": cpu, "start_ns": starts, "duration_ns": lengths})
        table = Table({"cpu": cpu, "start_ns": starts, "cause": causes, "detail": details,
                       "duration_ns": lengths})
        windows = Table({"cpu": np.array([CPU], np.int32), "probe": np.array(["detour"], object),
                         "start_ns": np.array([0]), "end_ns": np.array([ROUND_NS])})
        summary = {"cpu": CPU, "measured_ns": ROUND_NS, "detours": len(lengths),
                   "noise_pct": 100 * lengths.sum() / ROUND_NS,
                   "detours_per_s": len(lengths) / (ROUND_NS / 1e9),
                   "p99_ns": float(np.percentile(lengths, 99)), "max_ns": float(lengths.max())}
        manifest = new_manifest("tune", label=None, started_utc=utc_now(), complete=complete,
                                parameters={}, summaries={"detour": [summary]}, warnings=[],
                                argv=[])
        return Bundle(manifest, {"detours": detours, "detour_causes": table, "windows": windows})


@pytest.fixture
def machine(tmp_path, monkeypatch):
    fake = Machine(tmp_path)
    actions = fake.actions()
    monkeypatch.setattr(measure, "action_for", lambda entry: actions.get(entry.action))
    return fake


def rounds_of(machine: Machine, pairs: int = 3) -> Rounds:
    return Rounds((CPU,), (0,), pairs, machine.scan, HostRoot(machine.root),
                  journal_dir=machine.journals)


def metric(result: TrialResult, name: str) -> dict:
    return next(r for r in result.comparison if r["metric"] == name and r["cpu"] == CPU)


def test_rounds_alternate_and_each_change_is_made_journalled_then_put_back(machine):
    result = rounds_of(machine, pairs=2).run(Trial(IRQ.source, (IRQ,), (CPU,)))
    assert machine.events == ["scan irq=on hurt=0 journal=0", "scan irq=off hurt=0 journal=1"] * 2
    assert [(r["pair"], r["phase"], r["round"]) for r in result.rounds] == [
        (0, BASELINE, 0), (0, CHANGED, 1), (1, BASELINE, 2), (1, CHANGED, 3)]
    assert read_knob(machine.irq_knob) == "0-1" and not machine.journal_exists()
    # each round cut into slices of SLICE_NS: 4 a round, per phase 2 rounds
    assert ROUND_NS // SLICE_NS == 4
    assert [(phase, len(rows)) for phase, _, rows in result.slices].count((CHANGED, 1)) == 8


def test_a_cause_moved_away_helps_with_its_share_measured_exactly(machine):
    result = rounds_of(machine).run(Trial(IRQ.source, (IRQ,), (CPU,)))
    targeted = metric(result, "targeted_pct")
    # 200/s x 20 us = 0.4% of every slice before (evenly spaced), none after
    assert targeted["before_median"] == pytest.approx(0.4, abs=0.01)
    assert targeted["after_median"] == 0
    assert targeted["verdict"] == "better" and targeted["significant"] and targeted["pairs_agree"]
    assert targeted["change_unit"] == "pp"  # after is 0: a difference, not a ratio
    assert -0.41 <= targeted["ci_low"] <= targeted["change"] <= targeted["ci_high"] < 0
    assert targeted["slices_before"] == targeted["slices_after"] == 12
    assert result.verdict == HELPS and result.status == "measured"
    # the rounds' own rows say the same, round by round
    shares = {(r["phase"], r["pair"]): r["targeted_pct"] for r in result.rounds}
    assert all(shares[(BASELINE, p)] == pytest.approx(0.4, abs=0.01) for p in range(3))
    assert all(shares[(CHANGED, p)] == 0 for p in range(3))
    lost = {r["cause"]: r["lost_ns"] for r in result.causes if r["phase"] == BASELINE
            and r["pair"] == 0}
    assert lost["irq"] == IRQ_RATE * IRQ_NS  # per-round lost time per cause


def test_a_setting_that_adds_noise_hurts_and_one_that_changes_nothing_has_no_effect(machine):
    rounds = rounds_of(machine)
    hurt = rounds.run(Trial(HURTING.source, (HURTING,), (CPU,)))
    noise = metric(hurt, "noise_pct")
    assert noise["verdict"] == "worse" and noise["pairs_agree"]
    # 2% of the CPU added to 0.4% (the IRQ, still here) + about 0.3% (background, 500/s
    # x 6 us on average): (0.7 + 2) / 0.7 - 1 = +286%; the background varies by a fraction
    assert 200 < noise["change"] < 400 and 0 < noise["ci_low"] <= noise["change"]
    assert hurt.verdict == HURTS
    assert all(r["metric"] != "targeted_pct" for r in hurt.comparison)  # no cause of its own
    same = rounds.run(Trial(NEUTRAL.source, (NEUTRAL,), (CPU,)))
    assert same.verdict == NO_EFFECT
    assert not any(r["significant"] for r in same.comparison)
    assert read_knob(machine.hurt_knob) == "0" and read_knob(machine.neutral_knob) == "0"


def test_a_scan_that_fails_in_a_changed_round_leaves_everything_restored(machine):
    machine.fail_on_scan = 1  # the first changed round
    with pytest.raises(RuntimeError, match="the scan broke"):
        rounds_of(machine).run(Trial(IRQ.source, (IRQ,), (CPU,)))
    assert machine.events[-1] == "scan irq=off hurt=0 journal=1"  # it was changed, journalled
    assert read_knob(machine.irq_knob) == "0-1" and not machine.journal_exists()


def test_a_change_the_kernel_refuses_is_not_tried_and_nothing_stays_changed(machine, monkeypatch):
    def refuse(journal, entry, keep):
        raise NotApplied("IRQ 36: the kernel refused affinity 0 (Input/output error)")

    monkeypatch.setattr(measure, "action_for", lambda entry: Action(refuse, None))
    result = rounds_of(machine).run(Trial(IRQ.source, (IRQ,), (CPU,)))
    assert result.status.startswith("not applied: IRQ 36: the kernel refused")
    assert result.verdict is None and machine.events == ["scan irq=on hurt=0 journal=0"]
    assert not machine.journal_exists()


def test_sigterm_mid_round_stops_the_trials_and_restores(machine):
    machine.signal_on_scan = 3  # the second changed round
    with interrupts.handled(), interrupts.keeping():
        rounds = rounds_of(machine)
        first = rounds.run(Trial(IRQ.source, (IRQ,), (CPU,)))
        second = rounds.run(Trial(HURTING.source, (HURTING,), (CPU,)))
        assert rounds.stopped
    assert len(machine.events) == 4  # nothing measured after the signal's round
    assert first.status == "interrupted" and len(first.rounds) == 4
    assert not first.rounds[-1]["complete"]
    assert second.status == "not run (interrupted)" and second.rounds == []
    assert read_knob(machine.irq_knob) == "0-1" and not machine.journal_exists()
    # what was measured is judged: two pairs
    assert metric(first, "targeted_pct")["slices_after"] == 8


def test_sigterm_before_a_changed_round_measured_anything_keeps_the_rounds_before(machine):
    """scan() raises KeyboardInterrupt when a signal came before it measured: the
    trial ends there, the change is put back, the rounds before are kept."""
    machine.stop_before_scan = 3
    with interrupts.handled(), interrupts.keeping():
        result = rounds_of(machine).run(Trial(IRQ.source, (IRQ,), (CPU,)))
    assert result.status == "interrupted" and len(result.rounds) == 3
    assert result.verdict == HELPS  # one pair of changed slices against two baseline rounds
    assert read_knob(machine.irq_knob) == "0-1" and not machine.journal_exists()


def test_pairs_agree_only_when_every_pair_moved_that_way():
    rows = [{"cpu": 1, "pair": p, "phase": ph, "noise_pct": v}
            for p, (b, c) in enumerate([(2.0, 1.0), (3.0, 1.5)])
            for ph, v in ((BASELINE, b), (CHANGED, c))]
    assert pairs_agree(rows, 1, "noise_pct", "better")
    assert not pairs_agree(rows, 1, "noise_pct", "worse")
    assert not pairs_agree(rows, 1, "noise_pct", "not significant")
    rows[3]["noise_pct"] = 3.5  # the second pair went up
    assert not pairs_agree(rows, 1, "noise_pct", "better")
    # a pair without its changed round (interrupted) does not count
    assert pairs_agree(rows[:3], 1, "noise_pct", "better")


@pytest.mark.parametrize(("rows", "deciding", "expected"), [
    ([("targeted_pct", "better", True), ("noise_pct", "not significant", False)],
     "targeted_pct", HELPS),
    ([("targeted_pct", "better", False)], "targeted_pct", NO_EFFECT),  # pairs disagree
    ([("targeted_pct", "better", True), ("noise_pct", "worse", True)], "targeted_pct", HURTS),
    ([("targeted_pct", "better", True), ("p99_ns", "worse", True)], "targeted_pct", HELPS),
    ([("targeted_pct", "not significant", False), ("noise_pct", "better", True)],
     "targeted_pct", NO_EFFECT),  # noise fell, but not through the cause it moved
    ([("noise_pct", "better", True)], "noise_pct", HELPS),
    ([("noise_pct", "worse", False)], "noise_pct", NO_EFFECT),
])
def test_verdict(rows, deciding, expected):
    assert verdict([{"metric": m, "verdict": v, "pairs_agree": a} for m, v, a in rows],
                   deciding) == expected


def test_trials_skip_small_and_unknown_entries_and_only_picks(machine):
    small = PlanEntry(CPU, "irq-affinity", "runtime", "IRQ 37 x", "", 0.05, irq=37)
    boot = PlanEntry(CPU, "boot:nohz_full", "boot", "nohz_full", "", 20.0)
    unknown = PlanEntry(None, "governor", "runtime", "governor", "")
    plan = [IRQ, small, boot, unknown, HURTING]
    assert [t.name for t in trials_of(plan, (1, 2))] == [IRQ.source, HURTING.source]
    assert trials_of(plan, (1, 2))[1].cpus == (1, 2)  # a setting: judged on every target
    assert [t.name for t in trials_of(plan, (1,), ("irq:36",))] == [IRQ.source]
    assert [t.name for t in trials_of(plan, (1,), ("hurting",))] == [HURTING.source]


def test_the_combination_and_what_apply_keeps():
    one, two = Trial("a", (IRQ,), (1,)), Trial("b", (HURTING,), (1, 2))
    assert combination([one, two], [one]) is None
    together = combination([one, two], [one, two])
    assert together.entries == (IRQ, HURTING) and together.cpus == (1, 2)
    helped = [TrialResult(one, verdict=HELPS), TrialResult(two, verdict=HELPS)]
    assert kept_entries(helped) == [IRQ, HURTING]
    assert kept_entries([*helped, TrialResult(together, verdict=HELPS)]) == [IRQ, HURTING]
    assert kept_entries([*helped, TrialResult(together, verdict=NO_EFFECT)]) == [IRQ]
    assert kept_entries([TrialResult(one, verdict=HURTS)]) == []


def test_persistent_files_hold_the_kept_changes_and_the_boot_advice():
    boot = [PlanEntry(c, f"boot:{p}", "boot", p, "", 1.0) for c in (1, 3)
            for p in ("nohz_full", "rcu_nocbs")]
    files = persistent_files([IRQ], [IRQ, *boot], (0,))
    assert sorted(files) == ["persistent/irq-affinity.sh", "persistent/kernel-cmdline.txt"]
    assert files["persistent/kernel-cmdline.txt"].splitlines()[-1] == "nohz_full=1,3 rcu_nocbs=1,3"
    script = files["persistent/irq-affinity.sh"]
    assert script.startswith("#!/bin/sh\n")
    assert "/proc/irq/*/virtio1-req.0" in script and 'echo 0 > "${handler%/*}/smp_affinity_list"' in script
    assert persistent_files([], [IRQ], (0,)) == {}


def test_a_kept_settings_boot_line_and_the_boot_advice_share_one_file(monkeypatch):
    """A setting that persists as a kernel parameter (clocksource=tsc) and the boot
    advice go to the same kernel-cmdline.txt, under its one header."""
    from noisescope.tune import actions, baseline

    clock = PlanEntry(None, "clocksource", "runtime", "clocksource", "")
    monkeypatch.setattr(baseline, "action_for", lambda entry: Action(
        None, lambda entry, keep: ("kernel-cmdline.txt", "clocksource=tsc\n")))
    boot = PlanEntry(1, "boot:nohz_full", "boot", "nohz_full", "", 1.0)
    files = persistent_files([clock], [clock, boot], (0,))
    header = actions.SNIPPET_HEADERS["kernel-cmdline.txt"]
    assert files == {"persistent/kernel-cmdline.txt":
                     header.rstrip("\n") + "\nclocksource=tsc\nnohz_full=1\n"}


def test_a_settings_snippet_header_without_its_line_end_gets_one():
    from noisescope.tune.actions import snippet_files
    from noisescope.tune.settings import SETTING_SNIPPET_HEADERS, SYSCTL

    files = snippet_files([(SYSCTL, "vm.stat_interval = 10\n")])
    assert files[SYSCTL] == SETTING_SNIPPET_HEADERS[SYSCTL].rstrip("\n") + "\nvm.stat_interval = 10\n"


def test_a_cpuset_partition_is_planned_but_not_measured_in_rounds():
    """The sampler would be kept off the partition's CPUs: --measure leaves it out."""
    from noisescope.tune.actions import action_for

    partition = PlanEntry(None, "cpuset-partition", "runtime", "cpuset partition", "", 20.0)
    vmstat = PlanEntry(None, "vm.stat_interval", "runtime", "vm.stat_interval", "")
    assert action_for(partition) is not None and not action_for(partition).measurable
    assert [t.name for t in trials_of([partition, vmstat], (CPU,))] == ["vm.stat_interval"]


def test_kept_changes_survive_cleanup_and_are_put_back_by_restore_kept(tmp_path):
    knob = tmp_path / "knob"
    knob.write_text("before\n")
    journal = KnobJournal("tune", tmp_path / "journals")
    journal.change(knob, "after")
    kept = journal.keep()
    journal.restore()  # the `finally` after keeping: nothing left to put back
    assert kept is not None and kept.name == f"kept-tune-{os.getpid()}.json"
    assert knob.read_text() == "after" and kept_journals(tmp_path / "journals") == [kept]
    # noisescope cleanup restores journals of runs that are gone: never a kept one
    os.rename(kept, kept.with_name("kept-tune-999999999.json"))
    assert restore_leftovers(tmp_path / "journals") == ([], [])
    assert knob.read_text() == "after"
    assert restore_kept(tmp_path / "journals") == ([f"{knob} = before"], [])
    assert knob.read_text() == "before" and kept_journals(tmp_path / "journals") == []


def test_compare_of_tune_bundles_leaves_out_the_plan_and_the_rounds():
    """A tune bundle's plan (shares of candidates) and rounds (the trials' own
    configurations) are not measurements of the bundle's configuration."""
    from noisescope.analysis.compare import compare

    def tune_bundle(label: str, noise: float) -> Bundle:
        summaries = {"detour": [{"cpu": CPU, "noise_pct": noise}],
                     "plan": [{"cpu": CPU, "share_pct": 40.0}],
                     "rounds": [{"cpu": CPU, "noise_pct": 9.0, "targeted_pct": 1.0}]}
        return Bundle(new_manifest("tune", label=label, started_utc=utc_now(), complete=True,
                                   parameters={}, summaries=summaries, warnings=[], argv=[]))

    comparison = compare([tune_bundle("a", 1.0), tune_bundle("b", 2.0)])
    assert comparison.workloads == ["detour"]
    assert [r.stats.median for r in comparison.rows_of("detour", "noise_pct")] == [1.0, 2.0]


def test_apply_keeps_what_helped_writes_its_snippets_and_hands_its_journal_over(
        machine, tmp_path, monkeypatch):
    """tune() with --apply on the fake machine (its scans, its plan): the IRQ move
    helps and stays, the hurting setting is put back; the bundle holds the trials
    and persistent/; the kept journal is the one restore_kept() puts back."""
    from noisescope.host import read_host_facts
    from noisescope.tune import baseline

    boot = PlanEntry(CPU, "boot:nohz_full", "boot", "nohz_full", "", 10.0)
    monkeypatch.setattr(baseline, "is_root", lambda: True)
    monkeypatch.setattr(baseline, "scan", lambda options, **kwargs: machine.scan())
    monkeypatch.setattr(baseline, "plan_bundle", lambda *args, **kwargs: [IRQ, HURTING, boot])
    monkeypatch.setattr(baseline, "action_for", measure.action_for)  # the fake actions
    options = baseline.TuneOptions(cpus=(CPU,), duration_ns=ROUND_NS, mode=baseline.APPLY,
                                   rounds=2)
    result = baseline.tune(options, facts=read_host_facts(FIXTURE),
                           destination=tmp_path / "applied", journal_dir=machine.journals)
    assert [(t.trial.name, t.verdict) for t in result.trials] == [
        (IRQ.source, HELPS), (HURTING.source, HURTS)]
    assert result.kept == [IRQ] and read_knob(machine.irq_knob) == "0"  # kept
    assert read_knob(machine.hurt_knob) == "0"  # put back
    assert result.kept_journal == machine.journals / f"kept-tune-{os.getpid()}.json"
    written = tmp_path / "applied"
    assert sorted(p.name for p in (written / "persistent").iterdir()) == [
        "irq-affinity.sh", "kernel-cmdline.txt"]
    assert (written / "persistent" / "irq-affinity.sh").read_text().endswith("irq 36\n")
    assert (written / "persistent" / "kernel-cmdline.txt").read_text().endswith("nohz_full=1\n")
    summaries = result.bundle.summaries
    assert [(t["trial"], t["kept"]) for t in summaries["trials"]] == [
        (IRQ.source, True), (HURTING.source, False)]
    assert len(summaries["rounds"]) == 8 and result.bundle.complete
    # show lists the snippets to install (the fake scans' summaries lack what the
    # detour table prints: only the tune bundle's own tables are drawn)
    from rich.console import Console

    from noisescope.render.terminal import SUMMARY_TABLES

    console = Console(record=True, width=200)
    for kind in ("plan", "trials", "persistent"):
        for render in SUMMARY_TABLES[kind]:
            console.print(render(summaries[kind]))
    shown = console.export_text()
    assert "persistent/irq-affinity.sh" in shown and "persistent/kernel-cmdline.txt" in shown
    assert restore_kept(machine.journals) == ([f"{machine.irq_knob} = 0-1"], [])
    assert read_knob(machine.irq_knob) == "0-1" and not machine.journal_exists()
    # the report's before/after figures: a panel per trial; the IRQ's bar goes from
    # 200/s x 20 us = 4 ms per second to nothing
    from noisescope.render import plots

    causes = plots.tune_lost_time([result.bundle])
    detours = plots.tune_detour_cdfs([result.bundle])
    assert [f.key for f in causes + detours] == ["tune-causes", "tune-detours"]
    panels = causes[0].figure.axes
    assert len(panels) == 2 and panels[0].get_title(loc="left").startswith(IRQ.source)
    irq_bars = next(c for c in panels[0].containers if c.get_label() == "irq")
    assert [round(bar.get_width(), 6) for bar in irq_bars] == [IRQ_RATE * IRQ_NS / 1e6, 0]


def test_the_actions_that_helped_are_then_tried_together(machine):
    """The IRQ's move and a setting that halves the background both help alone;
    together (one journal, both made before the round, both put back) they are the
    combination trial, judged on the IRQ's share too."""
    from noisescope.tune.baseline import try_plan

    trials = trials_of([IRQ, QUIETING], (CPU,))
    results = try_plan(rounds_of(machine, pairs=2), trials)
    assert [(r.trial.name, r.verdict) for r in results] == [
        (IRQ.source, HELPS), (QUIETING.source, HELPS), ("combination", HELPS)]
    together = results[-1]
    assert together.trial.entries == (IRQ, QUIETING)
    assert machine.events[-4:] == ["scan irq=on hurt=0 journal=0",
                                   "scan irq=off hurt=0 journal=1 quiet=1"] * 2
    assert metric(together, "targeted_pct")["after_median"] == 0
    assert read_knob(machine.irq_knob) == "0-1" and read_knob(machine.quiet_knob) == "0"
    assert not machine.journal_exists()


def test_apply_lets_go_of_a_helpful_change_that_lasts_only_while_held(machine, tmp_path,
                                                                      monkeypatch):
    """A change the journal only holds (as /dev/cpu_dma_latency) cannot outlive
    tune: --apply lets it go at the end, says so, and leaves only its snippet."""
    from contextlib import contextmanager

    from noisescope.host import read_host_facts
    from noisescope.tune import baseline

    @contextmanager
    def quieter():
        machine.quiet_knob.write_text("1\n")
        try:
            yield "held"
        finally:
            machine.quiet_knob.write_text("0\n")

    held = Action(lambda journal, entry, keep: journal.hold(entry.action, quieter()),
                  lambda entry, keep: ("kernel-cmdline.txt", "quiet=1\n"))
    actions = {**machine.actions(), "quieting": held}
    monkeypatch.setattr(measure, "action_for", lambda entry: actions.get(entry.action))
    monkeypatch.setattr(baseline, "action_for", measure.action_for)
    monkeypatch.setattr(baseline, "is_root", lambda: True)
    monkeypatch.setattr(baseline, "scan", lambda options, **kwargs: machine.scan())
    monkeypatch.setattr(baseline, "plan_bundle", lambda *args, **kwargs: [IRQ, QUIETING])
    options = baseline.TuneOptions(cpus=(CPU,), duration_ns=ROUND_NS, mode=baseline.APPLY,
                                   rounds=2)
    result = baseline.tune(options, facts=read_host_facts(FIXTURE),
                           destination=tmp_path / "applied", journal_dir=machine.journals)
    assert {t.trial.name: t.verdict for t in result.trials}[QUIETING.source] == HELPS
    assert QUIETING not in result.kept and IRQ in result.kept
    assert read_knob(machine.quiet_knob) == "0"  # let go when tune ended
    assert [w["code"] for w in result.bundle.manifest["warnings"]].count("not_kept") == 1
    snippet = (tmp_path / "applied" / "persistent" / "kernel-cmdline.txt").read_text()
    assert snippet.endswith("quiet=1\n")
    restore_kept(machine.journals)
