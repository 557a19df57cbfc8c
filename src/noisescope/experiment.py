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
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from . import interrupts
from .bundle import SCHEMA_VERSION, Bundle, check_destination, tool_info
from .diagnostics import Code, Diagnostic
from .errors import UsageError
from .host import HostFacts, check_cpus
from .knobs import KnobJournal
from .placement import Placement, ResolvedPlacement, resolve
from .privileges import can_use_fifo
from .probes import PROBES, Injection
from .probes.inject import BackgroundInjection
from .smt import SETTINGS as SMT_SETTINGS
from .smt import SmtSwitch, check_switchable, without_smt
from .system import check_system
from .tables import Table
from .trace.siblings import (
    CATEGORIES,
    OccupancyOptions,
    OccupancyPlan,
    SiblingRecorder,
    plan_occupancy,
    shares,
    unavailable,
)
from .trace.tracefs import TracingUnavailable
from .units import parse_cpu_list, parse_positive_duration
from .workload import Metric, Runner, RunResult, Workload

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

SECOND = 1_000_000_000
DEFAULT_TIMEOUT_NS = 600 * SECOND
ORDERS = ("interleaved", "grouped")
FEW_RUNS = 5  # fewer per group and Mann-Whitney can hardly ever reach p < 0.05


@dataclass(frozen=True)
class Configuration:
    """What the tool applies around a workload; "" names the only configuration."""

    name: str = ""
    placement: Placement = Placement()
    injections: tuple[Injection, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    smt: str | None = None  # "on"/"off" switched at run time (smt.py); None: as the machine is

    def __post_init__(self) -> None:
        if self.smt not in (None, *SMT_SETTINGS):
            raise UsageError(f"unknown SMT setting {self.smt!r}", "use smt = \"on\" or \"off\"")
        if self.smt == "off" and self.placement.core_scheduling:
            raise UsageError("core scheduling needs SMT, and this configuration turns it off",
                             "drop core_scheduling or smt = \"off\" from it")

    def describe(self) -> str:
        parts = [self.placement.describe()] if self.placement != Placement() else []
        parts += [f"SMT {self.smt}"] if self.smt else []
        parts += [f"inject {i.describe()}" for i in self.injections]
        parts += [f"{k}={v}" for k, v in self.env]
        return "; ".join(parts) or "as is"

    def to_dict(self) -> dict:
        return {"name": self.name, "placement": self.placement.to_dict(),
                "injections": [i.to_dict() for i in self.injections], "env": dict(self.env),
                "smt": self.smt}


@dataclass(frozen=True)
class ProbePlan:
    """Noise probes (as in `scan`) run before and/or after the workloads."""

    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    duration_ns: int = 5 * SECOND
    cpus: tuple[int, ...] | None = None

    def to_dict(self) -> dict:
        return {"before": list(self.before), "after": list(self.after),
                "duration_ns": self.duration_ns,
                "cpus": list(self.cpus) if self.cpus is not None else None}


# Runs (and warm-up runs) per workload and configuration: the plan lists every
# run up front, and a stream of statistics this long says nothing more.
MAX_RUNS = 100_000


@dataclass(frozen=True)
class Experiment:
    workloads: tuple[Workload, ...]
    configurations: tuple[Configuration, ...] = (Configuration(),)
    runs: int = 10
    warmup: int = 1
    timeout_ns: int = DEFAULT_TIMEOUT_NS
    order: str = "interleaved"
    probes: ProbePlan = ProbePlan()
    name: str | None = None
    source: str | None = None  # the TOML file it came from
    occupancy: OccupancyOptions = OccupancyOptions()  # SMT sibling occupancy, traced live

    def __post_init__(self) -> None:
        if not self.workloads:
            raise UsageError("the experiment has no workload", "add a [[workload]] with a command")
        if not (1 <= self.runs <= MAX_RUNS and 0 <= self.warmup <= MAX_RUNS):
            raise UsageError(f"runs must be >= 1 and warmup >= 0, both at most {MAX_RUNS:,} "
                             f"(got {self.runs}, {self.warmup})", "e.g. --runs 10 --warmup 1")
        if self.timeout_ns <= 0:
            raise UsageError("timeout must be greater than zero", "e.g. --timeout 10m")
        if self.order not in ORDERS:
            raise UsageError(f"unknown order {self.order!r}", "use interleaved or grouped")
        for what, items in (("workload", self.workloads), ("configuration", self.configurations)):
            names = [item.name for item in items]
            if len(set(names)) != len(names):
                raise UsageError(f"two {what}s share a name", f"give every {what} its own name")
        metrics = {m.name: m.better for w in self.workloads for m in w.metrics}
        for w in self.workloads:
            for m in w.metrics:
                if metrics[m.name] != m.better:
                    raise UsageError(f"metric {m.name} is higher-is-better in one workload and "
                                     f"lower-is-better in another", "rename one of them")

    @property
    def metrics(self) -> dict[str, Metric]:
        return {m.name: m for w in self.workloads for m in w.metrics}

    def to_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "runs": self.runs,
                "warmup": self.warmup, "timeout_ns": self.timeout_ns, "order": self.order,
                "workloads": [w.to_dict() for w in self.workloads],
                "configurations": [c.to_dict() for c in self.configurations],
                "probes": self.probes.to_dict(), "occupancy": self.occupancy.to_dict()}


@dataclass(frozen=True)
class Step:
    """One run to do."""

    order: int
    workload: Workload
    configuration: Configuration
    warmup: bool
    repetition: int


def plan_steps(experiment: Experiment) -> list[Step]:
    pairs = [(c, w) for c in experiment.configurations for w in experiment.workloads]
    todo = [(c, w, True, r) for c, w in pairs for r in range(experiment.warmup)]
    if experiment.order == "interleaved":
        todo += [(c, w, False, r) for r in range(experiment.runs) for c, w in pairs]
    else:
        todo += [(c, w, False, r) for c, w in pairs for r in range(experiment.runs)]
    return [Step(i, w, c, warm, r) for i, (c, w, warm, r) in enumerate(todo)]


@dataclass
class Record:
    step: Step
    result: RunResult
    injections: Table  # injected noise during this run (thread mode), if any
    injection_overflow: int = 0
    occupancy: Table = field(default_factory=Table)  # SMT sibling occupancy, if traced


# Called after every run: (runs done, runs planned, the step just finished, its result)
RunCallback = Callable[[int, int, Step, RunResult], None]


@dataclass
class Prepared:
    """Everything checked and decided before the first run."""

    placements: dict[str, ResolvedPlacement]
    injector_priority: int
    diagnostics: list[Diagnostic] = field(default_factory=list)
    occupancy: OccupancyPlan | None = None  # what to trace for sibling occupancy, if anything
    occupancy_note: str = ""  # ... in words, or why nothing


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
    injector_priority = 0
    if any(c.injections for c in experiment.configurations):
        injector_priority = 99 if can_use_fifo(99) else 0
        if not injector_priority:
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
    scaled = sorted({g for c, g in facts.governors.items() if int(c) in used} - {"performance"})
    if scaled:
        notes.append(Diagnostic(Code.FREQUENCY_SCALING, f"frequency governor {', '.join(scaled)} "
                                f"on the workload CPUs: run times follow the clock speed"))
    return Prepared(placements, injector_priority, notes, plan, note)


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
    from .clock import measurement_clock
    from .scan import live_host_facts, utc_now

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


# -- the bundle -------------------------------------------------------------

RUN_COLUMNS = ("order", "workload", "configuration", "warmup", "repetition", "status", "reason",
               "exit_code", "signal", "start_ns", "end_ns", "wall_ns", "user_ns", "sys_ns",
               "maxrss_kib", "voluntary_switches", "involuntary_switches", "minor_faults",
               "major_faults", "system_context_switches", "system_interrupts",
               "system_context_switches_per_s", "system_interrupts_per_s", "injected",
               "injected_ns")


def runs_table(experiment: Experiment, records: list[Record], clock) -> Table:
    rows: dict[str, list] = {name: [] for name in RUN_COLUMNS}
    metrics = list(experiment.metrics)
    values: dict[str, list] = {name: [] for name in metrics}
    for record in records:
        step, r = record.step, record.result
        start_ns, end_ns = (int(v) for v in clock.timestamp_ns(np.array([r.start_ticks,
                                                                          r.end_ticks])))
        seconds = r.wall_ns / 1e9 if r.wall_ns else float("nan")
        inside = record.injections
        if inside.rows:
            inside = inside.filter((inside["start_ns"] >= start_ns) & (inside["start_ns"] <= end_ns))
        for name, value in (
                ("order", step.order), ("workload", step.workload.name),
                ("configuration", step.configuration.name), ("warmup", step.warmup),
                ("repetition", step.repetition), ("status", r.status), ("reason", r.reason),
                ("exit_code", r.exit_code), ("signal", r.signal), ("start_ns", start_ns),
                ("end_ns", end_ns), ("wall_ns", r.wall_ns), ("user_ns", r.user_ns),
                ("sys_ns", r.sys_ns), ("maxrss_kib", r.maxrss_kib),
                ("voluntary_switches", r.voluntary_switches),
                ("involuntary_switches", r.involuntary_switches),
                ("minor_faults", r.minor_faults), ("major_faults", r.major_faults),
                ("system_context_switches", r.system_context_switches),
                ("system_interrupts", r.system_interrupts),
                ("system_context_switches_per_s", r.system_context_switches / seconds),
                ("system_interrupts_per_s", r.system_interrupts / seconds),
                ("injected", inside.rows),
                ("injected_ns", int(inside["duration_ns"].sum()) if inside.rows else 0)):
            rows[name].append(value)
        for name in metrics:
            found = r.metrics.get(name)
            values[name].append(float("nan") if found is None else found)
    types = {"workload": object, "configuration": object, "status": object, "reason": object,
             "warmup": bool, "system_context_switches_per_s": np.float64,
             "system_interrupts_per_s": np.float64}
    columns = {name: np.array(rows[name], dtype=types.get(name, np.int64)) for name in rows}
    columns.update({f"metric_{name}": np.array(values[name], np.float64) for name in metrics})
    if any(record.occupancy.rows for record in records):
        per_run = [shares(record.occupancy) for record in records]
        columns.update({f"sibling_{c}_pct": np.array([run[c] for run in per_run], np.float64)
                        for c in CATEGORIES})
    return Table(columns)


def occupancy_table(records: list[Record]) -> Table:
    """Every traced run's occupancy rows (order links them to the runs table)."""
    return Table.concat(record.occupancy for record in records)


def occupancy_summaries(experiment: Experiment, records: list[Record]) -> list[dict]:
    """Per workload, configuration, CPU and sibling: the shares (%) over the
    successful measured runs, pooled (time-weighted)."""
    rows = []
    for config in experiment.configurations:
        for workload in experiment.workloads:
            mine = [r.occupancy for r in records if r.step.configuration is config
                    and r.step.workload is workload and not r.step.warmup
                    and r.result.status == "ok" and r.occupancy.rows]
            if not mine:
                continue
            table = Table.concat(mine)
            for cpu, sibling in sorted(set(zip(table["cpu"].tolist(), table["sibling"].tolist(),
                                               strict=True))):
                pair = table.where(cpu=cpu, sibling=sibling)
                rows.append({"workload": workload.name, "configuration": config.name,
                             "workload_cpu": cpu, "sibling": sibling, "runs": len(mine),
                             "workload_ns": int(pair["workload_ns"].sum()),
                             **{f"{c}_pct": None if math.isnan(v) else v
                                for c, v in shares(pair).items()}})
    return rows


def injections_table(records: list[Record]) -> Table:
    parts = []
    for record in records:
        if record.injections.rows:
            parts.append(Table({"order": np.full(record.injections.rows, record.step.order,
                                                 np.int64), **record.injections}))
    return Table.concat(parts)


def run_diagnostics(experiment: Experiment, records: list[Record]) -> list[Diagnostic]:
    """Excluded runs and metrics that did not match, per workload and configuration."""
    notes = []
    for config in experiment.configurations:
        for workload in experiment.workloads:
            mine = [r for r in records if r.step.configuration is config
                    and r.step.workload is workload and not r.step.warmup]
            if not mine:
                continue
            where = workload.name + (f" [{config.name}]" if config.name else "")
            excluded = [r.result for r in mine if r.result.status != "ok"]
            if excluded:
                reasons: dict[str, int] = {}
                for result in excluded:
                    reasons[result.reason] = reasons.get(result.reason, 0) + 1
                listed = "; ".join(f"{n} x {why}" for why, n in reasons.items())
                notes.append(Diagnostic(Code.RUN_EXCLUDED, f"{where}: {len(excluded)} of "
                                        f"{len(mine)} runs excluded from statistics ({listed})"))
            ok = [r.result for r in mine if r.result.status == "ok"]
            for metric in workload.metrics:
                missing = sum(1 for result in ok if result.metrics.get(metric.name) is None)
                if missing:
                    notes.append(Diagnostic(
                        Code.METRIC_MISSING, f"{where}: metric {metric.name} (pattern "
                        f"{metric.pattern!r}) not found in the output of {missing} of {len(ok)} "
                        f"successful runs"))
    overflow = sum(r.injection_overflow for r in records)
    if overflow:
        notes.append(Diagnostic(Code.BUFFER_OVERFLOW, f"{overflow} injections beyond the "
                                f"injector buffers were counted but not recorded"))
    return notes


def workload_summaries(experiment: Experiment, runs: Table) -> list[dict]:
    """Per workload and configuration: how many runs, and the medians."""
    rows = []
    measured = runs.filter(~runs["warmup"]) if runs.rows else runs
    for config in experiment.configurations:
        for workload in experiment.workloads:
            if not measured.rows:
                continue
            mine = measured.where(workload=workload.name, configuration=config.name)
            ok = mine.filter(mine["status"] == "ok")
            summary = {"workload": workload.name, "configuration": config.name,
                       "runs": mine.rows, "ok": ok.rows, "excluded": mine.rows - ok.rows}
            for column in ("wall_ns", "user_ns", "sys_ns", "maxrss_kib",
                           "system_context_switches_per_s"):
                summary[f"{column}_median"] = (float(np.median(ok[column])) if ok.rows else None)
            for metric in workload.metrics:
                values = ok[metric.column][~np.isnan(ok[metric.column])] if ok.rows else []
                summary[f"{metric.column}_median"] = (float(np.median(values)) if len(values)
                                                      else None)
            rows.append(summary)
    return rows


def build_bundle(experiment: Experiment, prepared: Prepared, records: list[Record],
                 facts: HostFacts, clock, *, label: str | None, started: str, finished: str,
                 argv: list[str] | None, complete: bool) -> Bundle:
    runs = runs_table(experiment, records, clock)
    diagnostics = list(prepared.diagnostics) + run_diagnostics(experiment, records)
    if not complete:
        planned = len(plan_steps(experiment))
        diagnostics.append(Diagnostic(Code.INTERRUPTED, f"interrupted after {len(records)} of "
                                      f"{planned} runs"))
    parameters = experiment.to_dict()
    for entry in parameters["configurations"]:
        resolved = prepared.placements[entry["name"]]
        entry["cpus"] = list(resolved.cpus) if resolved.cpus is not None else None
    privileges = {"injectors": f"SCHED_FIFO priority {prepared.injector_priority}"
                  if prepared.injector_priority else "normal priority"}
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "kind": "bench",
        "tool": tool_info(),
        "argv": list(argv if argv is not None else sys.argv),
        "label": label,
        "started_utc": started,
        "finished_utc": finished,
        "complete": complete,
        "host": facts.to_dict(),
        "clock": clock.to_dict(),
        "parameters": parameters,
        "privileges": privileges,
        "summaries": {"workloads": workload_summaries(experiment, runs)},
        "warnings": [d.to_dict() for d in diagnostics],
        "occupancy": occupancy_section(prepared),
        "system": check_system("/", _workload_cpus(prepared), facts).to_list(),
        "tables": {},
    }
    tables = {"runs": runs}
    injections = injections_table(records)
    if injections.rows:
        tables["injections"] = injections
    occupancy = occupancy_table(records)
    if occupancy.rows:
        tables["occupancy"] = occupancy
        manifest["summaries"]["occupancy"] = occupancy_summaries(experiment, records)
    return Bundle(manifest, tables)


def _workload_cpus(prepared: Prepared) -> tuple[int, ...] | None:
    """The CPUs the workloads ran on, for the system check; None (the check's default,
    isolated or else all online CPUs) when a configuration left it to the scheduler."""
    placed = [p.cpus for p in prepared.placements.values()]
    if not placed or any(cpus is None for cpus in placed):
        return None
    return tuple(sorted(set().union(*placed)))


def occupancy_section(prepared: Prepared) -> dict:
    """The manifest's `occupancy`: whether sibling occupancy was traced, on
    which CPUs and siblings (or why not)."""
    plan = prepared.occupancy
    section: dict = {"measured": plan is not None, "note": prepared.occupancy_note}
    if plan is not None:
        section.update(source=plan.source, traced_cpus=list(plan.traced),
                       siblings={str(c): list(s) for c, s in sorted(plan.siblings.items())},
                       workload_cpus={name: list(c) for name, c in plan.cpus.items()})
    return section


# -- experiment files ---------------------------------------------------------

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
    from .scan import ScanOptions, live_host_facts, plan, scan

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


class _Where:
    """Names a place in an experiment file for error messages: file:line, section, key."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.lines = text.splitlines()

    def line_of(self, section: str, index: int | None, key: str | None) -> int | None:
        """Line of `key` inside the index-th [[section]] (or [section]); best effort."""
        header = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"' -]+?)\s*\]\]?")
        count, inside, block_start = -1, section == "", None
        for number, line in enumerate(self.lines, 1):
            found = header.match(line)
            if found:
                name = found.group(1).strip("\"' ")
                if name == section:
                    count += 1
                    inside = index is None or count == index
                    if inside:
                        block_start = number
                elif not name.startswith(section + "."):
                    inside = False
                continue
            if inside and key and re.match(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
                return number
            if inside and key and re.search(rf"[{{,]\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
                return number
        return block_start

    def error(self, problem: str, hint: str, section: str, index: int | None,
              key: str | None) -> UsageError:
        line = self.line_of(section, index, key)
        at = f"{self.path}:{line}" if line else str(self.path)
        return UsageError(f"{at}: {problem}", hint)


_TYPE_NAMES = {int: "an integer", str: "a string", bool: "true or false", list: "a list",
               dict: "a table"}


def _check_table(table: dict, allowed: dict[str, tuple[type, ...]], where: _Where, section: str,
                 index: int | None, title: str) -> None:
    for key, value in table.items():
        if key not in allowed:
            raise where.error(f"unknown key {key!r} in {title}",
                              f"known keys: {', '.join(sorted(allowed))}", section, index, key)
        kinds = allowed[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            wanted = " or ".join(_TYPE_NAMES[k] for k in kinds)
            raise where.error(f"{key} in {title} must be {wanted}, not {value!r}",
                              f"e.g. {_EXAMPLES.get(key, key + ' = ...')}", section, index, key)


_EXAMPLES = {"runs": "runs = 10", "warmup": "warmup = 1", "timeout": 'timeout = "10m"',
             "command": 'command = ["xz", "-9", "file"]', "shell": 'shell = "make -j2"',
             "cpus": 'cpus = "0-3"', "ncpus": "ncpus = 4", "layout": 'layout = "spread"',
             "fifo": "fifo = 50", "inject": 'inject = ["1kHz:20us@cpu1"]',
             "metrics": 'metrics = { tps = "tps: ([0-9.]+)" }', "env": 'env = { OMP_NUM_THREADS = "4" }',
             "before": 'before = ["detour"]', "after": 'after = ["detour"]',
             "duration": 'duration = "5s"', "name": 'name = "compile"', "cwd": 'cwd = "src"',
             "order": 'order = "interleaved"', "core_scheduling": "core_scheduling = true",
             "smt": 'smt = "off"'}

_SECTIONS = {"experiment": dict, "probes": dict, "workload": list, "configuration": list}
_EXPERIMENT_KEYS = {"name": (str,), "runs": (int,), "warmup": (int,), "timeout": (str, int, float),
                    "order": (str,)}
_PROBE_KEYS = {"before": (list,), "after": (list,), "duration": (str, int, float),
               "cpus": (str, int)}
_WORKLOAD_KEYS = {"name": (str,), "command": (list,), "shell": (str,), "cwd": (str,),
                  "env": (dict,), "metrics": (dict,)}
_CONFIGURATION_KEYS = {"name": (str,), "cpus": (str, int), "ncpus": (int,), "layout": (str,),
                       "fifo": (int,), "core_scheduling": (bool,), "inject": (list,),
                       "env": (dict,), "smt": (str,)}
_METRIC_KEYS = {"pattern": (str,), "better": (str,)}


def load_experiment(path: str | os.PathLike[str]) -> Experiment:
    """Read an experiment file; every mistake is a UsageError naming file, line and key."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as error:
        raise UsageError(f"cannot read experiment file {file}: {error.strerror}",
                         "check the path") from None
    except UnicodeDecodeError:
        raise UsageError(f"experiment file {file} is not text (not UTF-8)",
                         "give a TOML file, see docs/examples/run.md") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{file}: not valid TOML: {error}", "fix the syntax at that line") from None
    where = _Where(file, text)
    base = file.resolve().parent
    for key, value in data.items():
        if key not in _SECTIONS:
            raise where.error(f"unknown section {key!r}", "sections: [experiment], [probes], "
                              "[[workload]], [[configuration]]", key, None, None)
        if not isinstance(value, _SECTIONS[key]):
            shape = f"[[{key}]]" if _SECTIONS[key] is list else f"[{key}]"
            raise where.error(f"{key} must be written as {shape}", "see docs/examples/run.md",
                              key, None, None)
    settings = data.get("experiment", {})
    _check_table(settings, _EXPERIMENT_KEYS, where, "experiment", None, "[experiment]")
    probes = data.get("probes", {})
    _check_table(probes, _PROBE_KEYS, where, "probes", None, "[probes]")
    workloads = tuple(_workload(entry, i, where, base)
                      for i, entry in enumerate(data.get("workload", [])))
    configurations = tuple(_configuration(entry, i, where)
                           for i, entry in enumerate(data.get("configuration", [])))

    try:
        plan = ProbePlan(
            before=_probe_names(probes.get("before", []), where, "before"),
            after=_probe_names(probes.get("after", []), where, "after"),
            duration_ns=parse_positive_duration(probes.get("duration", "5s"),
                                                what="probe duration"),
            cpus=parse_cpu_list(str(probes["cpus"])) if "cpus" in probes else None)
    except UsageError as error:
        raise where.error(error.problem, error.hint or "", "probes", None,
                          _culprit(probes, error)) from None
    try:
        return Experiment(
            workloads=workloads, configurations=configurations or (Configuration(),),
            runs=settings.get("runs", 10), warmup=settings.get("warmup", 1),
            timeout_ns=parse_positive_duration(settings.get("timeout", "10m"), what="timeout"),
            order=settings.get("order", "interleaved"), probes=plan,
            name=settings.get("name"), source=str(file))
    except UsageError as error:
        raise where.error(error.problem, error.hint or "", "experiment", None,
                          _culprit(settings, error)) from None


def _culprit(table: dict, error: UsageError) -> str | None:
    """The key of `table` an error message is about (for its line number): one
    the message names, else one whose value it quotes."""
    text = str(error).lower()
    named = [key for key in table if re.search(rf"\b{re.escape(key.lower())}\b", text)]
    quoted = [key for key, value in table.items()
              if isinstance(value, (str, int)) and f"{value}".lower() in text]
    return next(iter(named + quoted), None)


def _probe_names(names: list, where: _Where, key: str) -> tuple[str, ...]:
    for name in names:
        if name not in PROBES:
            raise where.error(f"unknown probe {name!r} in [probes] {key}",
                              f"choose from {', '.join(PROBES)}", "probes", None, key)
    return tuple(names)


def _workload(entry: dict, index: int, where: _Where, base: Path) -> Workload:
    title = f"[[workload]] {index + 1}"
    _check_table(entry, _WORKLOAD_KEYS, where, "workload", index, title)
    if ("command" in entry) == ("shell" in entry):
        raise where.error(f"{title} needs either command (a list) or shell (a string)",
                          _EXAMPLES["command"], "workload", index, None)
    command = entry.get("command")
    if command is not None and (not command or not all(isinstance(a, str) for a in command)):
        raise where.error(f"command in {title} must be a non-empty list of strings",
                          _EXAMPLES["command"], "workload", index, "command")
    argv = tuple(command) if command is not None else (entry["shell"],)
    name = entry.get("name") or os.path.basename(argv[0].split()[0] if argv[0].split() else "x")
    metrics = []
    for metric_name, spec in entry.get("metrics", {}).items():
        if isinstance(spec, dict):
            _check_table(spec, _METRIC_KEYS, where, "workload", index,
                         f"metric {metric_name} of {title}")
            pattern, better = spec.get("pattern"), spec.get("better", "higher")
        else:
            pattern, better = spec, "higher"
        if not isinstance(pattern, str):
            raise where.error(f"metric {metric_name} of {title} needs a pattern (a string)",
                              _EXAMPLES["metrics"], "workload", index, metric_name)
        try:
            metrics.append(Metric(metric_name, pattern, better))
        except UsageError as error:
            raise where.error(error.problem, error.hint or "", "workload", index,
                              metric_name) from None
    env = entry.get("env", {})
    if not all(isinstance(v, str) for v in env.values()):
        raise where.error(f"env values in {title} must be strings", _EXAMPLES["env"],
                          "workload", index, "env")
    cwd = entry.get("cwd")
    try:
        return Workload(name, argv, shell="shell" in entry,
                        cwd=str(base / cwd) if cwd is not None else str(base),
                        env=tuple(env.items()), metrics=tuple(metrics))
    except UsageError as error:
        raise where.error(error.problem, error.hint or "", "workload", index, None) from None


def _configuration(entry: dict, index: int, where: _Where) -> Configuration:
    title = f"[[configuration]] {index + 1}"
    _check_table(entry, _CONFIGURATION_KEYS, where, "configuration", index, title)
    if "name" not in entry:
        raise where.error(f"{title} has no name", 'e.g. name = "packed"', "configuration",
                          index, None)
    try:
        placement = Placement(
            cpus=parse_cpu_list(str(entry["cpus"])) if "cpus" in entry else None, ncpus=entry.get("ncpus"),
            layout=entry.get("layout", "packed"), fifo_priority=entry.get("fifo", 0),
            core_scheduling=entry.get("core_scheduling", False))
        injections = tuple(Injection.parse(str(spec), default_mode="thread")
                           for spec in entry.get("inject", []))
        configuration = Configuration(entry["name"], placement, injections, smt=entry.get("smt"))
    except UsageError as error:
        raise where.error(error.problem, error.hint or "", "configuration", index,
                          _culprit(entry, error)) from None
    env = entry.get("env", {})
    if not all(isinstance(v, str) for v in env.values()):
        raise where.error(f"env values in {title} must be strings", _EXAMPLES["env"],
                          "configuration", index, "env")
    return replace(configuration, env=tuple(env.items()))


def override(experiment: Experiment, *, runs: int | None = None, warmup: int | None = None,
             configurations: Iterable[str] | None = None,
             occupancy: OccupancyOptions | None = None) -> Experiment:
    """The experiment with repetitions, the configurations to run or the
    sibling occupancy options replaced (from the command line)."""
    changes: dict = {k: v for k, v in (("runs", runs), ("warmup", warmup), ("occupancy", occupancy))
                     if v is not None}
    if configurations is not None:
        by_name = {c.name: c for c in experiment.configurations}
        wanted = [name.strip() for name in configurations if name.strip()]
        unknown = [name for name in wanted if name not in by_name]
        if unknown or not wanted:
            raise UsageError(f"no configuration {', '.join(unknown) or '(none given)'} in the "
                             f"experiment", f"choose from: {', '.join(by_name) or '(unnamed)'}")
        changes["configurations"] = tuple(by_name[name] for name in wanted)
    return replace(experiment, **changes) if changes else experiment
