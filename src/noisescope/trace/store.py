"""Where decoded trace events live between recording and the bundle.

A busy machine records tens of thousands of events a second per CPU: too
many to hold for a long scan. `EventSpool` writes them batch by batch to two
Parquet files (row groups of one CPU, so reading a CPU and a
time range skips the rest), and the bundle links (or copies) the files in. Readers get
events by CPU and time range from any kind of source:

- `TraceEvents` (in memory; `events.py`),
- `ParquetEvents` (the spool, or a written bundle's `events` and
  `sched_switch` tables), and
- `RecordedEvents` (the recordings' raw pages, still on disk while a scan
  explains its detours: decoded again batch by batch, which costs less
  memory than reading the spool back and needs no pyarrow).
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ..tables import Table
from .events import RawDecoder, TraceEvents

QUEUED_BATCHES = 2  # decoded batches waiting for the spool's writer thread
ROW_GROUP_ROWS = 1 << 16  # events of a CPU gathered into one row group, at least


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


class _RowGroups:
    """A Parquet file and the CPU and time range of each of its row groups."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self.file = pq.ParquetFile(path)
        self._last: tuple[tuple[int, ...] | None, Table | None] = (None, None)
        meta = self.file.metadata
        self.rows = meta.num_rows
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        cpu, ts = names.index("cpu"), names.index("timestamp_ns")
        self.ranges = []
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            c, t = group.column(cpu).statistics, group.column(ts).statistics
            self.ranges.append((c.min, c.max, t.min, t.max) if c is not None and t is not None
                               and c.has_min_max and t.has_min_max else None)

    def read(self, cpu: int, start_ns: int, end_ns: int) -> Table:
        groups = tuple(i for i, r in enumerate(self.ranges)
                       if r is None or (r[0] <= cpu <= r[1] and r[2] <= end_ns and r[3] >= start_ns))
        if groups != self._last[0]:  # consecutive chunks of a CPU often share row groups
            self._last = (groups, Table.from_arrow(self.file.read_row_groups(groups)) if groups
                          else Table.from_arrow(self.file.schema_arrow.empty_table()))
        table = self._last[1]
        ts = table["timestamp_ns"]
        return table.filter((table["cpu"] == cpu) & (ts >= start_ns) & (ts <= end_ns))

    def distinct(self, column: str) -> set:
        values: set = set()
        for group in range(self.file.metadata.num_row_groups):
            for chunk in self.file.read_row_group(group, columns=[column]).column(0).chunks:
                values.update(chunk.dictionary.to_pylist() if hasattr(chunk, "dictionary")
                              else chunk.to_pylist())
        return values


@dataclass(frozen=True)
class PageBatch:
    """Pages of one CPU in a recording's buffer copy that are decoded
    together (always the same ones, so their events come out in the same
    order), and the time range of their events."""

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
    _last: tuple[tuple[PageBatch, ...], TraceEvents] | None = field(default=None, repr=False)
    _decoded: dict[PageBatch, TraceEvents] = field(default_factory=dict, repr=False)  # the
    # batches of the last read: consecutive reads (a CPU's spans, in time order) share batches

    def read(self, cpu: int, start_ns: int, end_ns: int) -> TraceEvents:
        chosen = tuple(b for b in self.batches
                       if b.cpu == cpu and b.first_ns <= end_ns and b.last_ns >= start_ns)
        if self._last is None or chosen != self._last[0]:
            # let the batches no longer needed go before decoding the next ones
            self._last = None
            self._decoded = {b: self._decoded[b] for b in chosen if b in self._decoded}
            for batch in chosen:
                if batch not in self._decoded:
                    self._decoded[batch] = self._decode(batch)
            self._last = (chosen, TraceEvents.concat(self._decoded[b] for b in chosen))
        return self._last[1].read(cpu, start_ns, end_ns)

    def event_names(self) -> set[str]:
        return set(self.names)

    def _decode(self, batch: PageBatch) -> TraceEvents:
        with open(batch.path, "rb") as raw:
            raw.seek(batch.offset)
            return self.decoder.decode(batch.cpu, raw.read(batch.size))


@dataclass
class EventSpool:
    """Appends TraceEvents batches to Parquet files in `directory`, each under
    a temporary name until finish(): a file under its own name is whole.

    The batches are encoded and compressed by a writer thread (pyarrow lets
    go of the GIL there) while the caller decodes the next ones; at most
    QUEUED_BATCHES wait for it. A write's error comes out of the next
    append() or of finish()."""

    directory: Path
    _writers: dict[str, object] = field(default_factory=dict)
    _queue: queue.Queue | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _failure: BaseException | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.source = ParquetEvents(self.directory / "events.parquet",
                                    self.directory / "sched_switch.parquet")

    def append(self, batch: TraceEvents) -> None:
        self._raise_failure()
        if self._thread is None:
            self._queue = queue.Queue(maxsize=QUEUED_BATCHES)
            self._thread = threading.Thread(target=self._write_queued, name="noisescope-spool",
                                            daemon=True)
            self._thread.start()
        assert self._queue is not None
        self._queue.put(batch)

    def _write_queued(self) -> None:
        """The writer thread. Batches of one CPU are gathered into row groups of
        ROW_GROUP_ROWS events or more: the writer holds some 10 KB of metadata
        per row group until the file is closed, which at a batch's 15,000
        events was 400 MB for the 256-CPU minute (bench/many_cpus.py)."""
        assert self._queue is not None
        files = (("events", self.source.events_path), ("sched_switch", self.source.switches_path))
        gathered: dict[str, tuple[object, list[Table]]] = {}  # name -> (its CPU, tables)

        def flush(name: str, path: Path) -> None:
            _, tables = gathered.pop(name, (None, []))
            if tables:
                self._write(name, Table.concat(tables), path)

        while (batch := self._queue.get()) is not None:
            if self._failure is not None:
                continue  # the rest is not written; the caller hears of the failure
            try:
                for (name, path), table in zip(files, (batch.events, batch.switches), strict=True):
                    if not table.rows:
                        continue
                    cpus = np.unique(table["cpu"])
                    cpu = int(cpus[0]) if len(cpus) == 1 else None  # None: several (text)
                    if cpu is None or gathered.get(name, (cpu, []))[0] != cpu:
                        flush(name, path)
                    gathered.setdefault(name, (cpu, []))[1].append(table)
                    if cpu is None or sum(t.rows for t in gathered[name][1]) >= ROW_GROUP_ROWS:
                        flush(name, path)
                if batch is _FLUSH:
                    for name, path in files:
                        flush(name, path)
            except BaseException as error:  # noqa: BLE001 - raised in the caller's thread
                self._failure = error

    def _written(self) -> None:
        """Wait until the writer thread has written what was queued, and end it."""
        if self._thread is not None:
            assert self._queue is not None
            self._queue.put(_FLUSH)
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _write(self, name: str, table: Table, path: Path) -> None:
        import pyarrow.parquet as pq

        arrow = table.to_arrow()
        if name not in self._writers:
            strings = [f.name for f in arrow.schema if str(f.type).startswith("dictionary")]
            self._writers[name] = pq.ParquetWriter(_unfinished(path), arrow.schema,
                                                   compression="zstd", use_dictionary=strings)
        self._writers[name].write_table(arrow)

    def discard(self) -> None:
        """Close and remove the files (a spool cut short)."""
        self._written()
        for writer in self._writers.values():
            try:
                writer.close()
            except OSError:  # the file goes anyway
                pass
        self._writers.clear()
        for path in (self.source.events_path, self.source.switches_path):
            _unfinished(path).unlink(missing_ok=True)

    def finish(self) -> ParquetEvents:
        """Close the files (empty tables are written too); the source to read."""
        self._written()
        self._raise_failure()
        empty = TraceEvents.empty()
        for name, table, path in (("events", empty.events, self.source.events_path),
                                  ("sched_switch", empty.switches, self.source.switches_path)):
            if name not in self._writers:
                self._write(name, table, path)
            self._writers.pop(name).close()
            os.rename(_unfinished(path), path)
        return self.source


_FLUSH = TraceEvents.empty()  # queued: write what is gathered


def _unfinished(path: Path) -> Path:
    return path.with_name(path.name + ".partial")

