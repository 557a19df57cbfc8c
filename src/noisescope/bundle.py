"""Result bundles: one directory per run, `manifest.json` plus Parquet tables.

Written atomically (a hidden partial directory renamed into place), so a
bundle is either complete on disk or absent. A stopping signal never
interrupts a write (`interrupts.keeping`); a second one leaves out tables not
written yet that the bundle would have to make first (a scan's kernel
events). A write that fails (a full disk) keeps the measurement in a
temporary directory and says where. A write killed with SIGKILL leaves its
partial directory, manifest first, which `salvage_partial` (noisescope
cleanup) makes a bundle marked incomplete. Read lazily: `load()` parses the
manifest; tables are read on first use.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, MutableMapping
from datetime import datetime, timezone
from pathlib import Path

from . import interrupts, leftovers
from .clock import MeasurementClock
from .diagnostics import Code, Diagnostic
from .errors import UsageError, unwritable
from .host import HostFacts
from .manifest import SCHEMA_VERSION, Manifest
from .memory import release_free_memory
from .tables import (
    ParkedTable,
    SpooledTable,
    StoredTable,
    Table,
    dictionary_columns,
    parquet_by_cpu,
    parquet_parts,
)
from .validation import DAMAGED, check_manifest, check_table, table_path
from .workers import run_parts, worker_count

MANIFEST = "manifest.json"
SUMMARY_TABLE = "summary_"  # summary_KIND: the rows of summaries[KIND] as a table
FINDINGS_TABLE = "system_findings"  # the manifest's `system`, as a table
PARKED = ".parked"  # tables out of memory while a bundle is written (write(release_tables=True))


def default_output(facts: HostFacts) -> str:
    """Where a measurement goes when no -o is given: named for the host and the time."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"noisescope-{facts.hostname or 'host'}-{stamp}"


class Bundle:
    """A measurement in memory: the manifest (a typed dict, see manifest.py) and
    named Tables."""

    def __init__(self, manifest: Manifest, tables: dict[str, Table | StoredTable] | None = None,
                 path: Path | None = None):
        self.manifest = manifest
        self.path = path
        self._tables: dict[str, Table | StoredTable | ParkedTable] = dict(tables or {})
        # table_by_cpu(name, columns) of stored files: their row groups, found once
        self._by_cpu: dict[tuple[str, tuple[str, ...]], SpooledTable] = {}
        # other files written with it: relative path -> text (tune's persistent/ snippets)
        self.files: dict[str, str] = {}
        # rows read from tables on first use
        self._summaries: _SummaryRows | None = None
        self._findings: list[dict] | None = None

    # -- manifest views -------------------------------------------------
    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def label(self) -> str | None:
        return self.manifest.get("label")

    @property
    def complete(self) -> bool:
        return bool(self.manifest.get("complete"))

    @property
    def host(self) -> HostFacts | None:
        host = self.manifest.get("host")
        return HostFacts.from_dict(host) if host else None

    @property
    def clock(self) -> MeasurementClock | None:
        clock = self.manifest.get("clock")
        return MeasurementClock.from_dict(clock) if clock else None

    @property
    def parameters(self) -> dict:
        return self.manifest["parameters"]

    @property
    def summaries(self) -> MutableMapping[str, list[dict]]:
        """The manifest's summaries, and those kept in tables (`summary_KIND`: a fleet's
        rows per rank and per CPU, too many for JSON), each read as rows when first
        asked for. Without such tables this is the manifest's own dict."""
        kept = [n for n in self.table_names if n.startswith(SUMMARY_TABLE)]
        if not kept:
            return self.manifest["summaries"]
        if self._summaries is None:
            self._summaries = _SummaryRows(self, [n[len(SUMMARY_TABLE):] for n in kept])
        return self._summaries

    def summary_table(self, kind: str) -> Table:
        """summaries[kind] as a Table: the bundle's table of it, or made of its rows."""
        if self.has_table(SUMMARY_TABLE + kind):
            return self.table(SUMMARY_TABLE + kind)
        return Table.from_rows(self.manifest["summaries"].get(kind, []))

    @property
    def system(self) -> list[dict]:
        """The findings of `noisescope system show` when measured (a fleet's: every rank's,
        kept in the table `system_findings`)."""
        if not self.has_table(FINDINGS_TABLE):
            return self.manifest.get("system", [])
        if self._findings is None:
            self._findings = self.table(FINDINGS_TABLE).to_rows()
        return self._findings

    @property
    def warnings(self) -> list[Diagnostic]:
        return [Diagnostic.from_dict(w) for w in self.manifest["warnings"]]

    @property
    def name(self) -> str:
        return self.label or (self.path.name if self.path else self.kind)

    # -- tables -----------------------------------------------------------
    @property
    def table_names(self) -> list[str]:
        return sorted(set(self._tables) | set(self.manifest.get("tables", {})))

    def table(self, name: str) -> Table:
        """The whole table, in memory (kept)."""
        if name not in self._tables:
            self._tables[name] = _read_table(self._stored_path(name))
        table = self._tables[name]
        if isinstance(table, (StoredTable, ParkedTable)):
            self._tables[name] = table = table.load()
        return table

    def _stored_path(self, name: str) -> Path:
        entry = self.manifest.get("tables", {}).get(name)
        if entry is None or self.path is None:
            raise KeyError(f"bundle has no table {name!r} (it has: "
                           f"{', '.join(self.table_names) or 'none'})")
        return table_path(self.path, name, entry)

    def batched_table(self, name: str) -> Table | SpooledTable:
        """The table, or (a scan's samples before the bundle is written) the spool it
        is made of, to be read by CPU a batch at a time (`tables.cpu_batches`)."""
        table = self._tables.get(name)
        return table if isinstance(table, SpooledTable) else self.table(name)

    def table_by_cpu(self, name: str, columns: tuple[str, ...]) -> Table | SpooledTable:
        """The table's `columns` to be read a CPU at a time (`tables.cpu_batches`,
        in the order they were written): a stored file's row groups of one CPU
        at a time (`tables.parquet_by_cpu`), never the whole table; a table
        in memory as it is. What a report draws from an hour's detours."""
        table = self._tables.get(name)
        if isinstance(table, SpooledTable):
            return table
        if table is not None and not isinstance(table, StoredTable):
            return self.table(name)
        path = table.ready() if table is not None else self._stored_path(name)
        key = (name, columns)
        if key not in self._by_cpu:
            import pyarrow as pa

            try:
                self._by_cpu[key] = parquet_by_cpu(path, columns)
            except (OSError, ValueError, pa.ArrowException) as error:
                raise UsageError(f"table {path} is unreadable ({error})", DAMAGED) from None
        return self._by_cpu[key]

    def has_table(self, name: str) -> bool:
        return name in self.table_names

    def add_table(self, name: str, table: Table | StoredTable) -> None:
        """Add (or replace) a table before the bundle is written."""
        self._tables[name] = table

    def __getattr__(self, name: str) -> Table:
        # bundle.detours, bundle.ftq, ... for notebooks
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.table(name)
        except KeyError as error:
            raise AttributeError(str(error)) from None

    def __repr__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"<Bundle {self.kind}{where}: {', '.join(self.table_names)}>"

    # -- writing ----------------------------------------------------------
    def write(self, path: str | os.PathLike[str], *, release_tables: bool = False) -> Path:
        """Write atomically to `path` (which must not exist, or be an empty directory).

        With `release_tables`, for a caller that keeps no other reference to
        the tables in memory (a scan): they are moved out of memory into numpy
        files first and written one at a time, so that pyarrow (about 40 MB)
        and all of them are never in memory together; once written they are
        read from the bundle on use.

        If the write fails (no space, no permission), the bundle is written
        to a new temporary directory instead and UsageError says where."""
        destination = Path(path)
        check_destination(destination)
        with interrupts.keeping(destination) as frame:
            try:
                self._write_atomically(destination, release_tables=release_tables, frame=frame)
            except OSError as error:
                frame.optional, frame.give_up = [], None  # the rescue makes no tables
                raise UsageError(*self._rescue(destination, error)) from None
        self.path = destination
        self._tables = {n: t for n, t in self._tables.items() if isinstance(t, Table)}
        return destination

    def _write_atomically(self, destination: Path, *, release_tables: bool,
                          frame: interrupts.Frame | None = None) -> list[str]:
        """Into `.NAME.partial-PID/` beside it, renamed into place. The manifest is
        written first (then again at the end): a write killed on the way can
        be salvaged. Any failure removes the partial directory and keeps every
        table in memory. The tables the bundle has to make first
        (StoredTable.write_file) are made if `frame` is given, and left out if a
        further interrupt gives them up (`frame.give_up`); without a frame (a
        write after a failed one), those not made yet are left out. Returns
        the tables left out."""
        to_make = [n for n, t in sorted(self._tables.items())
                   if isinstance(t, StoredTable) and t.optional and not t.is_ready]
        given_up: set[str] = set()
        if frame is not None:
            frame.optional = lambda: [_tables_phrase(to_make)] if to_make else []
            frame.give_up = lambda: given_up.update(to_make)
        else:
            given_up.update(to_make)
        partial = leftovers.make_workdir(destination.parent / f".{destination.name}.partial-{os.getpid()}")
        try:
            self.manifest["tables"] = {name: _entry(name, table) for name, table in
                                       sorted(self._tables.items())}
            self._write_manifest(partial)
            if release_tables:
                self._park(partial / PARKED)
            # the samples whole on disk first (a salvage takes them)
            _make_side_by_side([t for t in self._tables.values() if isinstance(t, SpooledTable)])
            left_out = self._write_tables(partial, to_make, given_up)
            for name, text in self.files.items():
                (partial / name).parent.mkdir(parents=True, exist_ok=True)
                (partial / name).write_text(text)
            if left_out and frame is not None:
                self._leave_out(left_out, Code.INTERRUPTED, "an interrupt came before they were "
                                                            "written")
            elif left_out:
                self._leave_out(left_out, Code.WRITE_FAILED, "the first write failed before they "
                                                             "were made")
            self._write_manifest(partial)
            os.rename(partial, destination)  # replaces an empty directory too
            # kept until now: any failure above unparks the tables from there
            shutil.rmtree(destination / PARKED, ignore_errors=True)
            (destination / leftovers.MARKER).unlink(missing_ok=True)
        except BaseException:
            try:
                self._unpark()
            finally:
                shutil.rmtree(partial, ignore_errors=True)
            raise
        return left_out

    def _write_tables(self, directory: Path, to_make: list[str], given_up: set[str]) -> list[str]:
        """Every table into `directory`; of the tables `to_make` (removed from
        the list once written), those `given_up` are left out: returns them."""
        left_out = []
        for name, table in sorted(self._tables.items()):
            file = directory / self.manifest["tables"][name]["file"]
            if name in to_make:
                try:
                    if name not in given_up:
                        _link_or_copy(table.ready(lambda n=name: n in given_up), file)
                except interrupts.GaveUp:
                    pass
                to_make.remove(name)  # from here on no interrupt announces it left out
                if name in given_up:  # announced (before it was made, or meanwhile)
                    _remove_table_file(file)
                    left_out.append(name)
            elif isinstance(table, StoredTable):  # made now if it is not yet (never left out)
                _link_or_copy(table.ready(), file)  # the caller removes its file
            else:
                _write_table(table, file)
                if isinstance(table, ParkedTable):
                    release_free_memory()  # what writing it took, before the next one
        return left_out

    def _leave_out(self, names: list[str], code: Code, why: str) -> None:
        for name in names:
            del self._tables[name], self.manifest["tables"][name]
        self.manifest["complete"] = False
        self.manifest["warnings"].append(Diagnostic(
            code, f"{_tables_phrase(names)} left out: {why}").to_dict())

    def _write_manifest(self, directory: Path) -> None:
        """manifest.json, atomically within `directory`."""
        temporary = directory / f".{MANIFEST}.tmp"
        with open(temporary, "w") as out:
            json.dump(self.manifest, out, indent=2, sort_keys=False, default=_json_default)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.rename(temporary, directory / MANIFEST)

    def _rescue(self, destination: Path, error: OSError) -> tuple[str, str]:
        """After a failed write: the bundle into a new temporary directory
        (TMPDIR, /var/tmp, /dev/shm: the first that takes it), leaving out
        tables not made yet. Returns the problem and where the measurement went."""
        problem = f"cannot write the bundle {destination}: {error.strerror or error}"
        failures = []
        for base in _rescue_directories(destination):
            try:
                target = Path(tempfile.mkdtemp(prefix=f"noisescope-{destination.name}-", dir=base))
            except OSError as again:
                failures.append(f"{base}: {again.strerror}")
                continue
            try:
                left_out = self._write_atomically(target, release_tables=False)
            except OSError as again:
                failures.append(f"{base}: {again.strerror}")
                shutil.rmtree(target, ignore_errors=True)
                continue
            self.path = target
            without = f" (without {_tables_phrase(left_out)})" if left_out else ""
            return problem, f"the measurement is kept at {target}{without}; move it where it belongs"
        return problem, f"keeping it elsewhere failed too ({'; '.join(failures)}): the measurement is lost"

    def _park(self, directory: Path) -> None:
        for name in [n for n, t in self._tables.items() if isinstance(t, Table)]:
            self._tables[name] = ParkedTable.park(self._tables[name], directory / name)
        release_free_memory()

    def _unpark(self) -> None:
        for name, table in list(self._tables.items()):
            if isinstance(table, ParkedTable):
                self._tables[name] = table.load()

    def write_into(self, directory: str | os.PathLike[str]) -> Path:
        """Write into an existing directory that holds other things (a fleet bundle
        beside its nodes' bundles): the tables first, then the manifest by an atomic
        rename, so the bundle is complete on disk or absent."""
        destination = Path(directory)
        if (destination / MANIFEST).exists():
            raise UsageError(f"{destination} already holds a bundle",
                             "choose another -o or remove it")
        with interrupts.keeping(destination):
            partial = leftovers.make_workdir(destination / f".partial-{os.getpid()}")
            try:
                self.manifest["tables"] = {name: _entry(name, table) for name, table in
                                           sorted(self._tables.items())}
                self._write_tables(partial, [], set())
                self._write_manifest(partial)
                for entry in self.manifest["tables"].values():
                    os.rename(partial / entry["file"], destination / entry["file"])
                os.rename(partial / MANIFEST, destination / MANIFEST)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
        self.path = destination
        return destination


class _SummaryRows(MutableMapping):
    """A bundle's summaries: the manifest's, then those of its summary tables (rows
    made of a table when its kind is first asked for). What is set goes into the
    manifest."""

    def __init__(self, bundle: Bundle, kept: list[str]):
        self._bundle = bundle
        self._own = bundle.manifest["summaries"]
        self._kept = [k for k in kept if k not in self._own]
        self._read: dict[str, list[dict]] = {}

    def __getitem__(self, kind: str) -> list[dict]:
        if kind in self._own:
            return self._own[kind]
        if kind not in self._kept:
            raise KeyError(kind)
        if kind not in self._read:
            self._read[kind] = self._bundle.table(SUMMARY_TABLE + kind).to_rows()
        return self._read[kind]

    def __setitem__(self, kind: str, rows: list[dict]) -> None:
        self._own[kind] = rows

    def __delitem__(self, kind: str) -> None:
        del self._own[kind]

    def __iter__(self) -> Iterator[str]:
        return iter([*self._own, *(k for k in self._kept if k not in self._own)])

    def __len__(self) -> int:
        return len(self._own) + sum(k not in self._own for k in self._kept)


def _entry(name: str, table: Table | StoredTable | ParkedTable) -> dict:
    return {"file": f"{name}.parquet", "rows": table.rows, "columns": table.columns}


def _tables_phrase(names: list[str]) -> str:
    return f"the table{'s' if len(names) > 1 else ''} {', '.join(names)}"


def _rescue_directories(destination: Path) -> list[Path]:
    """Where a bundle that cannot be written to `destination` goes instead."""
    candidates = []
    for base in (tempfile.gettempdir(), "/var/tmp", "/dev/shm"):
        path = Path(base)
        if path.is_dir() and path.resolve() != destination.parent.resolve() and path not in candidates:
            candidates.append(path)
    return candidates


def _make_side_by_side(tables: list[SpooledTable]) -> None:
    """Write the files of those `tables` not written yet, in worker processes
    where there are CPUs for them: each table's shares (`SpooledTable.shares`:
    a 256-CPU minute's detours and their causes are 23 and 64 million rows,
    seconds of Parquet encoding each), the largest first, each by one process."""
    unmade = [table for table in tables if not table.is_ready]
    shares = sorted(((table, share) for table in unmade for share in range(len(table.shares))),
                    key=lambda pair: -pair[0].share_rows(pair[1]))
    run_parts(_write_share, shares, worker_count(len(shares)))
    for table in unmade:
        table.join_shares()


def _write_share(pair: tuple[SpooledTable, int]) -> None:
    pair[0].write_share(pair[1])


def _link_or_copy(source: Path, target: Path) -> None:
    """A second name for a table's file where the filesystem allows (no second
    copy on disk), else a copy; a table in parts (`tables.parquet_parts`): a
    directory of second names for its parts."""
    if source.is_dir():  # linked under another name, then renamed: whole or absent
        linking = target.with_name(f".{target.name}.linking")
        shutil.rmtree(linking, ignore_errors=True)
        linking.mkdir()
        for part in parquet_parts(source):
            _link_or_copy(part, linking / part.name)
        os.rename(linking, target)
        return
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _remove_table_file(path: Path) -> None:
    """A table's file, or its directory of parts, gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _json_default(value):
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"cannot store {type(value).__name__} in a manifest")


def _write_table(table: Table | ParkedTable, path: Path) -> None:
    import pyarrow.parquet as pq

    arrow = table.to_arrow()
    pq.write_table(arrow, path, compression="zstd", use_dictionary=dictionary_columns(arrow.schema))


def _read_table(path: Path, columns: tuple[str, ...] | None = None) -> Table:
    import pyarrow as pa

    try:
        return Table.from_parquet(path, columns)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise UsageError(f"table {path} is unreadable ({error})", DAMAGED) from None


def check_destination(path: Path) -> None:
    """Fail early (before measuring) when `path` cannot receive a bundle. Leftovers
    of killed runs beside it are dealt with (leftovers.sweep) and reported on stderr."""
    try:
        _check_destination(path)
    except OSError as error:  # a folder on the way this user may not enter
        raise unwritable(path.parent, error) from None
    leftovers.sweep(path.parent, salvage=False, reserved=path, say=_say)


def _check_destination(path: Path) -> None:
    if path.is_symlink():
        target = os.readlink(path)
        dangling = "" if path.exists() else "dangling "
        raise UsageError(f"output {path} is a {dangling}symbolic link (to {target})",
                         "give a new directory name with -o (a link cannot be replaced by the bundle)")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"output {path} already exists and is not an empty directory",
                         "choose another -o or remove it")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"cannot write to {path}: directory {parent} does not exist",
                         "create it first or choose another -o")
    probe = parent / f".noisescope-write-test-{os.getpid()}"
    probe.mkdir()
    probe.rmdir()


def _say(line: str) -> None:
    print(f"noisescope: {line}", file=sys.stderr, flush=True)


def salvage_partial(partial: Path, reserved: Path | None = None) -> tuple[Path, list[str]]:
    """Make the partial directory of a write that was killed a bundle marked
    incomplete: the tables it holds whole (a Parquet file, or parked numpy
    files written out now) stay, the others are left out (and named in a
    warning). Renamed to the name it was written for, or NAME-salvaged-PID if
    that is taken (or `reserved`). Returns the bundle and the tables left out."""
    manifest = json.loads((partial / MANIFEST).read_text())
    missing = []
    for name, entry in list(manifest["tables"].items()):
        file = partial / entry["file"]
        if not _whole_parquet(file, entry["rows"]):
            _remove_table_file(file)
            spooled = _spooled_file(partial, entry)
            try:
                if spooled is not None:
                    _link_or_copy(spooled, file)
                else:
                    _write_table(ParkedTable(partial / PARKED / name, entry["rows"],
                                             entry["columns"]), file)
            except Exception:  # noqa: BLE001 - parked files cut short in any way: the table is lost
                _remove_table_file(file)
                missing.append(name)
                del manifest["tables"][name]
    pid = partial.name.rsplit("-", 1)[1]
    manifest["complete"] = False
    manifest["warnings"].append(Diagnostic(Code.INTERRUPTED, (
        f"the run (process {pid}) was killed while it wrote this bundle; salvaged by noisescope "
        f"cleanup" + (f"; tables it had not written: {', '.join(missing)}" if missing else "")
    )).to_dict())
    Bundle(manifest)._write_manifest(partial)
    shutil.rmtree(partial / PARKED, ignore_errors=True)
    (partial / leftovers.MARKER).unlink()
    name = partial.name[1:].rsplit(".partial-", 1)[0]
    target = partial.parent / name
    if os.path.lexists(target) or (reserved is not None and target == reserved):
        target = partial.parent / f"{name}-salvaged-{pid}"
    os.rename(partial, target)
    return target, missing


def _spooled_file(partial: Path, entry: dict) -> Path | None:
    """A table of samples as the killed scan made it from its spool, whole (the
    scan's samples work directory holds the Parquet file of each, made just
    before the bundle takes it), or None."""
    import pyarrow.parquet as pq

    name, pid = partial.name[1:].rsplit(".partial-", 1)
    spool = leftovers.samples_workdir(partial.parent / name, int(pid))
    for candidate in sorted(spool.glob(f"*/*/{entry['file']}")):
        if (_whole_parquet(candidate, entry["rows"])
                and pq.read_schema(parquet_parts(candidate)[0]).names == entry["columns"]):
            return candidate
    return None


def _whole_parquet(path: Path, rows: int) -> bool:
    """Whether `path` is a complete Parquet file (or directory of parts) of `rows` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = parquet_parts(path)
    try:
        return bool(parts) and sum(pq.read_metadata(part).num_rows for part in parts) == rows
    except (OSError, pa.ArrowException):
        return False


def load(path: str | os.PathLike[str]) -> Bundle:
    """Open a bundle written by noisescope: its manifest and every table's file are
    checked now (validation.py), the tables are read on first use."""
    root = Path(path)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        problem = "does not exist" if not root.exists() else "is not a noisescope bundle"
        raise UsageError(f"{root} {problem} (no {MANIFEST})",
                         "give a directory written by noisescope (scan -o, bench -o, ...)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise UsageError(f"{manifest_path} is corrupt ({error})", DAMAGED) from None
    if not isinstance(manifest, dict):
        raise UsageError(f"{manifest_path} is corrupt (not a JSON object)", DAMAGED)
    version = manifest.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise UsageError(
            f"{root} was written by a newer noisescope (schema {version}, "
            f"this one reads up to {SCHEMA_VERSION})", "upgrade noisescope to read it")
    if isinstance(version, int) and not isinstance(version, bool) and 1 <= version < SCHEMA_VERSION:
        try:  # an older schema is brought up to this one first, then checked like any other
            upgrade(manifest)
        except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as error:
            raise UsageError(f"{manifest_path} is corrupt (schema {version} field {error})",
                             DAMAGED) from None
    check_manifest(manifest, manifest_path)
    for name, entry in manifest["tables"].items():
        check_table(table_path(root, name, entry), name, entry)
    return Bundle(manifest, path=root)


def _schema_2(manifest: dict) -> None:
    """Schema 1 -> 2: detour summaries called ticks of the measurement clock cycles,
    and the Hourglass cut-off was 1000 ticks (385 ns on a 2.6 GHz TSC, 1000 ns on
    the portable clock); now it is a duration, hourglass_ns. Tracing's cost was one
    untraced run beside the traced one, which no interval can be given for: dropped."""
    (manifest.get("trace") or {}).pop("cost", None)
    for rows in manifest["summaries"].values():
        for row in rows:
            if not isinstance(row, dict) or "gaps_over_1000_cycles" not in row:
                continue
            ticks = row.pop("resolution_cycles")
            del row["mean_loop_cycles"], row["max_gap_cycles"]  # max_ns is the longest gap
            row["resolution_ticks"] = ticks
            row["mean_gap_ns"] = row["measured_ns"] / row["iterations"] \
                if row.get("iterations") else None
            row["hourglass_ns"] = round(1000 * row["resolution_ns"] / ticks)
            row["hourglass_gaps"] = row.pop("gaps_over_1000_cycles")
    cut = manifest["parameters"].pop("hourglass_cycles", None)
    ticks_per_second = (manifest.get("clock") or {}).get("ticks_per_second")
    if cut is not None and ticks_per_second:
        manifest["parameters"]["hourglass_ns"] = round(cut * 1e9 / ticks_per_second)


def _schema_3(manifest: dict) -> None:
    """Schema 2 -> 3: a fleet keeps its rows per rank and per CPU and its ranks'
    findings in tables (summary_ranks, summary_PROBE, system_findings) and its
    manifest the counts and the distribution over the ranks; a fleet of schema 2
    keeps the rows in its manifest, where `Bundle.summaries` and `Bundle.system`
    read them as they are. A host fact that differs between nodes gives how many
    nodes hold each value (`values`) and names the first of them (`nodes`; schema 2
    named them all in `values`)."""
    for difference in manifest["summaries"].get("differences", []):
        if difference.get("kind") == "host":
            difference["nodes"] = difference["values"]
            difference["values"] = {value: len(names) for value, names in
                                    difference["nodes"].items()}


def _schema_4(manifest: dict) -> None:
    """Schema 3 -> 4: nothing to change; a table's file may now also be a
    directory of Parquet parts (which a reader of schema 3 would not read)."""


UPGRADES = {1: _schema_2, 2: _schema_3, 3: _schema_4}  # schema N -> N + 1, applied in memory on load


def upgrade(manifest: dict) -> None:
    """Bring a manifest of an older schema to SCHEMA_VERSION (the file is unchanged)."""
    for version in range(manifest["schema_version"], SCHEMA_VERSION):
        UPGRADES[version](manifest)
    manifest["schema_version"] = SCHEMA_VERSION
