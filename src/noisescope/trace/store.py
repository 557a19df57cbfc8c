"""Where decoded trace events live between recording and the bundle.

A busy machine records tens of thousands of events a second per CPU: too
many to hold for a long scan. `EventSpool` writes them batch by batch to two
Parquet files (one row group per batch of one CPU, so reading a CPU and a
time range skips the rest), and the bundle moves the files in. Readers get
events by CPU and time range from either kind of source:

- `TraceEvents` (in memory; `events.py`), and
- `ParquetEvents` (the spool, or a written bundle's `events` and
  `sched_switch` tables).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..tables import StoredTable, Table
from .events import EVENT_COLUMNS, SWITCH_COLUMNS, TraceEvents


class EventSource(Protocol):
    def read(self, cpu: int, start_ns: int, end_ns: int) -> TraceEvents:
        """Events of one CPU with start_ns <= time <= end_ns, in time order."""

    def event_names(self) -> set[str]:
        """Every event name present ('sched_switch' included when there are switches)."""


@dataclass
class ParquetEvents:
    """Events in Parquet files (tables `events` and `sched_switch`), read by
    row group: those whose statistics overlap the CPU and time range asked
    for (the spool writes one row group per batch of one CPU)."""

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


@dataclass
class EventSpool:
    """Appends TraceEvents batches to Parquet files in `directory`."""

    directory: Path
    events: int = 0
    switches: int = 0
    _writers: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.source = ParquetEvents(self.directory / "events.parquet",
                                    self.directory / "sched_switch.parquet")

    def append(self, batch: TraceEvents) -> None:
        for name, table, path in (("events", batch.events, self.source.events_path),
                                  ("sched_switch", batch.switches, self.source.switches_path)):
            if table.rows:
                self._write(name, table, path)
        self.events += batch.events.rows
        self.switches += batch.switches.rows

    def _write(self, name: str, table: Table, path: Path) -> None:
        import pyarrow.parquet as pq

        arrow = table.to_arrow()
        if name not in self._writers:
            strings = [f.name for f in arrow.schema if str(f.type).startswith("dictionary")]
            self._writers[name] = pq.ParquetWriter(path, arrow.schema, compression="zstd",
                                                   use_dictionary=strings)
        self._writers[name].write_table(arrow)

    def finish(self) -> ParquetEvents:
        """Close the files (empty tables are written too); the source to read."""
        empty = TraceEvents.empty()
        for name, table, path in (("events", empty.events, self.source.events_path),
                                  ("sched_switch", empty.switches, self.source.switches_path)):
            if name not in self._writers:
                self._write(name, table, path)
            self._writers.pop(name).close()
        return self.source

    def stored_tables(self) -> dict[str, StoredTable]:
        """The files as bundle tables (finish() first)."""
        return {"events": StoredTable(self.source.events_path, self.events, list(EVENT_COLUMNS)),
                "sched_switch": StoredTable(self.source.switches_path, self.switches,
                                            list(SWITCH_COLUMNS))}

