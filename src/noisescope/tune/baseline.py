"""The dry run of `noisescope tune`: check -> traced baseline scan of the
target CPUs (detour probe) -> plan -> bundle of kind `tune` (the baseline
with the plan in `summaries["plan"]`). Read-only: the only thing it writes is
the bundle; the scan's own settings (tracing, PM QoS) are restored by it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..bundle import Bundle, check_destination
from ..diagnostics import Code, Diagnostic
from ..errors import UsageError, option
from ..host import HostFacts, HostRoot, check_cpus, live_host_facts
from ..privileges import is_root
from ..scan import ScanOptions, ScanProgress, scan
from ..system import Finding
from ..tables import Table
from ..units import SECOND, format_cpu_list
from .plan import PlanEntry, make_plan

CAUSE_COLUMNS = {"cpu": np.int32, "start_ns": np.int64, "cause": object, "detail": object,
                 "duration_ns": np.int64}


@dataclass(frozen=True)
class TuneOptions:
    cpus: tuple[int, ...]  # the target CPUs
    duration_ns: int = 10 * SECOND  # of the baseline
    label: str | None = None

    def check(self) -> None:
        if not self.cpus:
            raise UsageError("no target CPUs", f"name them with {option('cpus', '1')}")


@dataclass
class TuneResult:
    bundle: Bundle  # the baseline (kind `tune`), with the plan in summaries["plan"]
    housekeeping: tuple[int, ...]
    plan: list[PlanEntry] = field(default_factory=list)


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
         progress: ScanProgress | None = None) -> TuneResult:
    """Measure the baseline of `options.cpus` and plan; write the bundle to
    `destination` if given. Refuses (UsageError, before measuring) unknown or
    offline CPUs, targets that leave no housekeeping CPU, and a user who is not
    root: without tracing there is no attribution to plan from."""
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
    # The bundle is written once the plan is in it: measured in memory, then written whole.
    bundle = scan(baseline, argv=argv, facts=facts, progress=progress, kind="tune")
    plan = plan_bundle(bundle, targets, keep, own_pid=os.getpid())
    bundle.manifest["parameters"]["housekeeping"] = list(keep)
    bundle.manifest["summaries"]["plan"] = [entry.to_dict() for entry in plan]
    if not bundle.has_table("detour_causes"):
        bundle.manifest["warnings"].append(Diagnostic(
            Code.TRACING_UNAVAILABLE, "no attribution (tracing was unavailable): the plan holds only the "
                          "system settings, no IRQ or task candidates").to_dict())
    if destination is not None:
        bundle.write(destination)
    return TuneResult(bundle, keep, plan)


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
