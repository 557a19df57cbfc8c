"""What every probe shares: the `Probe` interface and its run (specs -> native
run -> per-CPU tables and summaries -> result), windows, injections, errors."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..clock import MeasurementClock
from ..diagnostics import Code, Diagnostic
from ..errors import UsageError, option
from ..tables import SpooledTable, Table, repeated
from .injection import Injection
from .native import NativeRun, ProgressCallback, Ring, ring_size, run_native, window_buffers
from .schedule import WindowSchedule
from .spool import SampleSpool
from .summary import Samples


@dataclass(frozen=True)
class ProbeContext:
    """Where and when a probe runs; the same for every probe of a scan."""

    cpus: tuple[int, ...]
    schedule: WindowSchedule
    clock: MeasurementClock
    priority: int = 0  # SCHED_FIFO priority of the samplers, 0 for SCHED_OTHER
    injections: tuple[Injection, ...] = ()
    injector_priority: int = 0
    start_mono_ns: int = 0
    progress: ProgressCallback | None = None
    # where the samples go while they are measured (a scan that writes a bundle);
    # None: they are kept in memory
    spool_dir: Path | None = None


@dataclass
class ProbeResult:
    probe: str
    tables: dict[str, Table]
    summaries: list[dict]
    interrupted: bool
    diagnostics: list[Diagnostic] = field(default_factory=list)


@dataclass
class Execution:
    """A finished native run with its windows and injections as tables."""

    run: NativeRun
    windows: Table
    injections: Table

    @property
    def interrupted(self) -> bool:
        return self.run.interrupted


@dataclass(frozen=True)
class CpuRun:
    """One CPU's part of a finished native run, as a probe's `collect` sees it."""

    spec: dict  # what the probe asked for, its buffers now filled
    native: dict  # what the native core reported for the CPU
    stats: dict  # thread_statistics: measured time and who else ran
    clock: MeasurementClock
    execution: Execution  # the whole run: windows and injections of every CPU
    index: int = 0  # its spec's place in the run

    @property
    def cpu(self) -> int:
        return self.spec["cpu"]

    def samples(self, ring: tuple[str, str],
                rows: Callable[[np.ndarray, np.ndarray], Table]) -> CpuSamples:
        """The CPU's samples (the ring's two buffers) made table rows by `rows`:
        all at once from its spec, or batch by batch from the run's spool."""
        empty = rows(np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        spool = self.execution.run.spool
        if spool is None:
            stored = self.native["stored"]
            table = rows(self.spec[ring[0]][:stored], self.spec[ring[1]][:stored])
            return CpuSamples(self.cpu, table.rows, empty, lambda: iter((table,)), table)
        return CpuSamples(self.cpu, spool.rows[self.index], empty,
                          lambda: (rows(*batch) for batch in spool.batches(self.index)))


@dataclass(frozen=True)
class CpuSamples:
    """One CPU's samples as table rows: in memory (`table`), or read from the
    spool a batch at a time (`batches`), never all at once."""

    cpu: int
    rows: int
    empty: Table  # the columns, no rows
    batches: Callable[[], Iterator[Table]]
    table: Table | None = None

    def column(self, name: str) -> Samples:
        """A column for the summaries: the array, or its batches."""
        if self.table is not None:
            return self.table[name]
        return lambda: (batch[name] for batch in self.batches())

    @property
    def part(self) -> Table | CpuSamples:
        """What `collect` returns as the CPU's part of the table."""
        return self.table if self.table is not None else self


class Probe:
    """A noise probe: what `scan` needs to know to check, size, run and record it.

    A probe is one module with a subclass of this and one line in the registry
    (`probes.REGISTRY`). `Settings` is a frozen dataclass of the options it
    reads; `settings()` takes them, by name, from the scan's options (so each
    field must be a `ScanOptions` field too). Running it (`run`) is the same for
    every probe: `specs` (one native spec per CPU) -> the native run ->
    `collect` once per CPU (tables and the CPU's summary) -> `diagnostics`."""

    name: ClassVar[str]  # also the native core's sampler it runs
    Settings: ClassVar[type]
    sleeps: ClassVar[bool] = False  # a sleeper (timerlat) never runs into RT throttling
    default: ClassVar[bool] = True  # measured by `scan` unless --probes says otherwise
    tables: ClassVar[tuple[str, ...]] = ()  # what it records besides windows and injections
    constants: ClassVar[dict[str, Any]] = {}  # fixed parameters the manifest records
    # the two buffers of each spec that the sampler hands its samples over in
    # while it runs (a ring drained as they come), if it has samples
    ring: ClassVar[tuple[str, str] | None] = None
    # whether expected_samples is the most a CPU can store (samples on a schedule:
    # quanta, timer wakeups), not an estimate of what the machine will make
    samples_bounded: ClassVar[bool] = True

    def settings(self, options: Any) -> Any:
        return self.Settings(**{f.name: getattr(options, f.name) for f in fields(self.Settings)})

    # Checks before measuring, in the order the scan can make them (each raises UsageError).
    def check_duration(self, settings: Any, duration_ns: int) -> None:
        """Against the duration of the run, before the windows are planned."""

    def check_windows(self, settings: Any, schedule: WindowSchedule) -> None:
        """Against the planned windows."""

    def check_clock(self, settings: Any, clock: MeasurementClock) -> None:
        """Against the measurement clock (known last)."""

    def expected_samples(self, settings: Any, schedule: WindowSchedule, ncpus: int) -> int:
        """The samples a CPU is expected to store in the run: the most it can
        when `samples_bounded`, else an estimate at a typical rate."""
        raise NotImplementedError

    def stored_limit(self, settings: Any) -> int | None:
        """The most samples a CPU stores (the rest are counted), None for no limit."""
        return None

    def ring_size(self, settings: Any, schedule: WindowSchedule, ncpus: int) -> int:
        """The slots of each CPU's ring, preallocated before the run."""
        expected = self.expected_samples(settings, schedule, ncpus)
        most = expected if self.samples_bounded else self.stored_limit(settings)
        return ring_size(expected, schedule.measured_ns, ncpus, most)

    def specs(self, ctx: ProbeContext, settings: Any) -> list[dict]:
        """One native spec per CPU of ctx.cpus (probe-specific keys and buffers)."""
        raise NotImplementedError

    def collect(self, run: CpuRun, settings: Any) -> tuple[dict[str, Table], dict]:
        """One CPU's tables (named as in `tables`) and summary."""
        raise NotImplementedError

    def diagnostics(self, ctx: ProbeContext, summaries: list[dict], done: Execution,
                    settings: Any) -> list[Diagnostic]:
        """What the whole run says about itself (busy CPUs, full buffers, ...)."""
        return []

    def run(self, ctx: ProbeContext, settings: Any) -> ProbeResult:
        specs = self.specs(ctx, settings)
        ring = Ring(*self.ring, limit=self.stored_limit(settings)) if self.ring else None
        return self.result(ctx, settings, specs, execute(self.name, ctx, specs, ring))

    def result(self, ctx: ProbeContext, settings: Any, specs: list[dict], done: Execution
               ) -> ProbeResult:
        """What a finished run measured: each CPU's part collected, the parts
        joined (samples the run spooled stay in its files, read a batch at a time)."""
        parts: dict[str, list[Table | CpuSamples]] = {name: [] for name in self.tables}
        summaries = []
        for index, (spec, native) in enumerate(zip(specs, done.run.samplers, strict=False)):
            stats = thread_statistics(native, ctx.clock, done.windows)
            cpu_tables, summary = self.collect(
                CpuRun(spec, native, stats, ctx.clock, done, index), settings)
            for name, table in cpu_tables.items():
                parts[name].append(table)
            summaries.append(summary)
        tables: dict[str, Table | SpooledTable] = {}
        for name, cpu_parts in parts.items():
            spooled = [part for part in cpu_parts if isinstance(part, CpuSamples)]
            if spooled and done.run.spool is not None:
                tables[name] = SpooledTable.of(
                    done.run.spool.directory / f"{name}.parquet", spooled[0].empty,
                    [(p.cpu, p.rows, p.batches) for p in spooled])
            else:
                tables[name] = Table.concat(cpu_parts)  # type: ignore[arg-type]
        tables.update(windows=done.windows, injections=done.injections)
        return ProbeResult(self.name, tables, summaries, done.interrupted,
                           self.diagnostics(ctx, summaries, done, settings))


def check_errors(results: list[dict], what: str) -> None:
    for result in results:
        if result["error"]:
            stage, cpu = result["error_stage"], result.get("cpu")
            reason = os.strerror(result["error"])
            hint = (f"run as root or without {option('rt')}" if "SCHED_FIFO" in stage
                    else "check that the CPU is online and allowed (taskset, cgroups)")
            raise UsageError(f"{what} on CPU {cpu} failed: {stage}: {reason}", hint)


def execute(probe: str, ctx: ProbeContext, specs: list[dict], ring: Ring | None = None
            ) -> Execution:
    """Run `probe` with one spec per CPU of ctx.cpus (probe-specific keys); the
    samples of each spec's `ring`, if given, are drained while it runs and
    handed back in its place."""
    elapsed = ctx.schedule.elapsed_ns
    by_cpu = {spec["cpu"]: spec for spec in specs}
    for spec in specs:
        spec.setdefault("priority", ctx.priority)
        spec.update(window_buffers(ctx.schedule))
    injectors: list[dict] = []
    for injection in ctx.injections:
        native = injection.native(ctx.clock.ticks_per_ns, elapsed, ctx.injector_priority)
        if injection.mode == "signal":
            if injection.cpu not in by_cpu:
                raise UsageError(f"signal injection on CPU {injection.cpu} needs a sampler there",
                                 "measure that CPU too, or use /thread mode")
            by_cpu[injection.cpu]["inject"] = native
        else:
            injectors.append(native)
    spool = None
    if ring is not None and ctx.spool_dir is not None:
        spool = SampleSpool(Path(tempfile.mkdtemp(prefix=f"{probe}-", dir=ctx.spool_dir)) / "samples",
                            (ring.first, ring.second), len(specs))
    run = run_native(probe, specs, injectors, ctx.schedule, ctx.clock.ticks_per_ns,
                     start_mono_ns=ctx.start_mono_ns, progress=ctx.progress, ring=ring,
                     spool=spool)
    check_errors(run.samplers, f"{probe} sampler")
    check_errors([{**r, "cpu": s["cpu"]} for r, s in zip(run.injectors, injectors, strict=False)],
                  "injector")
    return Execution(run, _windows_table(probe, ctx.clock, specs, run),
                     _injections_table(ctx, specs, injectors, run))


def _windows_table(probe: str, clock: MeasurementClock, specs: list[dict],
                   run: NativeRun) -> Table:
    parts = []
    for spec, result in zip(specs, run.samplers, strict=False):
        done = result["windows"]
        parts.append(Table({
            "cpu": np.full(done, spec["cpu"], np.int32),
            "probe": repeated(probe, done),
            "start_ns": clock.timestamp_ns(spec["window_start"][:done]),
            "end_ns": clock.timestamp_ns(spec["window_end"][:done]),
        }))
    return Table.concat(parts)


def injection_rows(clock: MeasurementClock, cpu: int, mode: str, native: dict,
                    stored: int) -> Table:
    start = native["start"][:stored]
    return Table({
        "cpu": np.full(stored, cpu, np.int32),
        "mode": repeated(mode, stored),
        "start_ns": clock.timestamp_ns(start),
        "duration_ns": clock.duration_ns(native["end"][:stored] - start),
    })


def _injections_table(ctx: ProbeContext, specs: list[dict], injectors: list[dict],
                      run: NativeRun) -> Table:
    parts = []
    for spec, result in zip(specs, run.samplers, strict=False):
        if "inject" in spec:
            parts.append(injection_rows(ctx.clock, spec["cpu"], "signal", spec["inject"],
                                         result["injection"]["stored"]))
    for native, result in zip(injectors, run.injectors, strict=False):
        parts.append(injection_rows(ctx.clock, native["cpu"], "thread", native, result["stored"]))
    return Table.concat(parts)


def thread_statistics(result: dict, clock: MeasurementClock, windows: Table) -> dict:
    """Per-CPU facts every probe reports: measured time and who else ran."""
    cpu_windows = windows.where(cpu=result["cpu"])
    measured = int((cpu_windows.end_ns - cpu_windows.start_ns).sum())
    return {
        "cpu": result["cpu"],
        "tid": int(result["tid"]),  # the measuring thread, as the kernel trace names it
        "windows": int(result["windows"]),
        "measured_ns": measured,
        "run_delay_ns": int(result["run_delay_ns"]),
        "involuntary_switches": int(result["involuntary_switches"]),
        "minor_faults": int(result["minor_faults"]),
        "major_faults": int(result["major_faults"]),
    }


def busy_diagnostics(probe: str, summaries: list[dict]) -> list[Diagnostic]:
    """Another task took a measured CPU for more than 1% of the time."""
    notes = []
    for s in summaries:
        if s["measured_ns"] and s["run_delay_ns"] > 0.01 * s["measured_ns"]:
            notes.append(Diagnostic(
                Code.MACHINE_BUSY,
                f"{probe}: CPU {s['cpu']} waited {100 * s['run_delay_ns'] / s['measured_ns']:.1f}% "
                f"of the time for other tasks ({s['involuntary_switches']} preemptions)"))
    return notes


def overflow_diagnostics(summaries: list[dict], items: str, limit: int | None, ring: int,
                         done: Execution) -> list[Diagnostic]:
    """Samples a CPU counted but did not store: once writing them to the
    run's spool failed (a full disk), beyond the limit asked for, or because
    its ring of `ring` slots was full (the drainer fell behind)."""
    spool = done.run.spool
    code = Code.BUFFER_OVERFLOW
    if spool is not None and spool.failure is not None:
        code, why = Code.WRITE_FAILED, (f"after writing them to {spool.directory} failed "
                                        f"({spool.failure.strerror})")
    elif limit is not None:
        why = f"beyond the limit of {limit} per CPU"
    else:
        why = f"while its buffer of {ring} was full (the copying out of it fell behind)"
    return [Diagnostic(code, f"CPU {s['cpu']}: {s['overflow']} {items} were counted but not stored, "
                             f"{why}") for s in summaries if s["overflow"]]
