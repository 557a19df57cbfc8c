"""`noisescope scan`: run the probes on every measured CPU and build a bundle.

check (CPUs, threshold, output, privileges) -> clock -> for each probe:
run on all CPUs at once -> summaries, diagnostics -> analysis -> Bundle.
A stopping signal (Ctrl-C, SIGTERM, SIGHUP, ...: `interrupts`) ends the
current probe early, skips the rest and keeps what was measured; one that
comes later ends the analysis; a second one also leaves out the kernel
events table. Whatever comes, what was measured is written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

from . import interrupts, prechecks
from .analysis.groundtruth import match_probe_injections
from .analysis.spectrum import bundle_spectra, store_spectra
from .bundle import Bundle
from .clock import MeasurementClock, measurement_clock
from .diagnostics import Code, Diagnostic
from .errors import UsageError, option
from .host import (
    HostFacts,
    check_cpus,
    estimate_hz,
    live_host_facts,
    read_interrupts,
)
from .leftovers import make_workdir, samples_workdir
from .manifest import new_manifest, utc_now
from .memory import available_kib
from .privileges import is_root, memory_locked
from .probes import (
    DEFAULT_PROBES,
    REGISTRY,
    Injection,
    Probe,
    ProbeContext,
    ProbeResult,
    manifest_constants,
)
from .probes import detour as detour_probe
from .probes import timerlat as timerlat_probe
from .probes.schedule import WindowSchedule, plan_windows, rt_budget_ns
from .system import check_system
from .tables import Table
from .trace.scanning import ScanTracing, TraceOptions
from .trace.session import check_buffer_kb
from .units import SECOND, format_duration, format_size_kib

DEFAULT_RT_PRIORITY = 95
# Every probe stores a sample (and a window) as two uint64 values.
SAMPLE_BYTES = 16
BUFFER_MEMORY_SHARE = 0.25
# With a fixed start (start_mono_ns), probe k starts at start + k * (its schedule's
# elapsed time + this gap): scans started together on several nodes stay aligned
# probe after probe. The gap covers ending one probe and preparing the next.
ALIGNED_PROBE_GAP_NS = 500_000_000


class ScanProgress(Protocol):
    """Told when each probe starts and ends (fraction 0 and 1), and, when
    `live`, about once a second while it measures: each of those updates
    wakes this process on one of the measured CPUs (a detour), so only a
    display someone watches should ask for them."""

    live: bool

    def __call__(self, probe: str, fraction: float) -> None: ...


@dataclass(frozen=True)
class ScanOptions:
    cpus: tuple[int, ...] | None = None  # None: every online CPU we may run on
    duration_ns: int = 10 * SECOND  # per probe
    probes: tuple[str, ...] = DEFAULT_PROBES
    threshold_ns: int = 1_000
    rt: bool = False
    priority: int = DEFAULT_RT_PRIORITY
    runtime_ns: int | None = None
    period_ns: int | None = None
    quantum_ns: int = 1_000_000
    max_detours: int | None = None
    interval_ns: int = timerlat_probe.DEFAULT_INTERVAL_NS  # timerlat period
    histogram_ns: int = timerlat_probe.DEFAULT_HISTOGRAM_NS  # timerlat histogram limit
    keep_series: bool = True  # timerlat: store every latency, not only the histogram
    injections: tuple[Injection, ...] = ()
    label: str | None = None
    start_mono_ns: int = 0  # first probe's first window (CLOCK_MONOTONIC); 0: as soon as ready
    trace: TraceOptions = TraceOptions()  # kernel tracing to explain detours

    def check(self) -> None:
        """What the options alone can get wrong (plan() checks them against the machine)."""
        if not 1 <= self.priority <= 99:
            raise UsageError(f"priority {self.priority} is out of range", "use 1-99")
        if self.max_detours is not None and not 0 < self.max_detours < 2**63:
            raise UsageError(f"{option('max_detours')} {self.max_detours} is out of range (a "
                             f"count of stored detours per CPU, from 1 to 2^63-1)",
                             f"leave it out to store every detour, or e.g. "
                             f"{option('max_detours', '1000000')}")
        unknown = [p for p in self.probes if p not in REGISTRY]
        if unknown or not self.probes:
            raise UsageError(f"unknown probe {', '.join(unknown) or '(none)'}",
                             f"choose from {','.join(REGISTRY)}")

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


def chosen_probes(options: ScanOptions) -> list[tuple[Probe, object]]:
    """The probes the scan runs, in the registry's order, each with its settings."""
    return [(probe, probe.settings(options)) for name, probe in REGISTRY.items()
            if name in options.probes]


def plan(options: ScanOptions, facts: HostFacts) -> ScanPlan:
    cpus = check_cpus(options.cpus, facts)
    for injection in options.injections:
        if injection.cpu not in facts.online:
            raise UsageError(f"injection CPU {injection.cpu} is offline or does not exist",
                             f"pick from {facts.online_cpus}")
    options.check()
    notes: list[Diagnostic] = []
    priority, rt = prechecks.sampler_priority(options.priority, options.rt)
    privileges = {"root": "yes" if is_root() else "no", "rt": rt}
    if options.rt and not priority:
        notes.append(Diagnostic(Code.PRIVILEGES, f"SCHED_FIFO priority {options.priority} "
                                f"skipped (not permitted); sampling at normal priority"))
    notes += prechecks.not_isolated(facts, cpus)
    notes += prechecks.frequency_scaling(facts, cpus, "measured CPUs",
                                         "the work per quantum can change with the clock speed")
    notes += prechecks.too_short(options.duration_ns)
    return ScanPlan(cpus, priority, privileges, notes)


def check_buffers(options: ScanOptions, schedule: WindowSchedule, ncpus: int,
                  available: int | None) -> None:
    """Refuse (before measuring) a scan whose preallocated buffers (the rings of
    samples and the windows of each probe, for every CPU) would not fit
    BUFFER_MEMORY_SHARE of the available memory."""
    if available is None:
        return
    allowed_kib = available * BUFFER_MEMORY_SHARE
    for probe in options.probes:
        samples = (REGISTRY[probe].ring_size(REGISTRY[probe].settings(options), schedule, ncpus)
                   + schedule.windows)
        need_kib = samples * SAMPLE_BYTES * ncpus / 1024
        if need_kib > allowed_kib:
            raise UsageError(
                f"the {probe} probe would hold {format_size_kib(need_kib)} of samples in memory "
                f"({samples:,} per CPU for {format_duration(options.duration_ns)} on {ncpus} "
                f"CPU{'s' if ncpus != 1 else ''}), more than {BUFFER_MEMORY_SHARE:.0%} of the "
                f"available {format_size_kib(available)}",
                f"measure for less time, on fewer CPUs ({option('cpus')}), or with longer windows "
                f"({option('runtime_ns')}) and quanta ({option('quantum_ns')})")


def _hz_estimate(before, after, elapsed_ns: int, cpus: tuple[int, ...],
                 injected: set[int]) -> dict:
    local = after.delta(before).get("LOC", {})
    rates = {c: local.get(c, 0) / (elapsed_ns / 1e9) for c in cpus if c not in injected}
    return {"hz": estimate_hz(rates), "local_timer_per_s": {str(c): r for c, r in rates.items()}}


def _cost_run(ctx: ProbeContext, options: ScanOptions, duration_ns: int) -> ProbeResult:
    """A short detour run of the measurement of tracing's own cost (`--trace-cost`)."""
    schedule, _ = plan_windows(duration_ns, rt=ctx.priority > 0, runtime_ns=options.runtime_ns,
                               period_ns=options.period_ns)
    return detour_probe.run(replace(ctx, schedule=schedule, progress=None),
                            threshold_ns=options.threshold_ns, max_detours=options.max_detours)


def probe_start_ns(first_ns: int, schedule, index: int) -> int:
    """When probe number `index` starts if the scan starts at `first_ns` (0: each
    probe as soon as it is ready)."""
    return first_ns + index * (schedule.elapsed_ns + ALIGNED_PROBE_GAP_NS) if first_ns else 0


def scan(options: ScanOptions, *, argv: list[str] | None = None,
         facts: HostFacts | None = None, progress: ScanProgress | None = None,
         destination: str | os.PathLike[str] | None = None, kind: str = "scan",
         on_ready: Callable[[], int] | None = None,
         amend: Callable[[Bundle], None] | None = None) -> Bundle:
    """Measure, and write the bundle to `destination` if given (checked first).
    `kind` names the command in the manifest (a `timerlat` run is a scan too).
    `on_ready`, if given, is called once everything is checked and the clock is
    known, just before measuring; it returns the start (CLOCK_MONOTONIC ns) to
    use instead of options.start_mono_ns (cluster scans agree on it there).
    `amend` completes the manifest before it is written."""
    from .bundle import check_destination

    started = utc_now()
    facts = facts or live_host_facts()
    scan_plan = plan(options, facts)
    if destination is not None:
        check_destination(Path(destination))
    probes = chosen_probes(options)
    for probe, settings in probes:
        probe.check_duration(settings, options.duration_ns)
    # Only spinning SCHED_FIFO samplers can run into RT throttling and need
    # windows with gaps; a sleeper (timerlat) measures back to back.
    spins = scan_plan.priority > 0 and any(not probe.sleeps for probe, _ in probes)
    schedule, notes = plan_windows(
        options.duration_ns, rt=bool(spins), runtime_ns=options.runtime_ns,
        period_ns=options.period_ns,
        rt_budget=rt_budget_ns(facts.rt_runtime_us, facts.rt_period_us) if spins else None)
    scan_plan.diagnostics.extend(notes)
    check_buffers(options, schedule, len(scan_plan.cpus), available_kib())
    if options.trace.enabled:
        check_buffer_kb(options.trace.buffer_kb, len(scan_plan.cpus), available_kib())
    for probe, settings in probes:
        probe.check_windows(settings, schedule)
    clock = measurement_clock(facts.tsc_flags)
    if clock.frequency_source != "kernel":
        scan_plan.diagnostics.append(Diagnostic(
            Code.CLOCK, f"clock rate {clock.ticks_per_second / 1e6:.3f} MHz was "
                        f"{clock.frequency_source}, not stated by the kernel"))
    for probe, settings in probes:
        probe.check_clock(settings, clock)

    with interrupts.keeping(destination, stopping="stopping before anything is measured") as keep:
        keep.measured = False
        tracing = ScanTracing.begin(options.trace, scan_plan.cpus, clock,
                                    schedule.elapsed_ns + SECOND,
                                    Path(destination) if destination is not None else None)
        if not facts.tracers and tracing.session is not None:  # tracefs was not mounted before
            facts = replace(facts, tracers=tracing.session.info.tracers)
        samples = None
        try:
            if destination is not None:  # the samples go to files, not memory, as they come
                samples = spool_directory(Path(destination))
            return _measure(options, scan_plan, facts, clock, schedule, tracing, keep,
                            started=started, argv=argv, progress=progress,
                            destination=destination, kind=kind, on_ready=on_ready, amend=amend,
                            spool_dir=samples)
        finally:
            tracing.close()
            tracing.discard()
            if samples is not None:  # the bundle holds its copy now (or the scan failed)
                shutil.rmtree(samples, ignore_errors=True)


# The room a file system must have left for the samples spooled beside the bundle
# (and the attributed detours parked there): beyond a minute of a busy node, so a
# disk nearly full is not filled while measuring (the spool does not survive that).
SPOOL_ROOM_BYTES = 256 << 20


def spool_directory(destination: Path) -> Path | None:
    """Where the samples of a scan that writes `destination` are spooled: beside
    it (a salvage finds them there), else in the temporary directory where the
    destination's file system lacks SPOOL_ROOM_BYTES, else (no room there either)
    None: they are kept in memory, as without a destination."""
    temporary = Path(tempfile.gettempdir()) / destination.name
    for place in (samples_workdir(destination, os.getpid()), samples_workdir(temporary, os.getpid())):
        try:
            room = os.statvfs(place.parent)
            if room.f_bavail * room.f_frsize >= SPOOL_ROOM_BYTES:
                return make_workdir(place)
        except OSError:
            continue
    return None


def _measure(options: ScanOptions, scan_plan: ScanPlan, facts: HostFacts, clock: MeasurementClock,
             schedule, tracing: ScanTracing, keep: interrupts.Frame, *, started: str,
             argv: list[str] | None, progress: ScanProgress | None, destination, kind: str,
             on_ready: Callable[[], int] | None,
             amend: Callable[[Bundle], None] | None = None, spool_dir: Path | None = None
             ) -> Bundle:
    if on_ready is not None:
        options = replace(options, start_mono_ns=on_ready())
    stage = interrupts.Stage()  # the analysis, which a stop cuts short
    keep.stopping = "stopping the probes"
    keep.optional = ["the rest of the analysis" + (" and of the trace" if tracing.active else "")]
    keep.give_up = stage.give_up
    results, stopped, hz = _run_probes(options, scan_plan, clock, schedule, tracing, progress,
                                       keep, spool_dir)
    if stopped and not results:
        raise KeyboardInterrupt  # nothing measured, nothing to keep
    if stopped:
        scan_plan.diagnostics.append(Diagnostic(
            Code.INTERRUPTED, f"interrupted {stopped}; "
                              f"probes not run: {', '.join(options.probes[len(results):]) or 'none'}"))
    bundle = build_bundle(options, scan_plan, replace(facts, hz_estimate=hz), clock, schedule,
                          results, started=started, argv=argv, complete=stopped is None,
                          kind=kind, tracing=tracing, stage=stage)
    del results  # the bundle holds the tables now, and lets them go while it is written
    bundle.manifest["system"] = check_system("/", scan_plan.cpus, facts).to_list()
    spectra = stage.run("finding periodic noise sources", lambda: bundle_spectra(bundle))
    keep.stopping, keep.optional, keep.give_up = None, [], None
    if spectra is not None:
        store_spectra(bundle, *spectra)
    if stage.cut_short is not None or stage.given_up:
        during = f" while {stage.cut_short}" if stage.cut_short else ""
        bundle.manifest["complete"] = False
        bundle.manifest["warnings"].append(Diagnostic(
            Code.INTERRUPTED, f"interrupted{during}: the rest of the analysis was left "
                              f"out").to_dict())
    if amend is not None:
        amend(bundle)
    if destination is not None:
        bundle.write(destination, release_tables=True)
    return bundle


def _run_probes(options: ScanOptions, scan_plan: ScanPlan, clock: MeasurementClock, schedule,
                tracing: ScanTracing, progress: ScanProgress | None, keep: interrupts.Frame,
                spool_dir: Path | None = None) -> tuple[list[ProbeResult], str | None, dict]:
    """Run the probes one after the other (recording the trace of each) until
    they are done or a stop; returns their results, what the stop interrupted
    (None if none came), and the HZ estimate. `keep` learns when there is a
    measurement to keep."""
    injector_priority = prechecks.injector_priority()
    results: list[ProbeResult] = []
    stopped: str | None = None
    hz: dict = {}
    try:
        with memory_locked() as locking:
            scan_plan.privileges["mlockall"] = locking
            if locking != "locked":
                scan_plan.diagnostics.append(Diagnostic(Code.PRIVILEGES, f"mlockall {locking}"))
            for index, name in enumerate(options.probes):
                if interrupts.take():
                    stopped = f"before {name}"
                    break
                live = progress is not None and progress.live
                report = (lambda fraction, n=name: progress(n, fraction)) if live else None
                if progress:
                    progress(name, 0.0)
                ctx = ProbeContext(scan_plan.cpus, schedule, clock, scan_plan.priority,
                                   options.injections, injector_priority,
                                   probe_start_ns(options.start_mono_ns, schedule, index), report,
                                   spool_dir)
                if name == "detour" and tracing.wants_cost():
                    if tracing.measure_cost(lambda ns, c=ctx: _cost_run(c, options, ns)):
                        stopped = "while measuring tracing's own cost"
                        break
                last = index == len(options.probes) - 1

                def measure(probe=REGISTRY[name], ctx=ctx, last=last):
                    result = probe.run(ctx, probe.settings(options))
                    if last or result.interrupted:  # what a stop ends from now on
                        keep.stopping = "ending the analysis"
                    return result

                irq_before, begun = read_interrupts(), time.monotonic_ns()
                keep.measured = True  # what this probe measures is kept, even if stopped
                result = tracing.record(name, measure)
                results.append(result)
                if not hz and not result.interrupted:
                    hz = _hz_estimate(irq_before, read_interrupts(), time.monotonic_ns() - begun,
                                      scan_plan.cpus, {i.cpu for i in options.injections})
                if progress:
                    progress(name, 1.0)
                if result.interrupted:
                    stopped = f"during {name}"
                    break
    finally:
        tracing.close()
    return results, stopped, hz


def build_bundle(options: ScanOptions, scan_plan: ScanPlan, facts: HostFacts,
                 clock: MeasurementClock, schedule, results: list[ProbeResult], *,
                 started: str, argv: list[str] | None, complete: bool,
                 kind: str, tracing: ScanTracing, stage: interrupts.Stage) -> Bundle:
    tables: dict[str, list[Table]] = {}
    diagnostics = list(scan_plan.diagnostics)
    for result in results:
        diagnostics.extend(result.diagnostics)
        match_probe_injections(result.probe, result.tables, result.summaries)
        for name, table in result.tables.items():
            tables.setdefault(name, []).append(table)
    # A table that only one probe produced is taken as it is: a copy would hold
    # the probe's data twice while the bundle is analysed and written.
    merged = {name: parts[0] if len(parts) == 1 else Table.concat(parts)
              for name, parts in tables.items()}
    summaries = {r.probe: r.summaries for r in results}
    trace = tracing.finish(merged, summaries, stage)
    diagnostics.extend(tracing.diagnostics)
    complete = complete and not tracing.incomplete
    parameters = {
        **options.to_dict(),
        "cpus": list(scan_plan.cpus),
        "priority": scan_plan.priority,
        "schedule": schedule.to_dict(),
        **manifest_constants(),
    }
    manifest = new_manifest(
        kind, label=options.label, started_utc=started, argv=argv, complete=complete,
        host=facts.to_dict(), clock=clock.to_dict(), parameters=parameters,
        privileges=scan_plan.privileges, summaries=summaries, trace=trace,
        warnings=[d.to_dict() for d in diagnostics])
    return Bundle(manifest, merged)
