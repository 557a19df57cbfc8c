"""A tracing session: check -> setup -> start -> stop -> collect -> restore.

    with TraceSession(cpus, clock) as session:   # check and set up (or TracingUnavailable)
        session.start()
        ...measure...
        recording = session.stop(workdir, "run1")  # stop; buffers copied to files
    # restored: the instance is gone, tracefs unmounted if we mounted it
    capture = session.decode(recording)          # events as tables (or to a sink)

The buffers are read after recording stops, so reading never disturbs a
measurement; they are sized to hold a whole recording. stop() only copies
them: decoding waits until the measuring is over (and memory is no longer
locked with mlockall, which would keep every library it loads resident). Recording keeps the
oldest events when a buffer fills (overwrite off): the trace of each CPU is
then complete up to its last event, and the lost events are counted from the
kernel's per-CPU statistics.

Clock: `x86-tsc` where the measurement clock is the TSC (trace time stamps
are then raw TSC values, the samplers' own counter); `mono_raw` otherwise,
mapped through the measurement clock's CLOCK_MONOTONIC_RAW origin.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import _native
from ..clock import MeasurementClock
from ..errors import UsageError, option
from ..knobs import KnobJournal, restore_leftovers
from ..memory import available_kib
from ..tables import Table
from ..units import cpumask_text, format_size_kib
from ..workers import run_parts
from . import osnoise
from .events import (
    SCHED_SWITCH,
    TRACEPOINTS,
    EventFormat,
    PageLayout,
    RawDecoder,
    Symbols,
    TraceEvents,
    Tracepoint,
    parse_format,
    parse_header_page,
    parse_text,
)
from .osnoise import osnoise_classes
from .store import CpuParts, PageBatch, RecordedEvents, time_span
from .tracefs import (
    DEFAULT_MOUNTPOINT,
    Instance,
    Mount,
    TracingUnavailable,
    find_or_mount,
    instance_name,
    release_mount,
    remove_leftovers,
)

# Default buffer: room for this many events per second per CPU, about 40
# bytes each. A quiet measured CPU records a few thousand a second; this
# shared development VM, busy with other work, up to 30,000.
EVENTS_PER_SECOND = 50_000
BYTES_PER_EVENT = 40
MIN_BUFFER_KB = 8_192
MAX_BUFFER_KB = 512 * 1024
MEMORY_SHARE = 0.25  # never ask for more than this share of MemAvailable in all
# Page faults of noisescope's own threads only: other tasks' faults happen
# while they hold the CPU, and that time is theirs.
FAULT_FILTER = 'comm ~ "ns-*"'
FAULT_SYSTEM = "exceptions"
RAW_LAYOUT = PageLayout()  # the page layout decode_raw is tested against
PAGES_PER_BATCH = 256  # raw pages read and decoded at a time


def buffer_kb_for(recording_ns: int, cpus: int, mem_available_kb: int | None) -> int:
    """Per-CPU buffer that holds EVENTS_PER_SECOND for `recording_ns`."""
    wanted = int(recording_ns / 1e9 * EVENTS_PER_SECOND * BYTES_PER_EVENT / 1024)
    size = min(max(wanted, MIN_BUFFER_KB), MAX_BUFFER_KB)
    cap = memory_cap_kb(cpus, mem_available_kb)
    return size if cap is None else min(size, cap)


def memory_cap_kb(cpus: int, mem_available_kb: int | None) -> int | None:
    """The largest buffer per CPU: all of them together take at most MEMORY_SHARE
    of the available memory (kernel memory, held while tracing)."""
    if not mem_available_kb:
        return None
    return max(MIN_BUFFER_KB // 4, int(mem_available_kb * MEMORY_SHARE / max(cpus, 1)))


def check_buffer_kb(buffer_kb: int | None, cpus: int, mem_available_kb: int | None) -> None:
    """An explicit buffer size (--trace-buffer) is capped as the default size is."""
    cap = memory_cap_kb(cpus, mem_available_kb)
    if buffer_kb is not None and cap is not None and buffer_kb > cap:
        raise UsageError(
            f"{option('buffer_kb', format_size_kib(buffer_kb))} per CPU is more than the tracing share "
            f"of available memory ({MEMORY_SHARE:.0%} of {format_size_kib(mem_available_kb)} over "
            f"{cpus} CPU{'s' if cpus != 1 else ''})",
            f"give at most {format_size_kib(cap)}, or leave it out to size the buffer by itself")


@dataclass(frozen=True)
class TraceClock:
    """How trace time stamps map onto the bundle's timeline."""

    name: str  # the trace_clock: "x86-tsc" or "mono_raw"
    clock: MeasurementClock

    @classmethod
    def choose(cls, available: str, clock: MeasurementClock) -> TraceClock:
        names = available.replace("[", " ").replace("]", " ").split()
        if clock.counter == "tsc" and "x86-tsc" in names:
            return cls("x86-tsc", clock)
        if "mono_raw" in names:
            return cls("mono_raw", clock)
        raise TracingUnavailable("tracefs offers neither the x86-tsc nor the mono_raw trace clock")

    def to_ns(self, stamps: np.ndarray) -> np.ndarray:
        if self.name == "x86-tsc":
            return self.clock.timestamp_ns(stamps)
        return np.asarray(stamps, np.uint64).astype(np.int64) - np.int64(
            self.clock.origin_monotonic_raw_ns)

    def describe(self) -> dict:
        if self.name == "x86-tsc":
            return {"clock": self.name, "mapping": "raw TSC ticks, converted like the samplers' "
                    "(clock.ticks_per_second, clock.origin_ticks)"}
        return {"clock": self.name, "mapping": "CLOCK_MONOTONIC_RAW ns minus "
                "clock.origin_monotonic_raw_ns", "origin_monotonic_raw_ns":
                self.clock.origin_monotonic_raw_ns}


@dataclass
class Recording:
    """A stopped recording, not yet decoded: when it ran, the events each CPU
    lost, and the files holding its buffers."""

    start_ns: int
    end_ns: int
    lost: dict[int, int]
    pages: dict[int, Path] = field(default_factory=dict)  # raw pages of each CPU
    text: Path | None = None  # or the text rendering (text reader)

    def remove_files(self) -> None:
        """Delete the copies of the buffers (once nothing will decode them again)."""
        for path in self.pages.values():
            path.unlink(missing_ok=True)
        if self.text is not None:
            self.text.unlink(missing_ok=True)


@dataclass
class Capture:
    """What one recording produced: its events (unless they went to a sink),
    how many, and when each CPU's trace is complete; for the raw reader, the
    batches of pages decoded and every event name seen (to read the events
    again from the pages: `RecordedEvents`)."""

    events: TraceEvents | None
    event_count: int
    switch_count: int
    coverage: Table  # cpu, start_ns, end_ns (complete up to), lost_events
    missed_pages: int = 0
    batches: list[PageBatch] = field(default_factory=list)
    event_names: set[str] = field(default_factory=set)
    read_along: dict[int, object] = field(default_factory=dict)  # per CPU, what a
    # ReadAlong made of the CPU's events as they were decoded


@dataclass
class SessionInfo:
    tracefs: str = ""
    mounted_by_us: bool = False
    instance: str = ""
    reader: str = ""
    buffer_kb_per_cpu: int = 0
    events: list[str] = field(default_factory=list)
    missing_events: list[str] = field(default_factory=list)
    leftovers_removed: list[str] = field(default_factory=list)
    other_instances: list[str] = field(default_factory=list)  # other tools', left alone
    osnoise_tracer: str = "not requested"  # "running without its workload", or why not
    tracers: list[str] = field(default_factory=list)  # the kernel's tracers (available_tracers)
    notes: list[str] = field(default_factory=list)


def _now_ticks() -> int:
    return int(_native.ticks())


def _stats(text: str) -> int:
    """Events lost according to a per-CPU stats file."""
    lost = 0
    for key in ("overrun", "commit overrun", "dropped events"):
        match = re.search(rf"^{key}:\s*(\d+)", text, re.M)
        lost += int(match.group(1)) if match else 0
    return lost


class TraceSession:
    """A private tracefs instance recording the kernel activity of `cpus`."""

    def __init__(self, cpus: tuple[int, ...], clock: MeasurementClock, *,
                 buffer_kb: int | None = None, recording_ns: int = 10_000_000_000,
                 mountpoint: Path = DEFAULT_MOUNTPOINT, symbols: Symbols | None = None,
                 tracepoints: tuple[Tracepoint, ...] = TRACEPOINTS, osnoise_mode: str = "off"):
        self.cpus = tuple(cpus)
        self.osnoise_mode = osnoise_mode  # the osnoise tracer's hooks: auto, on or off
        self.tracepoints = tracepoints  # what to record (sched_switch always)
        self.clock = clock
        self.requested_buffer_kb = buffer_kb
        self.recording_ns = recording_ns
        self.mountpoint = mountpoint
        self.symbols = symbols or Symbols()
        self.info = SessionInfo()
        self.trace_clock: TraceClock | None = None
        self._mount: Mount | None = None
        self._instance: Instance | None = None
        self.formats: dict[str, EventFormat] = {}
        self.layout: PageLayout | None = None
        self._started_ticks = 0
        self._lost_before: dict[int, int] = {}
        self._journal = KnobJournal("trace")
        self._osnoise_running = False

    # -- check and set up ---------------------------------------------------
    def __enter__(self) -> TraceSession:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        """Mount if needed, clear leftovers, create and configure the instance."""
        try:
            self._mount = find_or_mount(self.mountpoint)
            self.info.tracefs, self.info.mounted_by_us = str(self._mount.path), self._mount.mounted_by_us
            if self._mount.taken_over_from is not None:
                self.info.notes.append(f"tracefs was mounted by noisescope process "
                                       f"{self._mount.taken_over_from}, which is gone: this run "
                                       f"unmounts it when done")
            removed, failed = remove_leftovers(self._mount.path)
            restored, unrestored = restore_leftovers()
            self.info.leftovers_removed = removed + [f"restored {r}" for r in restored]
            self.info.notes += [f"could not remove leftover instance {f}" for f in failed]
            self.info.notes += [f"could not restore {f}" for f in unrestored]
            self._instance = Instance.create(self._mount.path, instance_name())
            self.info.instance = self._instance.name
            self.info.other_instances = sorted(set(os.listdir(self._mount.path / "instances"))
                                               - {self._instance.name})
            self.info.tracers = sorted(set(self._instance.read("available_tracers").split())
                                       - {"nop"})
            self._configure(self._instance)
        except OSError as error:
            self.close()
            raise TracingUnavailable(f"setting up tracing failed: {error.strerror or error} "
                                     f"({getattr(error, 'filename', '') or 'tracefs'})") from None
        except BaseException:
            self.close()
            raise

    def _configure(self, instance: Instance) -> None:
        self.trace_clock = TraceClock.choose(instance.read("trace_clock"), self.clock)
        instance.write("trace_clock", self.trace_clock.name)
        instance.write("options/overwrite", "0")
        instance.write("tracing_cpumask", cpumask_text(self.cpus))
        self._size_buffers(instance)
        with_osnoise = self._wants_osnoise(instance)
        for tp in self.tracepoints:
            if tp.system == osnoise.SYSTEM and not with_osnoise:
                continue
            if instance.exists(f"events/{tp.path}/enable"):
                instance.write(f"events/{tp.path}/enable", "1")
                self.info.events.append(tp.path)
                self.formats[tp.name] = parse_format(instance.read(f"events/{tp.path}/format"))
            else:
                self.info.missing_events.append(tp.path)
        if SCHED_SWITCH.path not in self.info.events:
            raise TracingUnavailable("this kernel has no sched_switch trace event")
        if instance.exists(f"events/{FAULT_SYSTEM}/filter"):
            instance.write(f"events/{FAULT_SYSTEM}/filter", FAULT_FILTER)
        if with_osnoise:  # its events are enabled first: no code is patched under its hooks
            osnoise.start(instance, self._journal)
            self._osnoise_running = True
            self.info.osnoise_tracer = "running without its workload"
        self.layout = self._page_layout(instance)
        self.info.reader = "raw" if self.layout else "text"

    def _size_buffers(self, instance: Instance) -> None:
        size = self.requested_buffer_kb or buffer_kb_for(self.recording_ns, len(self.cpus),
                                                         available_kib())
        online = sorted(int(p.name[3:]) for p in instance.path.joinpath("per_cpu").glob("cpu*")
                        if p.name[3:].isdigit())
        for cpu in online:  # CPUs we do not record keep the smallest buffer
            if cpu not in self.cpus:
                instance.write(f"per_cpu/cpu{cpu}/buffer_size_kb", "1")
        for cpu in self.cpus:
            while True:
                try:
                    instance.write(f"per_cpu/cpu{cpu}/buffer_size_kb", str(size))
                    break
                except OSError as error:
                    if error.errno != errno.ENOMEM or size <= MIN_BUFFER_KB // 8:
                        raise
                    size //= 2
                    self.info.notes.append(f"trace buffer reduced to {size} KiB per CPU (no memory)")
        self.info.buffer_kb_per_cpu = int(instance.read(f"per_cpu/cpu{self.cpus[0]}/buffer_size_kb")
                                          .split()[0])

    def _wants_osnoise(self, instance: Instance) -> bool:
        """Whether to run the osnoise tracer's hooks (and record their noise
        events): with mode "on" where the kernel allows it, with "auto" only
        where a class of activity has no entry/exit events of its own here (the
        noise events stand in for them). Without the tracer its events stay
        off: they would record another tool's osnoise run (rtla), and enabling
        them patches code that runs inside that run's NMI hook (6.1 kernels
        crash when an int3 of the patch lands there)."""
        if self.osnoise_mode == "off":
            return False
        present = {tp.name for tp in self.tracepoints
                   if instance.exists(f"events/{tp.path}/enable")}
        if self.osnoise_mode == "auto" and not osnoise_classes(present):
            return False
        reason = osnoise.unavailable(instance)
        if reason:
            self.info.osnoise_tracer = f"not started: {reason}"
            return False
        return True

    @staticmethod
    def _page_layout(instance: Instance) -> PageLayout | None:
        """The raw page layout when it is the one decode_raw knows, else None (text)."""
        try:
            page = int(instance.read("buffer_subbuf_size_kb")) * 1024 \
                if instance.exists("buffer_subbuf_size_kb") else os.sysconf("SC_PAGE_SIZE")
            layout = parse_header_page(instance.tracefs.joinpath("events/header_page").read_text(), page)
        except (OSError, ValueError):
            return None
        known = (layout.timestamp_offset, layout.commit_offset, layout.commit_size, layout.data_offset)
        expected = (RAW_LAYOUT.timestamp_offset, RAW_LAYOUT.commit_offset, RAW_LAYOUT.commit_size,
                    RAW_LAYOUT.data_offset)
        return layout if known == expected else None

    # -- record ---------------------------------------------------------------
    @property
    def instance(self) -> Instance:
        if self._instance is None:
            raise RuntimeError("the trace session is not open")
        return self._instance

    def start(self, clear: bool = True) -> None:
        """Empty the buffers (unless told they are: the raw reader consumed
        them; clearing costs an RCU grace period, tens of ms) and start recording."""
        instance = self.instance
        if clear or self.layout is None:
            instance.write("trace", "")  # truncating `trace` empties the instance's buffers
        self._lost_before = {cpu: _stats(instance.read(f"per_cpu/cpu{cpu}/stats")) for cpu in self.cpus}
        # The recording's bounds hold every event: read before tracing starts
        # and after it stops (the writes themselves can record events).
        self._started_ticks = _now_ticks()
        instance.write("tracing_on", "1")

    def stop(self, directory: Path, name: str) -> Recording:
        """Stop recording and move the buffers' contents into files in
        `directory` (raw pages, or the text rendering), undecoded: this runs
        between measurements, so it does as little as it can."""
        instance = self.instance
        instance.write("tracing_on", "0")
        stopped_ticks = _now_ticks()
        lost = {cpu: _stats(instance.read(f"per_cpu/cpu{cpu}/stats")) - self._lost_before.get(cpu, 0)
                for cpu in self.cpus}
        start_ns, end_ns = (int(v) for v in self.clock.timestamp_ns(
            np.array([self._started_ticks, stopped_ticks], np.uint64)))
        recording = Recording(start_ns, end_ns, lost)
        if self.layout is not None:
            for cpu in self.cpus:
                recording.pages[cpu] = directory / f"{name}.cpu{cpu}.raw"
                with open(recording.pages[cpu], "wb") as out:
                    for pages in self.raw_batches(cpu):
                        out.write(pages)
        else:
            recording.text = directory / f"{name}.trace.txt"
            with open(instance.file("trace"), "rb") as text, open(recording.text, "wb") as out:
                shutil.copyfileobj(text, out)
        return recording

    def decode(self, recording: Recording, sink: Callable[[TraceEvents], None] | None = None,
               read_along: ReadAlong | None = None) -> Capture:
        """Decode a recording's files; the events go to `sink` batch by batch
        if given, else into the Capture. `read_along` (raw pages only) reads
        each CPU's events as they are decoded (the Capture keeps what it made)."""
        assert self.trace_clock is not None
        kept: list[TraceEvents] = []
        tally = _Tally()
        made = {}
        if self.layout is not None:
            decoder = self.raw_decoder()
            for cpu, path in recording.pages.items():
                part, made[cpu] = self._decode_pages(decoder, cpu, path, sink or kept.append,
                                                     read_along)
                tally.merge(part)
        elif recording.text is not None:
            with open(recording.text, errors="replace") as lines:
                tally.take(parse_text(lines, self.trace_clock.to_ns), sink or kept.append)
        capture = self._capture(recording, tally, None if sink else TraceEvents.concat(kept))
        if read_along is not None:
            capture.read_along = made
        return capture

    def decode_side_by_side(self, recording: Recording, parts: Callable[[int], CpuParts] | None,
                            workers: int, read_along: ReadAlong | None = None
                            ) -> tuple[Capture, OSError | None]:
        """decode(), its CPUs in `workers` processes (raw pages only), each
        writing its CPU's events where `parts` (the k-th CPU's parts of the
        spool's tables: `EventSpool.reserve_parts`) says, if given;
        `read_along` reads them in the worker too, as in decode(). Returns
        the capture and the first of the workers' write errors (their parts
        are then incomplete)."""
        assert self.layout is not None
        cpus = list(recording.pages)

        def decode_cpu(k: int) -> tuple[_Tally, object, OSError | None]:
            cpu = cpus[k]
            written = parts(k) if parts is not None else None
            tally, made = self._decode_pages(self.raw_decoder(), cpu, recording.pages[cpu],
                                             written or (lambda batch: None), read_along)
            if written is not None:
                written.close()
            return tally, made, written.failure if written is not None else None

        decoded = run_parts(decode_cpu, range(len(cpus)), workers)
        tally = _Tally()
        for part, _, _ in decoded:
            tally.merge(part)
        capture = self._capture(recording, tally, None)
        if read_along is not None:
            capture.read_along = {cpu: made for cpu, (_, made, _) in zip(cpus, decoded, strict=True)}
        return capture, next((failure for _, _, failure in decoded if failure is not None), None)

    def _decode_pages(self, decoder: RawDecoder, cpu: int, path: Path,
                      sink: Callable[[TraceEvents], None], read_along: ReadAlong | None = None
                      ) -> tuple[_Tally, object]:
        """One CPU's copy of its buffer, PAGES_PER_BATCH pages at a time, each
        batch tallied and handed to `sink` (and read by `read_along`, which
        gets an iterator of them: what it leaves is decoded after it);
        returns the tally and what read_along made (None without one)."""
        assert self.layout is not None
        tally = _Tally()

        def batches() -> Iterator[TraceEvents]:
            offset = 0
            with open(path, "rb") as raw:
                while pages := raw.read(PAGES_PER_BATCH * self.layout.page_size):
                    batch = decoder.decode(cpu, pages)
                    span = tally.take(batch, sink)
                    if span is not None:
                        tally.batches.append(PageBatch(cpu, path, offset, len(pages), *span))
                    offset += len(pages)
                    yield batch

        decoded = batches()
        made = None
        if read_along is not None:  # (read again by a decoder of its own: this one counts the
            # pages that follow lost events)
            made = read_along(cpu, decoded, lambda: RecordedEvents(self.raw_decoder(),
                                                                   tally.batches, tally.names))
        for _ in decoded:  # what the reader did not need
            pass
        tally.missed = decoder.missed_pages
        decoder.missed_pages = 0
        return tally, made

    def _capture(self, recording: Recording, tally: _Tally, events: TraceEvents | None) -> Capture:
        ends = [tally.last.get(cpu, recording.start_ns) if recording.lost[cpu] else recording.end_ns
                for cpu in self.cpus]
        coverage = Table({"cpu": np.array(self.cpus, np.int32),
                          "start_ns": np.full(len(self.cpus), recording.start_ns, np.int64),
                          "end_ns": np.array(ends, np.int64),
                          "lost_events": np.array([recording.lost[c] for c in self.cpus], np.int64)})
        return Capture(events, tally.events, tally.switches, coverage, tally.missed, tally.batches,
                       tally.names)

    def raw_decoder(self) -> RawDecoder:
        assert self.layout is not None and self.trace_clock is not None
        return RawDecoder(self.formats, self.layout, self.trace_clock.to_ns, self.symbols)

    def recorded_events(self, captures: list[Capture]) -> RecordedEvents:
        """The events of decoded recordings, read again from their pages (raw
        reader only; the files must still be there)."""
        return RecordedEvents(self.raw_decoder(), [b for c in captures for b in c.batches],
                              set().union(*(c.event_names for c in captures)))

    def raw_batches(self, cpu: int) -> Iterator[bytes]:
        """Consume a CPU's buffer: batches of raw pages, each page padded to
        its full size."""
        assert self.layout is not None
        page = self.layout.page_size
        fd = os.open(self.instance.file(f"per_cpu/cpu{cpu}/trace_pipe_raw"), os.O_RDONLY | os.O_NONBLOCK)
        try:
            while True:
                chunks = []
                for _ in range(PAGES_PER_BATCH):
                    try:
                        chunk = os.read(fd, page)
                    except BlockingIOError:
                        break
                    if not chunk:
                        break
                    chunks.append(chunk.ljust(page, b"\0"))
                if not chunks:
                    return
                yield b"".join(chunks)
        finally:
            os.close(fd)

    # -- restore ----------------------------------------------------------------
    def close(self) -> None:
        """Remove the instance and unmount what we mounted (safe to call twice)."""
        if self._instance is not None and self._osnoise_running:
            try:
                osnoise.stop(self._instance)
            except OSError as error:
                self.info.notes.append(f"osnoise tracer could not be stopped ({error.strerror})")
            self._osnoise_running = False
        if self._instance is not None:
            try:
                self._instance.remove()
            except OSError as error:
                self.info.notes.append(f"instance {self._instance.name} could not be removed "
                                       f"({error.strerror}); `noisescope cleanup` removes it later")
                _quiesce(self._instance)
            self._instance = None
        self.info.notes += [f"could not restore {f}" for f in self._journal.restore()]
        if self._mount is not None:
            note = release_mount(self._mount)
            if note:
                self.info.notes.append(f"tracefs {note}")
            self._mount = None


# What reads a CPU's events while they are decoded: (cpu, its batches in time
# order, what reads them again from the pages once the batches are all taken)
# -> a result (picklable: it may come from a worker process).
ReadAlong = Callable[[int, Iterator[TraceEvents], Callable[[], RecordedEvents]], object]


def _quiesce(instance: Instance) -> None:
    """Leave an instance we could not remove recording nothing, with small buffers."""
    for relative, value in (("tracing_on", "0"), ("events/enable", "0"), ("buffer_size_kb", "1")):
        try:
            instance.write(relative, value)
        except OSError:
            pass


@dataclass
class _Tally:
    """Counts the batches of a recording, the event names and each CPU's last
    event time: where events were lost (the buffer filled and newer ones were
    dropped), the trace of that CPU is complete only up to its last event."""

    events: int = 0
    switches: int = 0
    last: dict[int, int] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    batches: list[PageBatch] = field(default_factory=list)  # the raw reader's, with their times
    missed: int = 0  # pages the kernel flagged as following lost events

    def merge(self, other: _Tally) -> None:
        """Add another CPU's tally."""
        self.events += other.events
        self.switches += other.switches
        for cpu, latest in other.last.items():
            self.last[cpu] = max(self.last.get(cpu, latest), latest)
        self.names |= other.names
        self.batches += other.batches
        self.missed += other.missed

    def take(self, batch: TraceEvents, sink: Callable[[TraceEvents], None]) -> tuple[int, int] | None:
        """Count a batch and hand it on; returns the time range of its events (None if none)."""
        self.events += batch.events.rows
        self.switches += batch.switches.rows
        self.names.update(batch.event_names())
        span = time_span(batch)
        for table in (batch.events, batch.switches):
            cpus = [int(table["cpu"][0])] if batch.in_order and table.rows else \
                np.unique(table["cpu"]).tolist()
            for cpu in cpus:
                latest = span[1] if batch.in_order else \
                    int(table["timestamp_ns"][table["cpu"] == cpu].max())
                self.last[cpu] = max(self.last.get(cpu, latest), latest)
        sink(batch)
        return span
