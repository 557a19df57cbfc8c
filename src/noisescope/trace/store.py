"""Where decoded trace events live between recording and the bundle.

A busy machine records tens of thousands of events a second per CPU: too
many to hold for a long scan. `EventSpool` writes them batch by batch to two
tables, each a directory of Parquet files, a CPU's events of a recording in
files of their own (row groups of one CPU, so reading a CPU and a time
range skips the rest), and the bundle links (or copies) the files in. Readers get
events by CPU and time range from any kind of source:

- `TraceEvents` (in memory; `events.py`),
- `ParquetEvents` (the spool, or a written bundle's `events` and
  `sched_switch` tables), and
- `RecordedEvents` (the recordings' raw pages, still on disk while a scan
  explains its detours: decoded again batch by batch, which costs less
  memory than reading the spool back and needs no pyarrow).
"""

from __future__ import annotations

import bisect
import itertools
import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .. import interrupts
from ..tables import PART_ROWS, ROW_GROUP_ROWS, Table, joined_arrow, parquet_parts
from .events import RawDecoder, TraceEvents

QUEUED_BATCHES = 2  # decoded batches waiting for the spool's writer thread


class EventSource(Protocol):
    def read(self, cpu: int, start_ns: int, end_ns: int) -> TraceEvents:
        """Events of one CPU with start_ns <= time <= end_ns, in time order."""

    def event_names(self) -> set[str]:
        """Every event name present ('sched_switch' included when there are switches)."""


@dataclass
class ParquetEvents:
    """Events in Parquet files (tables `events` and `sched_switch`), read by
    row group: those whose statistics overlap the CPU and time range asked
    for (the spool writes row groups of one CPU)."""

    events_path: Path
    switches_path: Path
    _files: dict[Path, _RowGroups] = field(default_factory=dict, repr=False)

    def read(self, cpu: int, start_ns: int, end_ns: int) -> TraceEvents:
        return TraceEvents(self._rows(self.events_path).read(cpu, start_ns, end_ns),
                           self._rows(self.switches_path).read(cpu, start_ns, end_ns)).sorted()

    def event_names(self) -> set[str]:
        names = self._rows(self.events_path).distinct("event")
        return names | ({"sched_switch"} if self._rows(self.switches_path).rows else set())

    def _rows(self, path: Path) -> _RowGroups:
        if path not in self._files:
            self._files[path] = _RowGroups(path)
        return self._files[path]


class _Overlaps:
    """Things that each cover a time range (batches of pages, row groups) of
    one CPU, found by the range asked for: by bisection, in the order they were
    given. A many-CPU scan has thousands of them, and looking at every one for
    each read made a scan's cost grow with the square of its CPUs."""

    def __init__(self, ranges: list[tuple[int, int]]):
        """`ranges`: (first, last) of each thing, by its number."""
        self._order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
        self._firsts = [ranges[i][0] for i in self._order]
        self._lasts = [ranges[i][1] for i in self._order]
        self._reach = list(itertools.accumulate(self._lasts, max))  # latest last so far

    def find(self, start: int, end: int) -> list[int]:
        """The numbers of the things with first <= end and last >= start, in order."""
        lo = bisect.bisect_left(self._reach, start)  # none before this reaches start
        hi = bisect.bisect_right(self._firsts, end)  # none from here begins by end
        return sorted(self._order[k] for k in range(lo, hi) if self._lasts[k] >= start)


class _RowGroups:
    """A table's Parquet files (`parquet_parts`) and the CPU and time range of
    each of their row groups."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self.files = [pq.ParquetFile(part) for part in parquet_parts(path)]
        self._last: tuple[tuple[tuple[int, int], ...] | None, Table | None] = (None, None)
        self.groups: list[tuple[int, int]] = []  # (file, row group) by number
        self.ranges = []
        self.rows = 0
        for number, file in enumerate(self.files):
            meta = file.metadata
            self.rows += meta.num_rows
            names = [meta.schema.column(i).name for i in range(meta.num_columns)]
            cpu, ts = names.index("cpu"), names.index("timestamp_ns")
            for i in range(meta.num_row_groups):
                group = meta.row_group(i)
                c, t = group.column(cpu).statistics, group.column(ts).statistics
                self.groups.append((number, i))
                self.ranges.append((c.min, c.max, t.min, t.max) if c is not None and t is not None
                                   and c.has_min_max and t.has_min_max else None)
        # the row groups of one CPU (the spool's) indexed by CPU; the others (several
        # CPUs, no statistics) looked at for every read
        by_cpu: dict[int, list[int]] = {}
        self._shared = []
        for i, r in enumerate(self.ranges):
            if r is not None and r[0] == r[1]:
                by_cpu.setdefault(r[0], []).append(i)
            else:
                self._shared.append(i)
        self._by_cpu = {c: (groups, _Overlaps([self.ranges[i][2:] for i in groups]))
                        for c, groups in by_cpu.items()}

    def read(self, cpu: int, start_ns: int, end_ns: int) -> Table:
        own, overlaps = self._by_cpu.get(cpu, ([], None))
        found = {own[k] for k in overlaps.find(start_ns, end_ns)} if overlaps else set()
        found.update(i for i in self._shared if (r := self.ranges[i]) is None or (
            r[0] <= cpu <= r[1] and r[2] <= end_ns and r[3] >= start_ns))
        groups = tuple(self.groups[i] for i in sorted(found))
        if groups != self._last[0]:  # consecutive chunks of a CPU often share row groups
            self._last = (groups, self._read(groups))
        table = self._last[1]
        ts = table["timestamp_ns"]
        return table.filter((table["cpu"] == cpu) & (ts >= start_ns) & (ts <= end_ns))

    def _read(self, groups: tuple[tuple[int, int], ...]) -> Table:
        if not groups:
            return Table.from_arrow(self.files[0].schema_arrow.empty_table())
        return Table.concat(Table.from_arrow(self.files[number].read_row_groups(
            [group for file, group in groups if file == number]))
            for number in dict.fromkeys(file for file, _ in groups))

    def distinct(self, column: str) -> set:
        values: set = set()
        for file in self.files:
            for group in range(file.metadata.num_row_groups):
                for chunk in file.read_row_group(group, columns=[column]).column(0).chunks:
                    values.update(chunk.dictionary.to_pylist() if hasattr(chunk, "dictionary")
                                  else chunk.to_pylist())
        return values


@dataclass(frozen=True, slots=True)
class PageBatch:
    """Pages of one CPU in a recording's buffer copy that are decoded
    together (always the same ones, so their events come out in the same
    order), and the time range of their events. (Slots: a CPU-hour has
    thousands, kept until the bundle is written.)"""

    cpu: int
    path: Path
    offset: int  # bytes into the file
    size: int
    first_ns: int
    last_ns: int


@dataclass
class RecordedEvents:
    """Events still in raw buffer copies, read by decoding the batches of
    pages whose time range overlaps the one asked for: the same events, in
    the same order, as ParquetEvents gives from the spool of those batches."""

    decoder: RawDecoder
    batches: list[PageBatch]
    names: set[str]  # every event name in the recordings ('sched_switch' included)
    _decoded: dict[PageBatch, TraceEvents] = field(default_factory=dict, repr=False)  # the
    # batches of the last read: consecutive reads (a CPU's spans, in time order) share batches
    _by_cpu: dict[int, tuple[list[PageBatch], _Overlaps]] = field(default_factory=dict,
                                                                   repr=False)

    def __post_init__(self) -> None:
        mine: dict[int, list[PageBatch]] = {}
        for batch in self.batches:
            mine.setdefault(batch.cpu, []).append(batch)
        self._by_cpu = {cpu: (batches, _Overlaps([(b.first_ns, b.last_ns) for b in batches]))
                        for cpu, batches in mine.items()}

    def read(self, cpu: int, start_ns: int, end_ns: int) -> TraceEvents:
        batches, overlaps = self._by_cpu.get(cpu, ([], None))
        chosen = [batches[k] for k in overlaps.find(start_ns, end_ns)] if overlaps else []
        # let the batches no longer needed go before decoding the next ones
        self._decoded = {b: self._decoded[b] for b in chosen if b in self._decoded}
        for batch in chosen:
            if batch not in self._decoded:
                self._decoded[batch] = self._decode(batch)
        return _parts_of(cpu, start_ns, end_ns, [self._decoded[b] for b in chosen])

    def event_names(self) -> set[str]:
        return set(self.names)

    def _decode(self, batch: PageBatch) -> TraceEvents:
        with open(batch.path, "rb") as raw:
            raw.seek(batch.offset)
            return self.decoder.decode(batch.cpu, raw.read(batch.size))


class OutOfOrder(Exception):
    """A CPU's events or spans went back in time where a stream reads them
    forward only (a clock that stepped back): read them from the pages instead."""


class StreamedEvents:
    """One CPU's events read while its pages are decoded (the first decoding
    pass reads them for the attribution as it goes: `session.ReadAlong`).
    Reads must come with starts that never move back, as a CPU's spans are
    explained, and the batches must follow one another in time; the batches
    wholly before the last start are let go. The same events, in the same
    order, as RecordedEvents reads from those pages; OutOfOrder where the
    reads or the batches go back in time (what was let go may be needed)."""

    def __init__(self, cpu: int, batches: Iterator[TraceEvents], names: set[str]):
        self.cpu, self.names = cpu, names
        self._batches = batches
        self._held: list[tuple[int, int, TraceEvents]] = []  # (first, last time, batch)
        self._exhausted = False
        self._reach = self._let_go = -1 << 63  # the latest time decoded, let go

    def read(self, cpu: int, start_ns: int, end_ns: int) -> TraceEvents:
        if cpu != self.cpu:
            raise ValueError(f"the events of CPU {self.cpu} are streamed, not those of CPU {cpu}")
        if start_ns <= self._let_go:
            raise OutOfOrder(f"CPU {cpu}: a read from {start_ns} ns after the events up to "
                             f"{self._let_go} ns were let go")
        while not self._exhausted and (not self._held or self._held[-1][0] <= end_ns):
            batch = next(self._batches, None)
            if batch is None:
                self._exhausted = True
            elif (span := time_span(batch)) is not None:
                if span[0] < self._reach:
                    raise OutOfOrder(f"CPU {cpu}: events at {span[0]} ns decoded after "
                                     f"{self._reach} ns")
                self._reach = span[1]
                self._held.append((*span, batch))
        while self._held and self._held[0][1] < start_ns:  # no later read needs it
            self._let_go = self._held.pop(0)[1]
        return _parts_of(cpu, start_ns, end_ns, [batch for first, last, batch in self._held
                                                 if first <= end_ns and last >= start_ns])

    def event_names(self) -> set[str]:
        return set(self.names)


def _parts_of(cpu: int, start_ns: int, end_ns: int, batches: list[TraceEvents]) -> TraceEvents:
    """The events of one CPU in a time range from the decoded batches that hold
    them: each batch's part (a slice of one in time order), joined, in time order."""
    return TraceEvents.concat(batch.read(cpu, start_ns, end_ns) for batch in batches).sorted()


def time_span(batch: TraceEvents) -> tuple[int, int] | None:
    """The first and last time in a decoded batch (None: no events)."""
    times = [t["timestamp_ns"] for t in (batch.events, batch.switches) if t.rows]
    if batch.in_order:  # each table's first and last rows
        return (min(int(t[0]) for t in times), max(int(t[-1]) for t in times)) if times else None
    return (min(int(t.min()) for t in times), max(int(t.max()) for t in times)) if times else None


# How the spool's Parquet files are written: strings and numbers that repeat
# (an event's pid) with dictionary pages, the time stamps as deltas (they
# rise), and statistics only of what readers skip row groups by (`_RowGroups`):
# the same files at about 0.6 times the cost and 0.65 times the size. A
# switch's pids and priorities are left plain: their dictionaries cost a
# fifth of the switches' encoding and saved nothing after compression
# (docs/benchmarks.md, "The 256-CPU minute in the third session"); so is the
# CPU (one a part: compressed to nothing either way, plain at 0.6 times the cost).
SPOOL_LAYOUT = {
    "events": {"dictionary": ["event", "name", "pid"],
               "deltas": ["timestamp_ns", "number"]},
    "sched_switch": {"dictionary": ["prev_comm", "prev_state", "next_comm"],
                     "deltas": ["timestamp_ns"]},
}


class _Part:
    """One part of a spooled table being written (a CPU's events of a
    recording, in time order): the batches given to it, as Arrow, gathered
    into row groups of ROW_GROUP_ROWS rows or more, in files `STEM-0000.parquet`,
    `STEM-0001.parquet`, ... of PART_ROWS rows or so each, each under a
    temporary name until it is whole. A Parquet writer holds some metadata
    per row group until its file is closed (10 KB, which at a batch's 15,000
    events a row group was 400 MB for the 256-CPU minute in one file); a file
    of PART_ROWS rows at most keeps that bounded however long a CPU was traced."""

    def __init__(self, name: str, stem: Path):
        self.name, self.stem = name, stem
        self.files = 0  # begun
        self._writer = None
        self._schema = None  # the files' (set by the first write)
        self._rows = 0  # in the file being written
        self._gathered: list = []

    def add(self, table: Table) -> None:
        if table.rows:
            self._gathered.append(table.to_arrow())
        if sum(t.num_rows for t in self._gathered) >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._gathered:
            # one dictionary per column: the writer then takes the codes as they are
            self._write(joined_arrow(self._gathered))
            self._gathered.clear()

    def _path(self, number: int) -> Path:
        return self.stem.with_name(f"{self.stem.name}-{number:04d}.parquet")

    def _write(self, arrow) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is not None and self._rows >= PART_ROWS:
            self._end_file()
        if self._writer is None:
            layout = SPOOL_LAYOUT[self.name]
            # every column required: a decoded event has every field (a missing text is
            # ""), and without definition levels a row costs a fifth less to encode; the
            # schema is put on the columns as they are (a cast copied them: +8 MiB), and
            # the writer refuses a null in a required column
            self._schema = self._schema or pa.schema([field.with_nullable(False)
                                                      for field in arrow.schema])
            self._writer = pq.ParquetWriter(
                _unfinished(self._path(self.files)), self._schema, compression="zstd",
                use_dictionary=layout["dictionary"],
                column_encoding={c: "DELTA_BINARY_PACKED" for c in layout["deltas"]},
                write_statistics=["cpu", "timestamp_ns"])
            self.files += 1
        self._writer.write_table(pa.Table.from_arrays(arrow.columns, schema=self._schema))
        self._rows += arrow.num_rows

    def _end_file(self) -> None:
        self._writer.close()
        self._writer, self._rows = None, 0
        path = self._path(self.files - 1)
        os.rename(_unfinished(path), path)

    def close(self, empty: Table) -> None:
        """Write what is gathered, and the last file whole (`empty` gives the
        columns of a part that got no rows: one file of none)."""
        self._flush()
        if self._writer is None and not self.files:
            self._write(empty.to_arrow())
        if self._writer is not None:
            self._end_file()

    def discard(self) -> None:
        """Close and remove its files."""
        self._gathered.clear()
        if self._writer is not None:
            try:
                self._writer.close()
            except OSError:  # the file goes anyway
                pass
            self._writer = None
        for number in range(self.files):
            _unfinished(self._path(number)).unlink(missing_ok=True)
            self._path(number).unlink(missing_ok=True)


class _SpoolTable:
    """One of the spool's tables (a directory of parts, `_Part`), written by a
    thread of its own: each CPU's batches in a part of their own (a batch of
    several CPUs, the text reader's, in one part of its own), encoded and
    compressed while the caller decodes on (pyarrow lets go of the GIL
    there). At most QUEUED_BATCHES wait."""

    def __init__(self, name: str, directory: Path, empty: Table):
        self.name, self.directory, self.empty = name, directory, empty
        self.failure: BaseException | None = None
        self.next_part = 0  # the next part's number (its file name)
        self._part: _Part | None = None
        self._part_cpu: int | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUED_BATCHES)
        self._ended = threading.Event()  # set by the thread as it ends
        threading.Thread(target=self._run, name=f"noisescope-{name}", daemon=True).start()

    def put(self, table) -> None:
        """Queue a Table (END_PART: the part being written is whole; None: the
        same, and end the thread)."""
        self._queue.put(table)

    def wait_ended(self) -> BaseException | None:
        """Until the thread has ended, whatever signals come meanwhile (a file
        closed by giving the spool up while its thread still wrote it would be
        a race); returns the stop that came meanwhile, if one did."""
        return interrupts.wait_through(self._ended)

    def new_part(self) -> _Part:
        part = _Part(self.name, part_stem(self.directory, self.next_part))
        self.next_part += 1
        return part

    def _run(self) -> None:
        try:
            while (table := self._queue.get()) is not None:
                try:
                    if self.failure is None:  # (after one, the rest is not written: the
                        self._take(table)  # caller hears of the failure)
                except BaseException as error:  # noqa: BLE001 - raised in the caller's thread
                    self.failure = error
                finally:
                    self._queue.task_done()
            try:
                if self.failure is None:
                    self._end_part()
            except BaseException as error:  # noqa: BLE001
                self.failure = error
            finally:
                self._queue.task_done()
        finally:
            self._ended.set()

    def _take(self, table) -> None:
        if table is END_PART:
            self._end_part()
            return
        if not table.rows:
            return
        cpus = table["cpu"]
        cpu = int(cpus[0]) if (cpus == cpus[0]).all() else None  # None: several (text)
        if self._part is None or cpu is None or cpu != self._part_cpu:
            self._end_part()
            self._part, self._part_cpu = self.new_part(), cpu
        self._part.add(table)
        if cpu is None:
            self._end_part()

    def _end_part(self) -> None:
        if self._part is not None:
            part, self._part = self._part, None
            part.close(self.empty)

    def wait_idle(self) -> None:
        """Until the thread has taken every table queued (it then waits for more)."""
        self._queue.join()

    def close(self) -> None:
        """The table whole (a table that got no rows gets an empty part)."""
        if self.next_part == 0:
            self.new_part().close(self.empty)

    def discard(self) -> None:
        if self._part is not None:
            self._part.discard()
            self._part = None


END_PART = object()  # queued: the part being written is whole


def part_stem(directory: Path, number: int) -> Path:
    """Where part `number` of a spooled table goes (its files: `_Part`)."""
    return directory / f"{number:06d}"


class CpuParts:
    """A CPU's events written, in a worker process, as parts of the spool's
    tables that the spool numbered for it (`EventSpool.reserve_parts`): the
    same files the spool writes of them. Called with each decoded batch; a
    write error (a full disk) discards its parts and is kept (`failure`)
    instead of ending the decoding, which counts and explains the events all
    the same; the spool is then given up."""

    def __init__(self, stems: dict[str, Path]):
        self._parts = {name: _Part(name, stem) for name, stem in stems.items()}
        self.failure: OSError | None = None

    def __call__(self, batch: TraceEvents) -> None:
        self._write(batch, _Part.add)

    def close(self) -> None:
        self._write(TraceEvents.empty(), _Part.close)

    def _write(self, batch: TraceEvents, step: Callable[[_Part, Table], None]) -> None:
        if self.failure is not None:
            return
        try:
            for name, table in _tables_of(batch):
                step(self._parts[name], table)
        except OSError as error:
            self.failure = error
            for part in self._parts.values():
                part.discard()


def _tables_of(batch: TraceEvents) -> tuple[tuple[str, Table], ...]:
    """The spool's tables' parts of a batch (or their columns, of an empty one)."""
    return ("events", batch.events), ("sched_switch", batch.switches)


@dataclass
class EventSpool:
    """Appends TraceEvents batches to two tables in `directory`, each a
    directory of Parquet parts (`events.parquet/`, `sched_switch.parquet/`; a
    part holds one CPU's events of a recording, in time order: reading a CPU
    and a time range skips the rest), each under a temporary name until
    finish(): a table under its own name is whole. Each table is written by a
    thread of its own (`_SpoolTable`), or a CPU's parts by the worker process
    that decodes it (`reserve_parts`, `CpuParts`); a write's error comes out of
    the next append() or of finish()."""

    directory: Path
    _tables: dict[str, _SpoolTable] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.source = ParquetEvents(self.directory / "events.parquet",
                                    self.directory / "sched_switch.parquet")
        self._paths = {"events": self.source.events_path,
                       "sched_switch": self.source.switches_path}

    def append(self, batch: TraceEvents) -> None:
        for name, table in _tables_of(batch):
            self.append_table(name, table)

    def append_table(self, name: str, table: Table) -> None:
        """Append a batch of one table ("events" or "sched_switch")."""
        self._raise_failure()
        self._open()[name].put(table)

    def _open(self) -> dict[str, _SpoolTable]:
        if not self._tables:
            for name, table in _tables_of(TraceEvents.empty()):
                directory = _unfinished(self._paths[name])
                directory.mkdir(parents=True, exist_ok=True)
                self._tables[name] = _SpoolTable(name, directory, table)
        return self._tables

    def reserve_parts(self, count: int) -> Callable[[int], CpuParts]:
        """Number the next `count` parts of each table for CPUs written
        elsewhere (worker processes), after those written so far; returns
        what makes the k-th of them. The writer threads are idle on return
        (before this process forks: workers.run_parts)."""
        first = {}
        for name, table in self._open().items():
            table.put(END_PART)
            table.wait_idle()
            first[name] = table.next_part
            table.next_part += count
        self._raise_failure()
        directories = {name: table.directory for name, table in self._tables.items()}
        return lambda k: CpuParts({name: part_stem(directory, first[name] + k)
                                   for name, directory in directories.items()})

    def wait_idle(self) -> None:
        """Until the writer threads have taken every batch appended: none of
        them is busy then (before this process forks: workers.run_parts)."""
        for table in self._tables.values():
            table.wait_idle()

    def _written(self) -> None:
        """Wait until the writer threads have written what was queued, and end
        them; a stop meanwhile is raised once all have ended (a spool given
        up closes its files)."""
        for table in self._tables.values():
            table.put(None)
        stops = [table.wait_ended() for table in self._tables.values()]  # every one, then a stop
        stop = next((stop for stop in stops if stop is not None), None)
        if stop is not None:
            raise stop

    def _raise_failure(self) -> None:
        for table in self._tables.values():
            if table.failure is not None:
                raise table.failure

    def discard(self) -> None:
        """Close and remove the files (a spool cut short)."""
        self._written()
        for table in self._tables.values():
            table.discard()
        self._tables.clear()
        for path in self._paths.values():
            shutil.rmtree(_unfinished(path), ignore_errors=True)

    def finish(self) -> ParquetEvents:
        """Close the tables (an empty one gets an empty part); the source to read."""
        self._open()
        self._written()
        self._raise_failure()
        for name, table in list(self._tables.items()):
            table.close()
            os.rename(table.directory, self._paths[name])
            del self._tables[name]
        return self.source


def _unfinished(path: Path) -> Path:
    return path.with_name(path.name + ".partial")
