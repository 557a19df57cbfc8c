"""Tracing as `noisescope scan` uses it: one session for the whole scan, one
recording per probe run, on request a measurement of tracing's own cost
(interleaved pairs of untraced and traced detour runs), and the attribution
of the detours at the end.

Between probes the buffers are only copied to files in a work directory;
they are decoded once the measuring is over. Without a destination the
decoded events are kept in memory (they are bundle tables). When the scan
writes a bundle, they never are: the first decoding pass writes them batch
by batch to Parquet files in the work directory (beside the bundle:
`.NAME.trace-PID/`; with a recording's CPUs in worker processes, each
worker writes its CPUs' files), which the bundle links in, and explains the detours
as it reads the pages of the detour probe's recording (`_ExplainAlong`).
What is read again afterwards (the worst detours' events, late wakeups, the
detours of a recording that lost events or has osnoise events) comes from
the copies of the buffers, decoded again batch by batch (`RecordedEvents`:
less memory than reading the Parquet files back)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from .. import interrupts
from ..clock import MeasurementClock
from ..diagnostics import Code, Diagnostic
from ..leftovers import TEMPORARY_TRACE_PREFIX, make_workdir, mark_workdir
from ..memory import release_free_memory
from ..tables import (
    ParkedParts,
    SpooledTable,
    StoredTable,
    Table,
    inside_windows,
    repeated,
    table_cpus,
)
from ..workers import run_parts, worker_count
from .attribute import CHUNK_NS, Labels, attribute, chunk_starts
from .events import EVENT_COLUMNS, SWITCH_COLUMNS, TraceEvents
from .explain import WORST_PER_CPU, CpuExplanation, attribution_summary
from .osnoise import OSNOISE_CLASSES
from .session import FAULT_FILTER, Capture, Recording, TraceSession
from .store import CpuParts, EventSource, EventSpool, OutOfOrder, StreamedEvents
from .tracefs import TracingUnavailable
from .wakeups import DEFAULT_THRESHOLD_NS as DEFAULT_WAKEUP_THRESHOLD_NS
from .wakeups import explain_late_wakeups

# `scan --trace-cost`: pairs of an untraced and a traced detour run. The smallest
# and largest of 6 paired differences hold their median with 1 - 2 x 2^-6 = 97%
# confidence (a sign-test interval: no assumption about the noise's distribution).
COST_PAIRS = 6
# Detours attributed at a time when they are spooled: attributing one holds a few
# hundred bytes (its events' timeline, its causes) until the batch is parked.
ATTRIBUTED_ROWS = 8_192


class _FirstPassSpool:
    """The spool that the first decoding pass writes. A write error (a full
    disk) gives it up, its files removed, instead of ending the scan: the
    bundle then spools the events itself, where a failed write keeps the
    measurement elsewhere (`Bundle.write`)."""

    def __init__(self, spool: EventSpool):
        self.spool, self.failed = spool, False

    def append(self, batch: TraceEvents) -> None:
        if not self.failed:
            try:
                self.spool.append(batch)
            except OSError:
                self.give_up()

    def reserve_parts(self, count: int) -> Callable[[int], CpuParts] | None:
        """The parts of `count` CPUs for worker processes to write (None: given up)."""
        if not self.failed:
            try:
                return self.spool.reserve_parts(count)
            except OSError:
                self.give_up()
        return None

    def finish(self) -> bool:
        """Close the files; whether they are whole."""
        if not self.failed:
            try:
                self.spool.finish()
                return True
            except OSError:
                self.give_up()
        return False

    def give_up(self) -> None:
        self.failed = True
        self.spool.discard()


@dataclass(frozen=True)
class TraceOptions:
    enabled: bool = True
    buffer_kb: int | None = None  # per CPU; None: sized from the probe duration
    cost_ns: int = 0  # time spent measuring tracing's own cost (COST_PAIRS pairs); 0: none
    wakeup_threshold_ns: int = DEFAULT_WAKEUP_THRESHOLD_NS  # timerlat: explain wakeups this late
    osnoise: str = "auto"  # the osnoise tracer's noise events too (trace.osnoise): auto, on, off
    workers: int | None = None  # processes explaining CPUs side by side; None: as many as
    # there are CPUs to run on and memory for (workers.worker_count)


@dataclass
class ScanTracing:
    """The scan's tracing state: a session, or the reason there is none."""

    options: TraceOptions
    session: TraceSession | None = None
    reason: str | None = None  # why tracing is off
    workdir: Path | None = None  # copies of the buffers, then the spool
    spooling: bool = False  # decoded events to Parquet files (else memory)
    recordings: list[tuple[str, Recording]] = field(default_factory=list)
    captures: list[tuple[str, Capture]] = field(default_factory=list)
    cost_pairs: list[tuple[list[dict], list[dict]]] = field(default_factory=list)  # detour
    # summaries of the untraced and the traced run of each pair
    diagnostics: list[Diagnostic] = field(default_factory=list)
    incomplete: bool = False  # a recording's trace is missing (not copied, or not decoded)
    spooled: bool = False  # the spool was written whole by the first decoding pass
    attribution_workers: int | None = None  # processes that explained the detours

    @classmethod
    def begin(cls, options: TraceOptions, cpus: tuple[int, ...], clock: MeasurementClock,
              recording_ns: int, destination: Path | None = None) -> ScanTracing:
        """Check and set up tracing; without it, say why (the scan goes on).
        With a destination, events are spooled beside it."""
        if not options.enabled:
            return cls(options, reason="turned off (--no-trace)")
        session = TraceSession(cpus, clock, buffer_kb=options.buffer_kb, recording_ns=recording_ns,
                               osnoise_mode=options.osnoise)
        try:
            session.open()
        except TracingUnavailable as why:
            tracing = cls(options, reason=str(why))
            tracing.diagnostics.append(Diagnostic(
                Code.TRACING_UNAVAILABLE, f"detours are not explained: {why}"))
            return tracing
        try:
            if destination is not None:
                workdir = make_workdir(destination.parent / f".{destination.name}.trace-{os.getpid()}")
            else:
                workdir = mark_workdir(Path(tempfile.mkdtemp(
                    prefix=f"{TEMPORARY_TRACE_PREFIX}{os.getpid()}-")))
        except OSError as error:
            session.close()
            tracing = cls(options, reason=f"no room for the trace copies ({error.strerror})")
            tracing.diagnostics.append(Diagnostic(
                Code.WRITE_FAILED, f"detours are not explained: the trace copies could not be "
                                   f"kept ({error.strerror}: {error.filename})"))
            return tracing
        return cls(options, session, workdir=workdir, spooling=destination is not None)

    @property
    def active(self) -> bool:
        return self.session is not None

    def record(self, probe: str, run: Callable[[], object]):
        """Run `run` (a probe) while recording; keeps the recording."""
        if self.session is None or self.workdir is None:
            return run()
        self.session.start()
        try:
            result = run()
        finally:
            name = f"{len(self.recordings)}-{probe}"
            try:
                self.recordings.append((probe, self.session.stop(self.workdir, name)))
            except OSError as error:  # no room for the copies: the probe's data is kept, its trace not
                for copy in self.workdir.glob(f"{name}.*"):
                    copy.unlink()
                self.incomplete = True
                self.diagnostics.append(Diagnostic(
                    Code.WRITE_FAILED, f"the trace of {probe} was not kept: copying it failed "
                                       f"({error.strerror})"))
        return result

    def wants_cost(self) -> bool:
        return self.active and self.options.cost_ns > 0 and not self.cost_pairs

    def measure_cost(self, run: Callable[[int], _DetourRun]) -> bool:
        """Tracing's own cost: COST_PAIRS pairs of detour runs of cost_ns / (2 x
        COST_PAIRS) each, one untraced and one traced (its events dropped), which of
        them goes first alternating so that a drift of the machine cancels. `run`
        measures for the given ns. Returns whether it was interrupted."""
        assert self.session is not None and self.workdir is not None
        length = self.options.cost_ns // (2 * COST_PAIRS)
        for pair in range(COST_PAIRS):
            summaries = {}
            for traced in (False, True) if pair % 2 == 0 else (True, False):
                if traced:
                    self.session.start()
                try:
                    result = run(length)
                finally:
                    if traced:
                        self.session.stop(self.workdir, f"cost-{pair}").remove_files()
                if result.interrupted:
                    return True
                summaries[traced] = result.summaries
            self.cost_pairs.append((summaries[False], summaries[True]))
        return False

    def close(self) -> None:
        """Restore the kernel's tracing state (right after the probes)."""
        if self.session is not None:
            self.session.close()

    def discard(self) -> None:
        """Remove the work directory (once the bundle holds its copy, or on failure)."""
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- results -------------------------------------------------------------------
    def _decode(self, stage: interrupts.Stage, along: _ExplainAlong | None = None
                ) -> EventSource:
        """Decode every recording (the captures: counts, coverage, event
        names) until a stop; when spooling, the same pass writes the events
        to the spool, and explains the detours (`along`) as it reads the
        pages of the recording that holds them. Returns where to read the
        events again by CPU and time."""
        assert self.session is not None
        spool = (_FirstPassSpool(EventSpool(self.workdir)) if self.spooling and self.workdir
                 is not None else None)
        try:
            for probe, recording in self.recordings:
                # The raw pages of a scan that writes a bundle are read again
                # (the worst detours' events, late wakeups); text (the fallback
                # reader) is parsed whole, so it is kept.
                sink = None if spool is None or recording.text is not None else spool
                reader = along if along is not None and along.reads(probe, recording) else None
                capture = stage.run("reading the trace",
                                    lambda r=recording, s=sink, a=reader:
                                    self._decode_recording(r, s, a, stage))
                if capture is None:
                    self.incomplete = True
                    break
                if spool is not None and capture.events is not None:
                    spool.append(capture.events)
                if reader is not None and not reader.stopped:
                    reader.explained = capture.read_along
                self.captures.append((probe, capture))
                if spool is None:  # nothing reads these pages again: free the disk (often tmpfs)
                    recording.remove_files()
                release_free_memory()
            self.spooled = spool is not None and not self.incomplete and spool.finish()
            release_free_memory()  # what writing the spool took
        finally:
            if spool is not None and not self.spooled:
                # a recording cut short in the middle (or its explaining), or a write
                # that failed: the events are spooled again (from the recordings
                # decoded whole) when the bundle needs them
                spool.give_up()
        captures = [c for _, c in self.captures]
        if self.spooling and self.session.layout is not None:
            return self.session.recorded_events(captures)
        return TraceEvents.concat(c.events for c in captures if c.events is not None)

    def _decode_recording(self, recording: Recording, spool: _FirstPassSpool | None,
                          along: _ExplainAlong | None, stage: interrupts.Stage) -> Capture:
        """One recording decoded, its events to `spool` if given (and read by
        `along`): CPUs side by side in worker processes where there are
        several to run on. A stop while `along` explains the detours stops the
        explaining only, as a stop after the pass would: the events are the
        measurement's. The spool, which holds part of them, is given up (the
        events are spooled again when the bundle is written) and the recording
        is decoded again to count it; a further stop leaves it out."""
        assert self.session is not None and self.workdir is not None
        workers = worker_count(len(recording.pages), self.options.workers)
        if along is not None:
            self.attribution_workers = workers
        try:
            return self._decode_into(recording, spool, along, workers)
        except KeyboardInterrupt:
            if along is None or spool is None or stage.given_up:
                raise
            along.stopped = True
            self.attribution_workers = None
            spool.give_up()  # (from here it takes batches and drops them)
            return self._decode_into(recording, spool, None, workers)

    def _decode_into(self, recording: Recording, spool: _FirstPassSpool | None,
                     along: _ExplainAlong | None, workers: int) -> Capture:
        assert self.session is not None and self.workdir is not None
        if spool is None or workers <= 1 or self.session.layout is None:
            return self.session.decode(recording, spool.append if spool is not None else None,
                                       along)
        # (the spool's threads idle: the workers are forked, and write the parts themselves)
        capture, failure = self.session.decode_side_by_side(
            recording, spool.reserve_parts(len(recording.pages)), workers, along)
        if failure is not None:
            spool.give_up()
        return capture

    def _explain_along(self, tables: dict) -> _ExplainAlong | None:
        """How the first decoding pass explains the detours as it goes, where
        it can: a scan that spools raw pages, spooled detours, and no osnoise
        events (their classes depend on which events the whole trace holds,
        which the pass knows only at its end). Else None: they are explained
        afterwards, from the pages decoded again (`attribute_in_batches`)."""
        assert self.session is not None
        detours = tables.get("detours")
        if not (self.spooling and self.session.layout is not None
                and isinstance(detours, SpooledTable) and detours.rows
                and sum(probe == "detour" for probe, _ in self.recordings) == 1
                and not any(name in self.session.formats for name in OSNOISE_CLASSES)):
            return None
        return _ExplainAlong(detours, invisible_to_the_kernel(tables.get("injections")),
                             set(self.session.formats), detours.path.parent.parent / "attributed")

    def _stored_events(self) -> dict[str, StoredTable]:
        """The bundle's `events` and `sched_switch` tables when spooling:
        Parquet files in the work directory, written by the first decoding
        pass, or, where a stop cut that pass short, when the bundle first
        needs them (by decoding the recordings decoded whole once more)."""
        assert self.workdir is not None
        spool = EventSpool(self.workdir)

        def write_files(give_up: Callable[[], bool]) -> None:  # both files, once
            assert self.session is not None

            def append(batch: TraceEvents) -> None:
                if give_up():  # an interrupt while the bundle is written
                    raise interrupts.GaveUp
                spool.append(batch)

            try:
                for _, recording in self.recordings[:len(self.captures)]:
                    self.session.decode(recording, append)
                    recording.remove_files()  # the spool holds its events now
                    release_free_memory()
                spool.finish()
            except BaseException:  # no half-written file may pass for a whole one
                spool.discard()
                raise

        write = None if self.spooled else write_files
        return {"events": StoredTable(spool.source.events_path,
                                      sum(c.event_count for _, c in self.captures),
                                      list(EVENT_COLUMNS), write),
                "sched_switch": StoredTable(spool.source.switches_path,
                                            sum(c.switch_count for _, c in self.captures),
                                            list(SWITCH_COLUMNS), write)}

    def coverage(self) -> Table:
        parts = []
        for probe, capture in self.captures:
            parts.append(Table({**capture.coverage,
                                "probe": repeated(probe, capture.coverage.rows)}))
        return Table.concat(parts)

    def finish(self, tables: dict[str, Table], summaries: dict[str, list[dict]],
               stage: interrupts.Stage) -> dict:
        """Add the trace tables, the causes of the detours and late wakeups and
        their summaries; returns the manifest's `trace` section. A stop cuts the
        analysis short (`stage`): what is done is kept, the rest is left out."""
        if self.session is None:
            return {"enabled": False, "reason": self.reason}
        along = self._explain_along(tables)
        trace = self._decode(stage, along)
        if along is not None and along.stopped:
            stage.cut("explaining the detours")
        coverage = self.coverage()
        if self.spooling:
            tables.update(self._stored_events())
        else:  # the events in memory are the bundle's tables
            assert isinstance(trace, TraceEvents)
            tables["events"], tables["sched_switch"] = trace.events, trace.switches
        tables["trace_coverage"] = coverage
        detours = tables.get("detours")
        if detours is not None and detours.rows and any(c.event_count + c.switch_count
                                                        for _, c in self.captures):
            def explain_detours():
                injected = invisible_to_the_kernel(tables.get("injections"))
                if along is not None and along.explained is not None:
                    parts = {cpu: (mine, causes) for cpu, (mine, causes, _) in
                             along.explained.items()}
                    annotated, causes = spooled_attribution(detours, trace, coverage, parts,
                                                            along.directory)
                    summaries = [along.explained[cpu][2] for cpu in table_cpus(annotated)]
                    return annotated, causes, summaries
                if isinstance(detours, SpooledTable):
                    self.attribution_workers = worker_count(len(detours.sources), self.options.workers)
                    annotated, causes = attribute_in_batches(
                        detours, trace, coverage, injected, detours.path.parent.parent / "attributed",
                        self.attribution_workers)
                else:
                    self.attribution_workers = 1
                    attribution = attribute(detours, trace, coverage, injected=injected)
                    release_free_memory()
                    annotated, causes = attribution.annotate(detours), attribution.causes
                return annotated, causes, attribution_summary(annotated, causes, trace)

            explained = stage.run("explaining the detours", explain_detours)
            if explained is not None:
                tables["detours"], tables["detour_causes"], summaries["attribution"] = explained
        series = tables.get("timerlat")
        if series is not None and not series.rows and summaries.get("timerlat"):
            self.session.info.notes.append("late wakeups not explained: the timerlat series was "
                                           "not stored (--no-series)")
        elif series is not None and series.rows and any(c.event_count + c.switch_count
                                                        for p, c in self.captures if p == "timerlat"):
            threshold = self.options.wakeup_threshold_ns
            if isinstance(series, SpooledTable):  # only the late wakeups are read into memory
                series = Table.concat([series.empty, *(
                    batch.filter(batch["latency_ns"] >= threshold) for batch in series.batches())])
            late = stage.run("explaining the late wakeups", lambda: explain_late_wakeups(
                series, threshold, summaries["timerlat"], trace, coverage))
            if late is not None:
                tables["late_wakeups"], tables["late_wakeup_causes"] = late.spans, late.causes
                summaries["late_wakeups"] = late.summary
        lost = int(coverage["lost_events"].sum()) if coverage.rows else 0
        if lost:
            worst = coverage.filter(coverage["lost_events"] > 0)
            self.diagnostics.append(Diagnostic(
                Code.TRACE_EVENTS_LOST,
                f"the trace buffer filled: {lost} events lost on CPUs "
                f"{', '.join(str(c) for c in sorted(set(worst['cpu'].tolist())))}; detours after "
                f"the loss are 'untraced'"))
        if self.spooling:
            for _, capture in self.captures:
                capture.events = None  # the text reader's, spooled
        return self._section(summaries)

    def _section(self, summaries: dict) -> dict:
        session = self.session
        assert session is not None and session.trace_clock is not None
        info = session.info
        recordings = []
        for probe, capture in self.captures:
            cov = capture.coverage
            recordings.append({
                "probe": probe,
                "events": capture.event_count,
                "sched_switch": capture.switch_count,
                "lost_events": {str(c): int(n) for c, n in zip(cov["cpu"].tolist(),
                                                               cov["lost_events"].tolist(), strict=True)},
                "missed_pages": capture.missed_pages,
            })
        section = {
            "enabled": True,
            **session.trace_clock.describe(),
            "tracefs": info.tracefs,
            "mounted_by_us": info.mounted_by_us,
            "instance": info.instance,
            "reader": info.reader,
            "buffer_kb_per_cpu": info.buffer_kb_per_cpu,
            "events": info.events,
            "missing_events": info.missing_events,
            "fault_filter": FAULT_FILTER,
            "leftovers_removed": info.leftovers_removed,
            "other_instances": info.other_instances,
            "osnoise_tracer": info.osnoise_tracer,
            "notes": info.notes,
            "recordings": recordings,
        }
        if self.attribution_workers is not None:
            section["attribution_workers"] = self.attribution_workers
        if self.cost_pairs:
            section["cost"] = tracing_cost(self.cost_pairs,
                                           self.options.cost_ns // (2 * COST_PAIRS))
        return section


class _DetourRun(Protocol):
    interrupted: bool
    summaries: list[dict]


def tracing_cost(pairs: list[tuple[list[dict], list[dict]]], run_ns: int) -> dict:
    """Traced minus untraced, per pair (the mean over the CPUs): noise in percentage
    points and detours per second; their median and its interval [min, max]."""
    def mean(rows: list[dict], name: str) -> float:
        return float(np.mean([s[name] for s in rows]))

    per_pair = [{f"{side}_{name}": mean(rows, name) for side, rows in (("untraced", untraced),
                                                                       ("traced", traced))
                 for name in ("noise_pct", "detours_per_s")} for untraced, traced in pairs]
    delays = [s["run_delay_ns"] / s["measured_ns"] for untraced, traced in pairs
              for s in [*untraced, *traced] if s.get("measured_ns")]
    cost = {"pairs": len(pairs), "run_ns": run_ns, "per_pair": per_pair,
            "confidence": 1 - 2 * 0.5 ** len(pairs),
            # other tasks' time in the runs swamps tracing's cost
            "max_run_delay_pct": 100.0 * max(delays, default=0.0)}
    for name, key in (("noise_pct", "noise_pct_increase"),
                      ("detours_per_s", "detours_per_s_increase")):
        differences = [p[f"traced_{name}"] - p[f"untraced_{name}"] for p in per_pair]
        cost[key] = float(np.median(differences))
        cost[f"{key}_interval"] = [float(min(differences)), float(max(differences))]
    return cost


def attribute_in_batches(detours: SpooledTable, trace: EventSource, coverage: Table,
                         injected: Table | None, directory: Path, workers: int = 1
                         ) -> tuple[SpooledTable, SpooledTable]:
    """`attribute` the spooled detours about ATTRIBUTED_ROWS at a time, cut
    where attribute's own chunks end and with its labels kept from call to
    call: the same result as all at once. The detours with their causes and
    the causes are parked batch by batch in `directory` (`ParkedParts`: no
    pyarrow yet); returns both as spooled tables. The CPUs are independent:
    `workers` processes explain them side by side (`workers.run_parts`)."""
    cpus = sorted(cpu for cpu, _, _ in detours.sources)
    explained = run_parts(lambda cpu: _attribute_cpu(cpu, detours, trace, coverage, injected,
                                                     directory), cpus, workers)
    return spooled_attribution(detours, trace, coverage, dict(zip(cpus, explained, strict=True)),
                               directory)


Explained = tuple[ParkedParts, ParkedParts]  # a CPU's parked detours and causes


def spooled_attribution(detours: SpooledTable, trace: EventSource, coverage: Table,
                        explained: dict[int, Explained], directory: Path
                        ) -> tuple[SpooledTable, SpooledTable]:
    """The detours with their causes, and the causes, as spooled tables of
    each CPU's parked parts (`_attribute_cpu`)."""
    cpus = sorted(cpu for cpu, _, _ in detours.sources)
    rows = {cpu: rows for cpu, rows, _ in detours.sources}

    annotated = [(cpu, rows[cpu], explained[cpu][0]) for cpu in cpus]
    causes = [(cpu, explained[cpu][1].rows, explained[cpu][1]) for cpu in cpus]
    assert detours.empty is not None
    none = attribute(detours.empty, trace, coverage)  # the columns' types
    return (SpooledTable.of(directory / "detours.parquet", none.annotate(detours.empty), annotated),
            SpooledTable.of(directory / "detour_causes.parquet", none.causes, causes))


@dataclass
class _ExplainAlong:
    """The detours explained by the first decoding pass as it reads the pages
    of the detour probe's recording (`session.ReadAlong`), each CPU in the
    process that decodes it: its pages are decoded once, not again for the
    attribution. The result is that of `attribute_in_batches` (the same
    replay of the same events, chunk by chunk in time order)."""

    detours: SpooledTable
    injected: Table | None
    names: set[str]  # the events the session records (no osnoise events among them)
    directory: Path  # where each CPU's parts are parked
    coverage: Table | None = None  # of the recording being read
    # per CPU, once the recording is decoded: its parts and its summary row
    explained: dict[int, tuple[ParkedParts, ParkedParts, dict]] | None = None
    stopped: bool = False  # by a stop signal: the detours are left unexplained

    def reads(self, probe: str, recording: Recording) -> bool:
        """Whether this recording is the one to read along (and take its
        coverage: where no events were lost, the whole recording; a CPU that
        lost some is complete only up to its last event, known at the end, so
        such a recording's detours are explained afterwards)."""
        if probe != "detour" or not recording.pages or any(recording.lost.values()):
            return False
        cpus = sorted(recording.pages)
        self.coverage = Table({"cpu": np.array(cpus, np.int32),
                               "start_ns": np.full(len(cpus), recording.start_ns, np.int64),
                               "end_ns": np.full(len(cpus), recording.end_ns, np.int64),
                               "lost_events": np.zeros(len(cpus), np.int64)})
        return True

    def __call__(self, cpu: int, batches: Iterator[TraceEvents],
                 again: Callable[[], EventSource]) -> tuple[ParkedParts, ParkedParts, dict]:
        """The CPU's parked detours and causes, and its row of summaries["attribution"]
        (its worst detours' events read again from the pages)."""
        assert self.coverage is not None
        streamed = StreamedEvents(cpu, batches, self.names)
        explanation = CpuExplanation(WORST_PER_CPU)  # the summary, as the parts are made
        try:
            explained = _attribute_cpu(cpu, self.detours, streamed, self.coverage, self.injected,
                                       self.directory, explanation)
        except OutOfOrder:  # (a clock that stepped back) explained from the pages read again
            explained = None
        for _ in batches:  # the rest of the pages, so that `again` has them all
            pass
        recorded = again()
        if explained is None:
            explanation = CpuExplanation(WORST_PER_CPU)
            explained = _attribute_cpu(cpu, self.detours, recorded, self.coverage, self.injected,
                                       self.directory, explanation)
        mine, causes = explained
        return mine, causes, explanation.row(cpu, recorded)


def _attribute_cpu(cpu: int, detours: SpooledTable, trace: EventSource, coverage: Table,
                   injected: Table | None, directory: Path,
                   explanation: CpuExplanation | None = None) -> Explained:
    """One CPU's part of attribute_in_batches: its parked detours and causes,
    in a directory of its own (emptied first: a worker killed on the way may
    have left some, and the scan does its CPUs again); each part also goes to
    `explanation`, if given (its summary without reading the parts again)."""
    labels, tasks = Labels(), {}
    parked = directory / f"cpu{cpu}"
    shutil.rmtree(parked, ignore_errors=True)
    mine = (ParkedParts(parked / "detours"), ParkedParts(parked / "causes"))

    def attribute_part(spans: Table) -> None:
        attribution = attribute(spans, trace, coverage, injected=injected, labels=labels,
                                tasks=tasks)
        annotated = attribution.annotate(spans)
        mine[0].append(annotated)
        mine[1].append(attribution.causes)
        if explanation is not None:
            explanation.add_detours(annotated)
            explanation.add_causes(attribution.causes)

    windows = coverage.where(cpu=cpu)
    origin = None  # the CPU's first traced detour: where attribute counts chunks from
    pending = detours.empty
    for batch in detours.batches(cpu):
        starts = batch["start_ns"]
        if origin is None:
            traced = inside_windows(starts, starts + batch["duration_ns"], windows)
            origin = int(starts[traced][0]) if traced.any() else None
        pending = Table.concat([pending, batch])
        while pending.rows >= ATTRIBUTED_ROWS:
            cuts = (np.arange(1, pending.rows) if origin is None else  # all untraced
                    chunk_starts(np.maximum(pending["start_ns"], origin - CHUNK_NS), origin))
            # the last chunk's end within ATTRIBUTED_ROWS, else the first's (a chunk of more
            # rows is attributed whole)
            cut = int(cuts[cuts <= ATTRIBUTED_ROWS].max(initial=0) or (cuts[0] if cuts.size else 0))
            if not cut:
                break  # one chunk: more of it comes
            attribute_part(pending.filter(slice(0, cut)))
            pending = pending.filter(slice(cut, None))
    if pending.rows:
        attribute_part(pending)
    # what attributing took (hundreds of bytes a detour), given back once a CPU is done: a
    # part's is taken again by the next (trimmed after each, it cost 15% in page faults)
    release_free_memory()
    return mine


def invisible_to_the_kernel(injections: Table | None) -> Table | None:
    """The injections whose time the trace cannot name: signal handlers spin
    in user space in the sampler's own thread. An injecting thread is named
    from its sched_switch events like any other task."""
    if injections is None or not injections.rows:
        return None
    return injections.filter(injections["mode"] == "signal")
