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

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ..tables import StoredTable, Table
from .events import EVENT_COLUMNS, SWITCH_COLUMNS, TraceEvents


class EventSource(Protocol):
    def read(self, cpu: int, start_ns: int, end_ns: int) -> TraceEvents:
        """Events of one CPU with start_ns <= time <= end_ns, in time order."""

    def event_names(self) -> set[str]:
        """Every event name present ('sched_switch' included when there are switches)."""


@dataclass
class ParquetEvents:
    """Events in Parquet files (tables `events` and `sched_switch`)."""

    events_path: Path
    switches_path: Path

    def read(self, cpu: int, start_ns: int, end_ns: int) -> TraceEvents:
        where = [("cpu", "=", cpu), ("timestamp_ns", ">=", start_ns), ("timestamp_ns", "<=", end_ns)]
        return TraceEvents(_read(self.events_path, where), _read(self.switches_path, where)).sorted()

    def event_names(self) -> set[str]:
        import pyarrow.parquet as pq

        names = set(Table.from_arrow(pq.read_table(self.events_path, columns=["event"]))["event"].tolist()) \
            if self.events_path.exists() else set()
        if self.switches_path.exists() and pq.ParquetFile(self.switches_path).metadata.num_rows:
            names.add("sched_switch")
        return names

    def load(self) -> TraceEvents:
        return TraceEvents(_read(self.events_path, None), _read(self.switches_path, None))


def _read(path: Path, where) -> Table:
    import pyarrow.parquet as pq

    return Table.from_arrow(pq.read_table(path, filters=where))


@dataclass
class EventSpool:
    """Appends TraceEvents batches to Parquet files in `directory` (created,
    and removed by discard())."""

    directory: Path
    events: int = 0
    switches: int = 0
    names: set[str] = field(default_factory=set)
    _writers: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.directory.mkdir()
        self.source = ParquetEvents(self.directory / "events.parquet",
                                    self.directory / "sched_switch.parquet")

    def append(self, batch: TraceEvents) -> None:
        for name, table, path in (("events", batch.events, self.source.events_path),
                                  ("sched_switch", batch.switches, self.source.switches_path)):
            if table.rows:
                self._write(name, table, path)
        self.events += batch.events.rows
        self.switches += batch.switches.rows
        self.names.update(np.unique(batch.events["event"]).tolist() if batch.events.rows else [])
        if batch.switches.rows:
            self.names.add("sched_switch")

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

    def event_names(self) -> set[str]:
        return set(self.names)

    def stored_tables(self) -> dict[str, StoredTable]:
        """The files as bundle tables (finish() first)."""
        return {"events": StoredTable(self.source.events_path, self.events, list(EVENT_COLUMNS)),
                "sched_switch": StoredTable(self.source.switches_path, self.switches,
                                            list(SWITCH_COLUMNS))}

    def discard(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        shutil.rmtree(self.directory, ignore_errors=True)
