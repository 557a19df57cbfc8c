"""Running an experiment: the checks before the first run, the runs with their
injections and sibling traces, and the probes before and after (`run`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import interrupts
from ..bundle import Bundle, check_destination
from ..diagnostics import Code, Diagnostic
from ..host import HostFacts, check_cpus
from ..knobs import KnobJournal
from ..placement import resolve
from ..prechecks import frequency_scaling, injector_priority
from ..probes.inject import BackgroundInjection
from ..smt import SmtSwitch, check_switchable, without_smt
from ..tables import Table
from ..trace.siblings import SiblingRecorder, plan_occupancy, unavailable
from ..trace.tracefs import TracingUnavailable
from ..workload import Runner
from .model import Configuration, Experiment, Prepared, Record, RunCallback, Step, plan_steps
from .results import build_bundle

FEW_RUNS = 5  # fewer per group and Mann-Whitney can hardly ever reach p < 0.05


def prepare(experiment: Experiment, facts: HostFacts) -> Prepared:
    """Check what would make a run fail or mislead, before any run."""
    for workload in experiment.workloads:
        workload.check()
    notes: list[Diagnostic] = []
    placements = {}
    if any(config.smt for config in experiment.configurations):
        check_switchable(facts)
    for config in experiment.configurations:
        machine = without_smt(facts) if config.smt == "off" else facts
        placements[config.name] = resolved = resolve(config.placement, machine)
        if resolved.note:
            notes.append(Diagnostic(Code.PLACEMENT, f"{_config_name(config)}: {resolved.note}"))
        if config.injections:
            check_cpus(tuple(sorted({i.cpu for i in config.injections})), facts)
    priority = 0
    if any(c.injections for c in experiment.configurations):
        priority = injector_priority()
        if not priority:
            notes.append(Diagnostic(Code.PRIVILEGES, "noise injectors run at normal priority "
                                    "(SCHED_FIFO not permitted): injections can be late"))
    if experiment.runs < FEW_RUNS:
        notes.append(Diagnostic(Code.TOO_FEW_RUNS, f"only {experiment.runs} runs per workload "
                                f"and configuration"))
    with_siblings = {c.name for c in experiment.configurations if c.smt != "off"}
    plan, note = plan_occupancy(experiment.occupancy, facts,
                                {name: resolved.cpus for name, resolved in placements.items()
                                 if name in with_siblings})
    used = set()
    for resolved in placements.values():
        used.update(resolved.cpus if resolved.cpus is not None else facts.online)
    notes += frequency_scaling(facts, used, "the workload CPUs", "run times follow the clock speed")
    return Prepared(placements, priority, notes, plan, note)


def _config_name(config: Configuration) -> str:
    return f"configuration {config.name}" if config.name else "the configuration"


def run_steps(experiment: Experiment, prepared: Prepared, clock,
              progress: RunCallback | None = None,
              recorder: SiblingRecorder | None = None) -> tuple[list[Record], bool]:
    """Run every step (traced for sibling occupancy by `recorder`, if given);
    returns the records and whether it was interrupted."""
    steps = plan_steps(experiment)
    records: list[Record] = []
    journal = KnobJournal("smt")
    switch = SmtSwitch(journal) if any(c.smt for c in experiment.configurations) else None
    with journal, Runner() as runner:
        for step in steps:
            if interrupts.take():
                return records, True
            try:
                if switch:
                    with interrupts.raising():  # a stop ends the run, as a stop should
                        switch.set(step.configuration.smt)
                record, interrupted = _run_step(step, experiment, prepared, clock, runner,
                                                recorder)
            except KeyboardInterrupt:
                return records, True
            records.append(record)
            if progress:
                progress(len(records), len(steps), step, record.result)
            if interrupted:
                return records, True
    return records, False


def _run_step(step: Step, experiment: Experiment, prepared: Prepared, clock,
              runner: Runner, recorder: SiblingRecorder | None = None) -> tuple[Record, bool]:
    """One run with its injections (and trace); returns the record and
    whether Ctrl-C came."""
    config = step.configuration
    env = {**step.workload.environment(), **dict(config.env)}
    injector = (BackgroundInjection(config.injections, clock, experiment.timeout_ns,
                                    prepared.injector_priority) if config.injections else None)
    injections, overflow, interrupted, recording = Table(), 0, False, None
    try:
        with interrupts.raising():  # a stop ends the run, as a stop should
            if injector:
                injector.start()
            if recorder:
                recorder.start()
            result = runner.run(step.workload, prepared.placements[config.name],
                                experiment.timeout_ns, env)
            if injector:
                injections, overflow, interrupted = injector.stop()
    finally:
        if recorder:
            recording = recorder.stop()
        if injector:
            injector.stop()  # no-op when stopped above; ends the injectors on errors
    interrupted = interrupted or result.status == "interrupted"
    record = Record(step, result, injections, overflow)
    if recorder and recording:
        start_ns, end_ns = (int(v) for v in clock.timestamp_ns(np.array([result.start_ticks,
                                                                          result.end_ticks])))
        # Outside raising(): a stop while the finished run's trace is decoded
        # keeps its occupancy (the next step sees the stop and ends the loop).
        record.occupancy = recorder.measure(recording, step.order, config.name, result.pid,
                                            start_ns, end_ns)
    return record, interrupted


def measure(experiment: Experiment, *, label: str | None = None, facts: HostFacts | None = None,
            destination: str | os.PathLike[str] | None = None,
            progress: RunCallback | None = None, argv: list[str] | None = None) -> Bundle:
    """Run the experiment's workloads (no probes) and return the `bench` bundle,
    written to `destination` if given (checked before any run)."""
    from ..clock import measurement_clock
    from ..host import live_host_facts
    from ..manifest import utc_now

    started = utc_now()
    facts = facts or live_host_facts()
    prepared = prepare(experiment, facts)
    if destination is not None:
        check_destination(Path(destination))
    clock = measurement_clock(facts.tsc_flags)
    recorder = None
    if prepared.occupancy is not None:
        try:
            recorder = SiblingRecorder.open(prepared.occupancy, clock, experiment.occupancy)
        except TracingUnavailable as why:
            prepared.occupancy, prepared.occupancy_note = None, f"not measured: {why}"
            prepared.diagnostics.append(unavailable(why))
    with interrupts.keeping(destination, stopping="ending the current run") as keep:
        try:
            records, interrupted = run_steps(experiment, prepared, clock, progress, recorder)
        finally:
            keep.stopping = None  # from here on the runs are saved
            if recorder:
                recorder.close()  # the kernel's tracing state restored, also on errors
                prepared.diagnostics.extend(recorder.diagnostics())
        bundle = build_bundle(experiment, prepared, records, facts, clock, label=label,
                              started=started, finished=utc_now(), argv=argv,
                              complete=not interrupted)
        if destination is not None:
            bundle.write(destination)
    return bundle


@dataclass
class ExperimentOutcome:
    """What `run_experiment` wrote: the runs bundle and the probe bundles."""

    directory: Path
    runs: Bundle | None  # None when the probes before were interrupted
    probes: dict[str, Bundle]  # "before"/"after" -> scan bundle

    @property
    def complete(self) -> bool:
        return (self.runs is not None and self.runs.complete
                and all(b.complete for b in self.probes.values()))


def run_experiment(experiment: Experiment, directory: str | os.PathLike[str], *,
                   label: str | None = None, facts: HostFacts | None = None,
                   progress: RunCallback | None = None, probe_progress=None,
                   argv: list[str] | None = None) -> ExperimentOutcome:
    """Probes before, the workloads, probes after; one bundle each in `directory`
    (probes-before/, runs/, probes-after/). Ctrl-C keeps what was done."""
    from ..host import live_host_facts
    from ..scan import ScanOptions, plan, scan

    out = Path(directory)
    check_destination(out)
    facts = facts or live_host_facts()
    prepare(experiment, facts)  # fail before the probes when a run would fail
    scans = {when: ScanOptions(cpus=experiment.probes.cpus, probes=names, label=label,
                               duration_ns=experiment.probes.duration_ns)
             for when, names in (("before", experiment.probes.before),
                                 ("after", experiment.probes.after)) if names}
    for options in scans.values():
        plan(options, facts)
    out.mkdir(exist_ok=True)
    outcome = ExperimentOutcome(out, None, {})

    def probe(when: str) -> bool:
        bundle = scan(scans[when], argv=argv, facts=facts, progress=probe_progress,
                      destination=out / f"probes-{when}")
        outcome.probes[when] = bundle
        return bundle.complete

    if "before" in scans and (not probe("before") or interrupts.interrupted()):
        return outcome
    outcome.runs = measure(experiment, label=label, facts=facts, destination=out / "runs",
                           progress=progress, argv=argv)
    if outcome.runs.complete and not interrupts.interrupted() and "after" in scans:
        probe("after")
    return outcome
