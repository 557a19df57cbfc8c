"""The `bench` bundle of an experiment: the `runs` table, injections and sibling
occupancy, per-workload summaries, the diagnostics of excluded runs."""

from __future__ import annotations

import math

import numpy as np

from ..bundle import Bundle
from ..diagnostics import Code, Diagnostic
from ..host import HostFacts
from ..manifest import new_manifest
from ..system import check_system
from ..tables import Table
from ..trace.siblings import CATEGORIES, shares
from .model import Experiment, Prepared, Record, plan_steps

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
    manifest = new_manifest(
        "bench", label=label, started_utc=started, finished_utc=finished, argv=argv,
        complete=complete, host=facts.to_dict(), clock=clock.to_dict(), parameters=parameters,
        privileges=privileges, summaries={"workloads": workload_summaries(experiment, runs)},
        warnings=[d.to_dict() for d in diagnostics], occupancy=occupancy_section(prepared),
        system=check_system("/", _workload_cpus(prepared), facts).to_list())
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
