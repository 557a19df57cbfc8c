"""Column tables: named numpy arrays of equal length.

Raw data travels as Tables from the probes to the bundle (Parquet) and back
to analysis and notebooks; `to_pandas()` and `to_arrow()` for other tools.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import _native
from .memory import release_free_memory

# A CPU's rows gathered into one Parquet row group, at least (the writer's metadata per
# row group stays small beside the rows)
ROW_GROUP_ROWS = 1 << 16
# A spooled table's rows in one Parquet file, about: a larger table (a 256-CPU minute's
# 64 million detour causes) is written in parts, side by side
PART_ROWS = 1 << 22


class Table(Mapping[str, np.ndarray]):
    def __init__(self, columns: Mapping[str, Iterable] | None = None):
        self._columns: dict[str, np.ndarray] = {}
        for name, values in (columns or {}).items():
            self._columns[name] = np.asarray(values)
        lengths = {len(v) for v in self._columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns differ in length: {sorted(lengths)}")

    @property
    def rows(self) -> int:
        return len(next(iter(self._columns.values()))) if self._columns else 0

    @property
    def columns(self) -> list[str]:
        return list(self._columns)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._columns[name]

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["_columns"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)

    def __repr__(self) -> str:
        return f"Table({self.rows} rows: {', '.join(self._columns)})"

    def filter(self, mask: np.ndarray) -> Table:
        return Table({name: values[mask] for name, values in self._columns.items()})

    def where(self, **equals: object) -> Table:
        """Rows whose columns equal the given values, e.g. table.where(cpu=1)."""
        mask = np.ones(self.rows, dtype=bool)
        for name, value in equals.items():
            mask &= self._columns[name] == value
        return self.filter(mask)

    @classmethod
    def concat(cls, tables: Iterable[Table]) -> Table:
        tables = [t for t in tables if t.columns]
        if not tables:
            return cls()
        names = tables[0].columns
        return cls({name: np.concatenate([t[name] for t in tables]) for name in names})

    @classmethod
    def from_rows(cls, rows: list[dict]) -> Table:
        """A column per key of `rows` (dicts of scalars: summary rows). A numeric column
        with a value missing (None, or a key a row lacks) holds NaN there; other columns
        hold the values themselves (objects: text, flags, lists, dicts; the dicts of one
        column come back with every key any of them has). `to_rows` gives the rows back."""
        columns = {}
        for name in dict.fromkeys(k for row in rows for k in row):
            values = [row.get(name) for row in rows]
            # By the values' types (a few), not value by value: 120,000 rows of a fleet.
            types = set(map(type, values))
            found = types - {type(None)}
            if found and all(issubclass(t, (int, float, np.integer, np.floating))
                             and not issubclass(t, (bool, np.bool_)) for t in found):
                if found == types and all(issubclass(t, (int, np.integer)) for t in found):
                    columns[name] = np.array(values, np.int64)
                elif found == types:
                    columns[name] = np.array(values, np.float64)
                else:
                    columns[name] = np.array([np.nan if v is None else v for v in values],
                                             np.float64)
            else:
                columns[name] = objects(values)
        return cls(columns)

    def to_rows(self) -> list[dict]:
        """One dict of Python scalars per row; NaN as None (as JSON keeps a missing value)."""
        lists = []
        for values in self._columns.values():
            plain = values.tolist()
            if values.dtype.kind == "f":
                plain = [None if v != v else v for v in plain]
            lists.append(plain)
        names = list(self._columns)
        return [dict(zip(names, row, strict=True)) for row in zip(*lists, strict=True)]

    def to_arrow(self):
        import pyarrow as pa

        return pa.table({name: _arrow_column(values) for name, values in self._columns.items()})

    @classmethod
    def from_arrow(cls, table) -> Table:
        return cls({name: _numpy_column(table.column(name)) for name in table.column_names})

    @classmethod
    def from_parquet(cls, path: Path, columns: Iterable[str] | None = None) -> Table:
        """A Parquet file's table (or those columns), read a column at a time:
        beside the numpy columns only one column's Arrow copy is held, not the
        whole table's (a 256-CPU minute has 23 million detours)."""
        import pyarrow.parquet as pq

        files = [pq.ParquetFile(part) for part in parquet_parts(path)]
        schema = files[0].schema_arrow
        names = schema.names if columns is None else list(columns)
        missing = set(names) - set(schema.names)
        if missing:
            raise ValueError(f"{path} has no column {', '.join(sorted(missing))}")

        def column(name: str) -> np.ndarray:
            parts = [_numpy_column(file.read(columns=[name]).column(0)) for file in files]
            return parts[0] if len(parts) == 1 else np.concatenate(parts)

        return cls({name: column(name) for name in names})

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(self._columns)


def repeated(value: object, count: int) -> np.ndarray:
    """An object column holding `value` in every row: one shared object
    (np.full would make a separate copy of a string for every row)."""
    column = np.empty(count, dtype=object)
    column[:] = value
    return column


def objects(values: list) -> np.ndarray:
    """An object column of `values` as they are (lists stay lists, one per row)."""
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


def inside_windows(starts: np.ndarray, ends: np.ndarray, windows: Table) -> np.ndarray:
    """Mask of intervals [start, end] lying entirely inside one window."""
    if windows.rows == 0:
        return np.zeros(len(starts), bool)
    order = np.argsort(windows["start_ns"])
    w_start, w_end = windows["start_ns"][order], windows["end_ns"][order]
    i = np.searchsorted(w_start, starts, side="right") - 1
    ok = i >= 0
    i = np.clip(i, 0, None)
    return ok & (ends <= w_end[i])


@dataclass(frozen=True)
class StoredTable:
    """A table already written to a Parquet file (too big to hold in memory,
    e.g. a long kernel trace); a bundle moves the file in when it is written.
    With `write_file`, the file is written when it is first needed (a scan's
    trace is decoded into Parquet only once the bundle's other tables are out
    of memory)."""

    path: Path
    rows: int
    columns: list[str]
    # writes the file; may stop early (raising) once its argument returns True
    write_file: Callable[[Callable[[], bool]], None] | None = field(default=None, compare=False,
                                                                    repr=False)
    # whether a bundle may leave it out when an interrupt comes before it is written
    # (a trace may go; measured samples may not)
    optional: bool = field(default=True, compare=False)

    @property
    def is_ready(self) -> bool:
        """Whether the file is there (else ready() writes it first)."""
        return self.write_file is None or self.path.exists()

    def ready(self, give_up: Callable[[], bool] = lambda: False) -> Path:
        """The file, written first if it is not there yet (`give_up` may cut that short)."""
        if not self.is_ready:
            self.write_file(give_up)
        return self.path

    def load(self) -> Table:
        return Table.from_parquet(self.ready())


CpuBatches = Callable[[], Iterator[Table]]  # one CPU's rows, in order, a batch at a time


@dataclass(frozen=True)
class SpooledTable(StoredTable):
    """A table made of batches read from files (a probe's samples spool), by
    CPU and in order: never whole in memory unless `load()` is asked for. Its
    Parquet file (a CPU's batches joined into row groups of ROW_GROUP_ROWS
    rows or more: `_row_groups`) is written when a bundle first needs it; a
    table of more than PART_ROWS rows is written in parts (runs of CPUs of
    PART_ROWS rows or more: `shares`), which processes can write side by
    side (`bundle._make_side_by_side`). A bundle never leaves it out
    (`optional` False)."""

    # (cpu, its rows, its batches) for each CPU, in the table's order
    sources: tuple[tuple[int, int, CpuBatches], ...] = field(default=(), compare=False, repr=False)
    empty: Table | None = field(default=None, compare=False, repr=False)  # its columns, no rows

    @classmethod
    def of(cls, path: Path, empty: Table, sources: list[tuple[int, int, CpuBatches]]
           ) -> SpooledTable:
        """The table of `sources` (CPU, rows, batches); `empty`: its columns."""
        return cls(path, sum(rows for _, rows, _ in sources), empty.columns, None, False,
                   tuple(sources), empty)

    @property
    def is_ready(self) -> bool:
        return self.path.exists()

    def ready(self, give_up: Callable[[], bool] = lambda: False) -> Path:
        """The file (or directory of parts), written first if it is not there yet."""
        if not self.is_ready:
            for share in range(len(self.shares)):
                self.write_share(share)
            self.join_shares()
        return self.path

    @property
    def shares(self) -> list[range]:
        """The sources written to each file: runs of CPUs of PART_ROWS rows or
        more (the last may have fewer); one, of them all, for a smaller table."""
        shares, first, rows = [], 0, 0
        for index, (_, cpu_rows, _) in enumerate(self.sources):
            rows += cpu_rows
            if rows >= PART_ROWS:
                shares.append(range(first, index + 1))
                first, rows = index + 1, 0
        if first < len(self.sources) or not shares:
            shares.append(range(first, len(self.sources)))
        return shares

    def share_rows(self, share: int) -> int:
        return sum(self.sources[i][1] for i in self.shares[share])

    def _partial(self) -> Path:
        return self.path.with_name(f".{self.path.name}.partial")

    def write_share(self, share: int) -> None:
        """Write one share's file: the table's file under a temporary name, or
        a part in its temporary directory (`join_shares` names them)."""
        import pyarrow.parquet as pq

        if len(self.shares) == 1:
            path = self._partial()
        else:
            self._partial().mkdir(exist_ok=True)
            path = self._partial() / f"{share:06d}.parquet"
        writer = None
        try:
            for arrow in self._row_groups(self.shares[share]):
                if writer is None:  # the first batch's types (strings need rows to be typed)
                    strings = dictionary_columns(arrow.schema)
                    # statistics of the numbers (CPU, time: what readers skip row groups
                    # by); those of strings cost a fifth of the encoding and skip nothing
                    writer = pq.ParquetWriter(
                        path, arrow.schema, compression="zstd", use_dictionary=strings,
                        write_statistics=[n for n in arrow.schema.names if n not in strings])
                writer.write_table(arrow)
            if writer is None:
                pq.write_table(self.empty.to_arrow(), path)
        except BaseException:
            if writer is not None:
                writer.close()
            path.unlink(missing_ok=True)
            raise
        if writer is not None:
            writer.close()

    def join_shares(self) -> None:
        """The written shares under the table's name: whole, or not there."""
        self._partial().rename(self.path)

    @property
    def cpus(self) -> list[int]:
        """The CPUs with rows."""
        return [cpu for cpu, rows, _ in self.sources if rows]

    def batches(self, cpu: int | None = None) -> Iterator[Table]:
        """The rows of `cpu` (None: of every CPU, CPU after CPU), in order."""
        for source_cpu, _, batches in self.sources:
            if cpu is None or source_cpu == cpu:
                yield from _handing_back(batches())

    def load(self) -> Table:
        if self.path.exists():
            return super().load()
        return Table.concat([self.empty, *self.batches()])

    def _row_groups(self, sources: range) -> Iterator:
        """Those sources' batches as Arrow tables joined, CPU by CPU, into row groups of
        ROW_GROUP_ROWS rows or more (a CPU's last may have fewer). A Parquet
        writer holds some 7 KB of metadata per row group of ten columns until
        the file is closed: an hour's detours, explained 8,192 at a time, were
        3,600 row groups, 28 MB in each of two files, and more at the close.
        Parked parts come as Arrow straight from their codes
        (`ParkedParts.arrow_tables`: no str object a row, no hashing again)."""
        for index in sources:
            batches = self.sources[index][2]
            parts = (batches.arrow_tables() if isinstance(batches, ParkedParts)
                     else (batch.to_arrow() for batch in batches()))
            gathered: list = []
            for part in _handing_back(parts, lambda arrow: arrow.num_rows):
                if part.num_rows:
                    gathered.append(part)
                if sum(t.num_rows for t in gathered) >= ROW_GROUP_ROWS:
                    yield joined_arrow(gathered)
                    gathered = []
            if gathered:
                yield joined_arrow(gathered)


def joined_arrow(tables: list):
    """Arrow tables of the same columns as one, each column's chunks with one
    dictionary: a Parquet writer then takes the codes as they are, chunk after
    chunk, into one row group (joining the chunks too, a copy, cost as much
    again: docs/benchmarks.md)."""
    import pyarrow as pa

    return pa.concat_tables(tables).unify_dictionaries()


def _handing_back(batches: Iterator, rows_of: Callable[[Any], int] = lambda table: table.rows
                  ) -> Iterator:
    """`batches`, the freed heap handed back after every ROW_GROUP_ROWS rows
    or so. Thousands of batches, freed among longer-lived blocks (a Parquet
    writer's metadata, the reader's own), leave holes in glibc's heap that
    it fills and leaves again without giving their pages back
    (docs/benchmarks.md, "Objects per part and holes in the heap"); in a
    worker, which keeps freed memory for speed, this is about once a
    CPU-minute of detours."""
    rows = 0
    for batch in batches:
        yield batch
        rows += rows_of(batch)
        if rows >= ROW_GROUP_ROWS:
            release_free_memory()
            rows = 0


def parquet_by_cpu(path: Path, columns: Iterable[str]) -> SpooledTable:
    """A Parquet file's `columns` (and `cpu`) as a table read a CPU at a time,
    a row group at a time, in the file's order (a scan's: time order): never
    whole in memory. A CPU's row groups are found by their statistics of
    `cpu`; a row group of several CPUs (a table written whole) is read for
    each and filtered."""
    import pyarrow.parquet as pq

    names = list(dict.fromkeys(["cpu", *columns]))
    parts = parquet_parts(path)
    schema = pq.read_schema(parts[0])
    missing = set(names) - set(schema.names)
    if missing:
        raise ValueError(f"{path} has no column {', '.join(sorted(missing))}")
    cpu_column = schema.get_field_index("cpu")
    # cpu -> (part, row group, of it alone)
    groups: dict[int, list[tuple[int, int, bool]]] = {}
    rows: dict[int, int] = {}
    for number, part in enumerate(parts):
        file = pq.ParquetFile(part)
        for index in range(file.metadata.num_row_groups):
            group = file.metadata.row_group(index)
            stats = group.column(cpu_column).statistics
            if stats is not None and stats.has_min_max and stats.min == stats.max:
                found = {int(stats.min): group.num_rows}
            else:
                cpus = file.read_row_group(index, columns=["cpu"]).column(0).to_numpy()
                found = dict(zip(*(a.tolist() for a in np.unique(cpus, return_counts=True)),
                                 strict=True))
            for cpu, count in found.items():
                groups.setdefault(cpu, []).append((number, index, len(found) == 1))
                rows[cpu] = rows.get(cpu, 0) + count

    def batches_of(cpu: int) -> CpuBatches:
        def batches() -> Iterator[Table]:
            readers: dict[int, Any] = {}
            for number, index, alone in groups[cpu]:
                if number not in readers:
                    readers[number] = pq.ParquetFile(parts[number])
                batch = Table.from_arrow(readers[number].read_row_group(index, columns=names))
                yield batch if alone else batch.where(cpu=cpu)
        return batches

    empty = Table.from_arrow(schema.empty_table().select(names))
    return SpooledTable.of(path, empty, [(cpu, rows[cpu], batches_of(cpu)) for cpu in sorted(groups)])


def parquet_parts(path: Path) -> list[Path]:
    """The Parquet files that hold a table: its file, or the parts of a table
    written in parts (a directory of `*.parquet` files, in the order of their
    names: a scan's event tables, each CPU's events written by the process
    that decoded them). A part under another name (`.partial`) is not one yet."""
    return sorted(path.glob("*.parquet")) if path.is_dir() else [path]


def dictionary_columns(schema) -> list[str]:
    """The columns a Parquet file stores with dictionary pages: strings only
    (for numeric columns, timestamps and durations, they cost tens of MB
    while writing and save nothing)."""
    import pyarrow as pa

    return [f.name for f in schema if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)]


def table_cpus(table: Table | SpooledTable) -> list[int]:
    """The CPUs a table (with a `cpu` column) has rows of, in order."""
    if isinstance(table, SpooledTable):
        return sorted(table.cpus)
    return np.unique(table["cpu"]).tolist()


def cpu_batches(table: Table | SpooledTable, cpu: int, order: str) -> Iterator[Table]:
    """The rows of `cpu` ordered by the column `order`, a batch at a time: a
    spooled table's batches as they were measured (in that order), a table in
    memory as one batch, sorted."""
    if isinstance(table, SpooledTable):
        yield from table.batches(cpu)
        return
    mine = table.where(cpu=cpu)
    yield mine.filter(np.argsort(mine[order], kind="stable")) if mine.rows else mine


@dataclass(frozen=True)
class ParkedTable:
    """A table moved out of memory into one file (needs no pyarrow): a pickle
    of each column's values and, for an object column, its distinct objects
    (stored as their codes: load() shares the objects again between rows).
    One file, not one per column: creating a file costs more than writing a
    column; a pickle, not .npy arrays, whose headers cost more to read than a
    small column (each is parsed as Python source). A file cut short fails
    to load. (Many tables of the same columns: ParkedParts.)"""

    path: Path
    rows: int
    columns: list[str]

    @classmethod
    def park(cls, table: Table, path: Path) -> ParkedTable:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "xb") as out:
            pickle.dump(_parked_columns(table), out, protocol=pickle.HIGHEST_PROTOCOL)
        return cls(path, table.rows, table.columns)

    def load(self) -> Table:
        return _unparked(self._columns())

    def to_arrow(self):
        """As Table.to_arrow() gives it, straight from the stored codes."""
        import pyarrow as pa

        return pa.table({name: dictionary_array(values, distinct) if distinct is not None
                         else pa.array(values) for name, values, distinct in self._columns()})

    def _columns(self) -> list[tuple[str, np.ndarray, list | None]]:
        """Each column: its name, values (codes for objects), distinct objects or None."""
        with open(self.path, "rb") as stored:
            return _checked(pickle.load(stored), self.columns, self.rows, self.path)


ParkedColumns = list[tuple[str, np.ndarray, list | None]]  # name, values (codes for objects),
# distinct objects or None


def _parked_columns(table: Table) -> ParkedColumns:
    columns = []
    for name in table.columns:
        values, distinct = table[name], None
        if values.dtype == object:
            values, distinct = dictionary_codes(values)  # tuples stay values, not rows
        columns.append((name, values, distinct))
    return columns


def _unparked(columns: ParkedColumns) -> Table:
    return Table({name: objects(distinct)[values] if distinct is not None else values
                  for name, values, distinct in columns})


def _checked(columns: ParkedColumns, names: list[str], rows: int, path: Path) -> ParkedColumns:
    if [name for name, _, _ in columns] != names or any(len(values) != rows
                                                        for _, values, _ in columns):
        raise ValueError(f"{path} does not hold the parked table")
    return columns


class ParkedParts:
    """Tables of the same columns parked one after the other in one file, as
    ParkedTable parks one (a CPU's detours, explained a part at a time): one
    file and two arrays however many parts. A ParkedTable per part was an
    object, a path and a file each, and a 2-CPU hour's parts were 2,880 of
    each (docs/benchmarks.md, "Objects per part and holes in the heap").
    Picklable (a worker process parks a CPU's parts)."""

    def __init__(self, path: Path):
        self.path = path
        self.columns: list[str] | None = None
        self._ends = array("q")  # each part's end in the file
        self._rows = array("q")

    def append(self, table: Table) -> None:
        """Park one more part (of the first part's columns); a part that fails
        to be written (a full disk, a stop) is cut off again."""
        if self.columns is not None and table.columns != self.columns:
            raise ValueError(f"{self.path} parks {self.columns}, not {table.columns}")
        start = self._ends[-1] if self._ends else 0
        if not self._ends:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.path, "ab" if self._ends else "wb") as out:
                pickle.dump(_parked_columns(table), out, protocol=pickle.HIGHEST_PROTOCOL)
                end = out.tell()
        except BaseException:
            with contextlib.suppress(OSError):
                os.truncate(self.path, start)
            raise
        self.columns = table.columns
        self._ends.append(end)
        self._rows.append(table.rows)

    @property
    def rows(self) -> int:
        return sum(self._rows)

    def __len__(self) -> int:
        return len(self._ends)

    def tables(self) -> Iterator[Table]:
        """The parts in the order they were parked (a file cut short fails)."""
        return (_unparked(columns) for columns in self._parts())

    __call__ = tables  # a spooled table's source of a CPU's batches (SpooledTable.sources)

    def arrow_tables(self) -> Iterator:
        """The parts as Arrow tables, strings dictionary-encoded from their
        parked codes (what writing them to Parquet takes)."""
        import pyarrow as pa

        for columns in self._parts():
            yield pa.table({name: dictionary_array(values, distinct) if distinct is not None
                            else pa.array(values) for name, values, distinct in columns})

    def _parts(self) -> Iterator[ParkedColumns]:
        if not self._ends:
            return
        assert self.columns is not None
        with open(self.path, "rb") as stored:
            for end, rows in zip(self._ends, self._rows, strict=True):
                columns = _checked(pickle.load(stored), self.columns, rows, self.path)
                if stored.tell() != end:
                    raise ValueError(f"{self.path} does not hold the parked table")
                yield columns


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A fixed-width column (numbers, byte strings) as int64 codes, and where
    each distinct value first appears (codes number them in that order):
    `values[first][codes]` is `values`. A hash of the bytes in the native core:
    np.unique sorts, ~300 ns a value for 16-byte commands."""
    codes = np.empty(len(values), np.int64)
    first = _native.factorize(np.ascontiguousarray(values), codes)
    return codes, np.array(first, np.int64)


def dictionary_codes(values: np.ndarray) -> tuple[np.ndarray, list]:
    """An object column as int32 codes and its distinct values (in order of
    first appearance; equal as dict keys are)."""
    codes = np.empty(len(values), np.int64)
    distinct = _native.dictionary_codes(np.ascontiguousarray(values, dtype=object), codes)
    return codes.astype(np.int32), distinct


def _arrow_column(values: np.ndarray):
    """Arrow array of a column; strings (object columns) dictionary-encoded:
    they repeat a few values (event names, commands), and plain Arrow
    strings would cost a copy of every one of them."""
    import pyarrow as pa

    if values.dtype != object:
        return pa.array(values)
    try:
        codes, distinct = dictionary_codes(values)
    except TypeError:
        # unhashable: nested values of summary rows (a fleet rank's CPUs, a CPU's
        # injections found), as Arrow lists and structs
        return pa.array(list(values))
    return dictionary_array(codes, distinct)


def dictionary_array(codes: np.ndarray, distinct: list):
    """An Arrow dictionary array (strings when they all are) from codes and values;
    None as a null (Parquet takes no null inside the dictionary)."""
    import pyarrow as pa

    missing = None
    if None in distinct:
        gone = distinct.index(None)
        missing = codes == gone
        codes = np.where(codes > gone, codes - 1, codes)
        distinct = distinct[:gone] + distinct[gone + 1:]
    kind = pa.string() if all(isinstance(v, str) for v in distinct) else None
    return pa.DictionaryArray.from_arrays(pa.array(codes, mask=missing),
                                          pa.array(distinct, type=kind))


def _numpy_column(column) -> np.ndarray:
    """numpy array of an Arrow column; dictionary-encoded strings come back as
    one shared str object per distinct value (not one per row)."""
    import pyarrow as pa

    if pa.types.is_list(column.type) or pa.types.is_struct(column.type):
        return objects(column.to_pylist())
    if not pa.types.is_dictionary(column.type):
        return column.to_numpy()
    # a null index (a missing value) picks the None put after the distinct values
    parts = [objects([*chunk.dictionary.to_pylist(), None])[chunk.indices.fill_null(-1).to_numpy(
        zero_copy_only=False)] for chunk in column.chunks]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=object)
