"""`noisescope scan`: run the probes on every measured CPU and build a bundle.

check (CPUs, threshold, output, privileges) -> clock -> for each probe:
run on all CPUs at once -> summaries, diagnostics -> Bundle. Ctrl-C ends
the current probe early, skips the rest and keeps what was measured.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from .analysis.spectrum import add_spectra
from .bundle import SCHEMA_VERSION, Bundle, tool_info
from .clock import MeasurementClock, measurement_clock
from .diagnostics import Code, Diagnostic
from .errors import UsageError
from .host import (
    HostFacts,
    check_cpus,
    cpuid_hypervisor_signature,
    estimate_hz,
    read_host_facts,
    read_interrupts,
)
from .privileges import can_use_fifo, is_root, memory_locked
from .probes import PROBES, Injection, ProbeContext, ProbeResult, quantum
from .probes import detour as detour_probe
from .probes.schedule import plan_windows, rt_budget_ns
from .system import check_system
from .tables import Table
from .units import format_cpu_list, format_duration, parse_cpu_list

SECOND = 1_000_000_000
SHORT_MEASUREMENT_NS = 5 * SECOND
DEFAULT_RT_PRIORITY = 95

ScanProgress = Callable[[str, float], None]  # probe name, fraction done


@dataclass(frozen=True)
class ScanOptions:
    cpus: tuple[int, ...] | None = None  # None: every online CPU we may run on
    duration_ns: int = 10 * SECOND  # per probe
    probes: tuple[str, ...] = PROBES
    threshold_ns: int = 1_000
    rt: bool = False
    priority: int = DEFAULT_RT_PRIORITY
    runtime_ns: int | None = None
    period_ns: int | None = None
    quantum_ns: int = 1_000_000
    max_detours: int | None = None
    injections: tuple[Injection, ...] = ()
    label: str | None = None
    start_mono_ns: int = 0  # first window (CLOCK_MONOTONIC); 0: as soon as ready

    def to_dict(self) -> dict:
        data = asdict(self)
        data["cpus"] = list(self.cpus) if self.cpus is not None else None
        data["probes"] = list(self.probes)
        data["injections"] = [i.to_dict() for i in self.injections]
        return data


@dataclass
class ScanPlan:
    """Everything decided before measuring."""

    cpus: tuple[int, ...]
    priority: int
    privileges: dict[str, str]
    diagnostics: list[Diagnostic] = field(default_factory=list)


def check_threshold(threshold_ns: int, clock: MeasurementClock) -> None:
    resolution = detour_probe.loop_resolution_ticks(clock.ticks_per_ns)
    minimum = detour_probe.minimum_threshold_ticks(resolution)
    if clock.ticks(threshold_ns) < minimum:
        floor_ns = minimum / clock.ticks_per_ns
        raise UsageError(
            f"threshold {format_duration(threshold_ns)} is below what the loop can resolve "
            f"(one iteration takes {resolution} cycles = "
            f"{format_duration(resolution / clock.ticks_per_ns)})",
            f"use --threshold {format_duration(floor_ns * 1.2, precision=2).replace(' ', '')} "
            f"or more")


def plan(options: ScanOptions, facts: HostFacts) -> ScanPlan:
    cpus = check_cpus(options.cpus, facts)
    for injection in options.injections:
        if injection.cpu not in facts.online:
            raise UsageError(f"injection CPU {injection.cpu} is offline or does not exist",
                             f"pick from {facts.online_cpus}")
    if not 1 <= options.priority <= 99:
        raise UsageError(f"priority {options.priority} is out of range", "use 1-99")
    unknown = [p for p in options.probes if p not in PROBES]
    if unknown or not options.probes:
        raise UsageError(f"unknown probe {', '.join(unknown) or '(none)'}",
                         f"choose from {','.join(PROBES)}")
    notes: list[Diagnostic] = []
    privileges = {"root": "yes" if is_root() else "no"}
    priority = 0
    if options.rt:
        if can_use_fifo(options.priority):
            priority = options.priority
            privileges["rt"] = f"SCHED_FIFO priority {priority}"
        else:
            privileges["rt"] = "skipped: SCHED_FIFO not permitted (needs root or CAP_SYS_NICE)"
            notes.append(Diagnostic(Code.PRIVILEGES, "--rt skipped: this process may not use "
                                    "SCHED_FIFO; sampling at normal priority"))
    else:
        privileges["rt"] = "not requested"
    isolated = set(parse_cpu_list(facts.isolated_cpus)) if facts.isolated_cpus else set()
    nohz = set(parse_cpu_list(facts.nohz_full_cpus)) if facts.nohz_full_cpus else set()
    shared = [c for c in cpus if c not in isolated or c not in nohz]
    if shared:
        notes.append(Diagnostic(Code.CPU_NOT_ISOLATED,
                                f"CPUs {format_cpu_list(shared)} are not isolated "
                                f"(isolcpus/nohz_full): the result includes housekeeping noise"))
    scaled = sorted({g for c, g in facts.governors.items() if int(c) in cpus} - {"performance"})
    if scaled:
        notes.append(Diagnostic(Code.FREQUENCY_SCALING,
                                f"frequency governor {', '.join(scaled)} on measured CPUs: "
                                f"the work per quantum can change with the clock speed"))
    if options.duration_ns < SHORT_MEASUREMENT_NS:
        notes.append(Diagnostic(Code.TOO_SHORT,
                                f"each probe measures only {format_duration(options.duration_ns)}"))
    return ScanPlan(cpus, priority, privileges, notes)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def default_output(facts: HostFacts) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"noisescope-{facts.hostname or 'host'}-{stamp}"


def live_host_facts() -> HostFacts:
    return read_host_facts("/", cpuid_signature=cpuid_hypervisor_signature())


def _hz_estimate(before, after, elapsed_ns: int, cpus: tuple[int, ...],
                 injected: set[int]) -> dict:
    local = after.delta(before).get("LOC", {})
    rates = {c: local.get(c, 0) / (elapsed_ns / 1e9) for c in cpus if c not in injected}
    return {"hz": estimate_hz(rates), "local_timer_per_s": {str(c): r for c, r in rates.items()}}


def _run_probe(name: str, ctx: ProbeContext, options: ScanOptions) -> ProbeResult:
    if name == "detour":
        return detour_probe.run(ctx, threshold_ns=options.threshold_ns,
                                max_detours=options.max_detours)
    if name == "ftq":
        return quantum.run_ftq(ctx, quantum_ns=options.quantum_ns)
    return quantum.run_fwq(ctx, work_ns=options.quantum_ns)


def scan(options: ScanOptions, *, argv: list[str] | None = None,
         facts: HostFacts | None = None, progress: ScanProgress | None = None,
         destination: str | os.PathLike[str] | None = None) -> Bundle:
    """Measure, and write the bundle to `destination` if given (checked first)."""
    from .bundle import check_destination

    started = utc_now()
    facts = facts or live_host_facts()
    scan_plan = plan(options, facts)
    system = check_system("/", scan_plan.cpus, facts)
    if destination is not None:
        check_destination(Path(destination))
    if options.quantum_ns <= 0 or options.quantum_ns > options.duration_ns:
        raise UsageError(f"quantum {format_duration(options.quantum_ns)} does not fit the "
                         f"duration", "use a quantum shorter than --duration, e.g. 1ms")
    schedule, notes = plan_windows(
        options.duration_ns, rt=scan_plan.priority > 0, runtime_ns=options.runtime_ns,
        period_ns=options.period_ns, rt_budget=rt_budget_ns(facts.rt_runtime_us,
                                                             facts.rt_period_us))
    scan_plan.diagnostics.extend(notes)
    clock = measurement_clock(facts.tsc_flags)
    if clock.frequency_source != "kernel":
        scan_plan.diagnostics.append(Diagnostic(
            Code.CLOCK, f"clock rate {clock.ticks_per_second / 1e6:.3f} MHz was "
                        f"{clock.frequency_source}, not stated by the kernel"))
    if "detour" in options.probes:
        check_threshold(options.threshold_ns, clock)

    injector_priority = 99 if can_use_fifo(99) else 0
    results: list[ProbeResult] = []
    interrupted = False
    hz: dict = {}
    with memory_locked() as locking:
        scan_plan.privileges["mlockall"] = locking
        if locking != "locked":
            scan_plan.diagnostics.append(Diagnostic(Code.PRIVILEGES, f"mlockall {locking}"))
        for name in options.probes:
            report = (lambda fraction, n=name: progress(n, fraction)) if progress else None
            ctx = ProbeContext(scan_plan.cpus, schedule, clock, scan_plan.priority,
                               options.injections, injector_priority, options.start_mono_ns,
                               report)
            irq_before, begun = read_interrupts(), time.monotonic_ns()
            result = _run_probe(name, ctx, options)
            if not hz and not result.interrupted:
                hz = _hz_estimate(irq_before, read_interrupts(), time.monotonic_ns() - begun,
                                  scan_plan.cpus, {i.cpu for i in options.injections})
            results.append(result)
            if progress:
                progress(name, 1.0)
            if result.interrupted:
                interrupted = True
                break
    if interrupted:
        scan_plan.diagnostics.append(Diagnostic(
            Code.INTERRUPTED, f"interrupted during {results[-1].probe}; "
                              f"probes not run: {', '.join(options.probes[len(results):]) or 'none'}"))
    bundle = build_bundle(options, scan_plan, replace(facts, hz_estimate=hz), clock, schedule,
                          results, started=started, argv=argv, complete=not interrupted)
    bundle.manifest["system"] = system.to_list()
    add_spectra(bundle)
    if destination is not None:
        bundle.write(destination)
    return bundle


def build_bundle(options: ScanOptions, scan_plan: ScanPlan, facts: HostFacts,
                 clock: MeasurementClock, schedule, results: list[ProbeResult], *,
                 started: str, argv: list[str] | None, complete: bool) -> Bundle:
    tables: dict[str, list[Table]] = {}
    diagnostics = list(scan_plan.diagnostics)
    for result in results:
        diagnostics.extend(result.diagnostics)
        for name, table in result.tables.items():
            tables.setdefault(name, []).append(table)
    parameters = {
        **options.to_dict(),
        "cpus": list(scan_plan.cpus),
        "priority": scan_plan.priority,
        "schedule": schedule.to_dict(),
        "unit_iterations": quantum.UNIT_ITERATIONS,
        "hourglass_cycles": detour_probe.HOURGLASS_CYCLES,
    }
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "kind": "scan",
        "tool": tool_info(),
        "argv": list(argv if argv is not None else sys.argv),
        "label": options.label,
        "started_utc": started,
        "finished_utc": utc_now(),
        "complete": complete,
        "host": facts.to_dict(),
        "clock": clock.to_dict(),
        "parameters": parameters,
        "privileges": scan_plan.privileges,
        "summaries": {r.probe: r.summaries for r in results},
        "warnings": [d.to_dict() for d in diagnostics],
        "tables": {},
    }
    return Bundle(manifest, {name: Table.concat(parts) for name, parts in tables.items()})
