import json
import os
from importlib import resources
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pyarrow.parquet as pq
import pytest

import noisescope
from noisescope.bundle import Bundle, check_destination
from noisescope.errors import UsageError
from noisescope.manifest import SCHEMA_VERSION
from noisescope.tables import Table


def schema():
    text = resources.files("noisescope").joinpath("schema/manifest.schema.json").read_text()
    return json.loads(text)


def validate(manifest):
    jsonschema.validate(manifest, schema(), cls=jsonschema.Draft202012Validator)


def minimal_manifest(**extra):
    return {"schema_version": SCHEMA_VERSION, "kind": "import", "tool": {"name": "noisescope",
            "version": "0"}, "argv": [], "started_utc": "2026-01-01T00:00:00Z", "complete": True,
            "parameters": {}, "summaries": {}, "warnings": [], "tables": {},
            "source": {"tool": "cyclictest", "version": None, "command": None, "file": "x.txt",
                       "sha256": "0" * 64, "format": "text"}, **extra}


def test_round_trip(tmp_path):
    detours = Table({"cpu": np.array([0, 1], np.int32), "start_ns": np.array([5, 9]),
                     "duration_ns": np.array([1000, 2000])})
    written = Bundle(minimal_manifest(label="x"), {"detours": detours}).write(tmp_path / "b")
    loaded = noisescope.load(written)
    assert loaded.label == "x"
    assert loaded.manifest["tables"]["detours"]["rows"] == 2
    assert loaded.detours.where(cpu=1).duration_ns.tolist() == [2000]
    validate(loaded.manifest)


def test_a_stored_table_is_read_a_cpu_and_a_row_group_at_a_time(tmp_path):
    """table_by_cpu(name, columns) reads only those columns, and of one CPU only
    its row groups (found from their statistics, once), in the file's order;
    a row group of several CPUs (a table written whole) is filtered."""
    from noisescope.tables import ROW_GROUP_ROWS, SpooledTable, cpu_batches

    rows = ROW_GROUP_ROWS + 5
    spooled = Table({"cpu": np.repeat(np.array([3, 1], np.int32), rows),
                     "start_ns": np.tile(np.arange(rows) * 10, 2),
                     "duration_ns": np.arange(2 * rows) + 1000,
                     "cause": np.array(["tick", "irq"] * rows, dtype=object)})
    whole = Table({"cpu": np.array([1, 0, 1], np.int32), "start_ns": np.array([5, 9, 7]),
                   "duration_ns": np.array([1000, 2000, 3000]),
                   "cause": np.array(["tick", "irq", "ipi"], dtype=object)})
    halves = [(cpu, rows, lambda cpu=cpu: (part for part in (
        spooled.where(cpu=cpu).filter(slice(0, rows - 5)),
        spooled.where(cpu=cpu).filter(slice(rows - 5, None))))) for cpu in (3, 1)]
    tables = {"detours": SpooledTable.of(tmp_path / "d.parquet", spooled.filter(slice(0, 0)), halves),
              "mixed": whole}
    loaded = noisescope.load(Bundle(minimal_manifest(), tables).write(tmp_path / "b"))
    by_cpu = loaded.table_by_cpu("detours", ("start_ns", "duration_ns"))
    assert loaded.table_by_cpu("detours", ("start_ns", "duration_ns")) is by_cpu  # found once
    assert "detours" not in loaded._tables  # the whole table was not read
    assert by_cpu.cpus == [1, 3] and by_cpu.rows == 2 * rows
    for cpu in (1, 3):
        batches = list(cpu_batches(by_cpu, cpu, "start_ns"))
        assert [b.rows for b in batches] == [ROW_GROUP_ROWS, 5]  # the CPU's row groups
        assert batches[0].columns == ["cpu", "start_ns", "duration_ns"]
        mine = spooled.where(cpu=cpu)
        assert np.array_equal(Table.concat(batches).duration_ns, mine.duration_ns)
    # the spooled file's row groups have statistics of the numbers readers skip by
    # (CPU, time), none of the strings (their cost is a fifth of the encoding)
    import pyarrow.parquet as pq

    group = pq.ParquetFile(loaded.path / "detours.parquet").metadata.row_group(0)
    names = [group.column(i).path_in_schema for i in range(group.num_columns)]
    stats = {name: group.column(i).statistics for i, name in enumerate(names)}
    assert stats["cpu"].min == stats["cpu"].max == 3 and stats["start_ns"].has_min_max
    assert stats["cause"] is None
    several = loaded.table_by_cpu("mixed", ("duration_ns",))
    assert [b.duration_ns.tolist() for b in cpu_batches(several, 1, "start_ns")] == [[1000, 3000]]
    assert [b.duration_ns.tolist() for b in cpu_batches(several, 0, "start_ns")] == [[2000]]
    with pytest.raises(KeyError):
        loaded.table_by_cpu("events", ("cpu",))


def test_write_refuses_a_non_empty_destination(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not an empty directory"):
        Bundle(minimal_manifest()).write(tmp_path / "b")
    assert (tmp_path / "b" / "keep.txt").read_text() == "mine"


def test_write_into_an_empty_directory(tmp_path):
    (tmp_path / "b").mkdir()
    Bundle(minimal_manifest()).write(tmp_path / "b")
    assert (tmp_path / "b" / "manifest.json").exists()


def test_failed_write_leaves_nothing_behind(tmp_path):
    bad = Table({"x": np.array([object()], dtype=object)})  # pyarrow cannot store it
    with pytest.raises((pa.ArrowException, TypeError)):
        Bundle(minimal_manifest(), {"bad": bad}).write(tmp_path / "b")
    assert os.listdir(tmp_path) == []


def test_destination_checks(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        check_destination(tmp_path / "missing" / "b")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError):
        check_destination(tmp_path / "file")


def test_destination_not_writable(tmp_path):
    """Root may write anywhere: as root the check runs with the effective user
    `nobody` (its capabilities dropped with it). The folder (0500) is one that
    user may not even enter: still one line, not a PermissionError."""
    import shutil
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(dir="/tmp")) if os.geteuid() == 0 else tmp_path
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o500)
        if os.geteuid() == 0:
            os.seteuid(65534)  # back below: the real and saved user stay root
        try:
            with pytest.raises(UsageError, match="cannot write"):
                check_destination(locked / "b")
        finally:
            if os.getuid() == 0:
                os.seteuid(0)
    finally:
        if base != tmp_path:
            shutil.rmtree(base)


def test_destination_on_read_only_filesystem():
    with pytest.raises(UsageError, match="cannot write"):
        check_destination(__import__("pathlib").Path("/proc/noisescope-bundle"))


def test_load_errors(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        noisescope.load(tmp_path / "nope")
    with pytest.raises(UsageError, match="not a noisescope bundle"):
        noisescope.load(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(UsageError, match="corrupt"):
        noisescope.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "scan"}))
    with pytest.raises(UsageError, match="corrupt"):
        noisescope.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps(minimal_manifest(schema_version=99)))
    with pytest.raises(UsageError, match="newer noisescope"):
        noisescope.load(tmp_path)


def test_damaged_table_is_a_usage_error(tmp_path):
    written = Bundle(minimal_manifest(), {"t": Table({"a": np.arange(3)})}).write(tmp_path / "b")
    (written / "t.parquet").write_bytes(b"garbage")
    with pytest.raises(UsageError, match="unreadable"):
        noisescope.load(written).table("t")


def test_schema_rejects_bad_manifests():
    with pytest.raises(jsonschema.ValidationError):
        validate(minimal_manifest(warnings=[{"code": "made_up", "message": "", "hint": ""}]))
    with pytest.raises(jsonschema.ValidationError):
        validate({**minimal_manifest(), "kind": "scan"})  # a scan needs host and clock


def results_of_a_scan() -> dict[str, Table]:
    return {
        "detours": Table({"cpu": np.array([0, 1, 1], np.int32), "start_ns": np.array([5, 9, 12]),
                          "duration_ns": np.array([1000, 2000, 1500]),
                          "cause": np.array(["tick", "irq", "tick"], dtype=object),
                          "trace_events": np.array([3, 0, 2], np.int32)}),
        "gap_histogram": Table({"cpu": np.array([0, 0], np.int32),
                                "lower_ticks": np.array([128, 256], np.uint64),
                                "upper_ticks": np.array([256, 512], np.uint64),
                                "lower_ns": np.array([49, 98]), "upper_ns": np.array([98, 197]),
                                "count": np.array([7, 1])}),
        "spectrum": Table({"cpu": np.array([0, 0], np.int32),
                           "series": np.array(["ftq", "ftq"], dtype=object),
                           "frequency_hz": np.array([250.0, 500.0]),
                           "power": np.array([0.5, 1e-9])}),
        "injections": Table(),
    }


def test_tables_released_while_writing_are_written_the_same(tmp_path):
    """write(release_tables=True) parks the tables in numpy files and writes
    them one at a time: the files are those write() makes, and afterwards the
    tables come from the bundle."""
    import pyarrow.parquet as pq

    kept = Bundle(minimal_manifest(), results_of_a_scan())
    kept.write(tmp_path / "kept")
    released = Bundle(minimal_manifest(), results_of_a_scan())
    released.write(tmp_path / "released", release_tables=True)
    assert sorted(os.listdir(tmp_path / "released")) == sorted(os.listdir(tmp_path / "kept"))
    for name in results_of_a_scan():
        assert pq.read_table(tmp_path / "released" / f"{name}.parquet").equals(
            pq.read_table(tmp_path / "kept" / f"{name}.parquet")), name
    assert not released._tables  # nothing left in memory ...
    detours = released.table("detours")  # ... read back on use
    assert detours["cause"].tolist() == ["tick", "irq", "tick"] and detours["cpu"].dtype == np.int32
    assert released.manifest["tables"] == kept.manifest["tables"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept", "released"]  # nothing parked left


def test_a_parked_table_comes_back_with_its_strings_shared():
    import tempfile
    from pathlib import Path

    from noisescope.tables import ParkedTable

    table = results_of_a_scan()["detours"]
    with tempfile.TemporaryDirectory() as work:
        parked = ParkedTable.park(table, Path(work) / "detours")
        back = parked.load()
        assert parked.rows == 3 and parked.columns == table.columns
        for name in table.columns:
            assert back[name].dtype == table[name].dtype and back[name].tolist() == table[name].tolist()
        assert back["cause"][0] is back["cause"][2]  # one object per distinct value
        assert parked.to_arrow().equals(table.to_arrow())


def test_parked_parts_come_back_in_order_from_one_file_and_a_cut_file_fails(tmp_path):
    """A CPU's parts in one file, however many: each comes back as parked (its
    strings shared), in order; a picklable handle (a worker hands it back);
    a file cut short fails instead of giving fewer rows."""
    import pickle

    import pytest

    from noisescope.tables import ParkedParts

    table = results_of_a_scan()["detours"]
    parts = [table.filter(slice(0, 2)), table.filter(slice(2, 3)), table.filter(slice(0, 3))]
    parked = ParkedParts(tmp_path / "cpu0" / "detours")
    for part in parts:
        parked.append(part)
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["detours"]
    again = pickle.loads(pickle.dumps(parked))
    assert len(again) == 3 and again.rows == 6
    back = list(again.tables())
    for got, want in zip(back, parts, strict=True):
        assert got.columns == want.columns
        for name in want.columns:
            assert got[name].dtype == want[name].dtype and got[name].tolist() == want[name].tolist()
    assert back[2]["cause"][0] is back[2]["cause"][2]
    cut = (tmp_path / "cpu0" / "detours").read_bytes()
    (tmp_path / "cpu0" / "detours").write_bytes(cut[:-10])
    with pytest.raises((ValueError, EOFError, pickle.UnpicklingError)):
        list(again.tables())
    assert list(ParkedParts(tmp_path / "none").tables()) == []


def test_parked_parts_are_written_from_their_codes_as_their_tables_read(tmp_path):
    """A spooled table of parked parts is written to Parquet from the parts'
    codes (no str objects), and the file holds what the parts' tables hold:
    the same strings (a missing one too), in order, the dictionaries of the
    parts joined; a plain source of Tables beside it is written the same way."""
    import pyarrow.parquet as pq

    from noisescope.tables import ROW_GROUP_ROWS, ParkedParts, SpooledTable

    def part(start: int, rows: int, causes: list) -> Table:
        return Table({"cpu": np.zeros(rows, np.int32),
                      "start_ns": np.arange(start, start + rows, dtype=np.int64),
                      "cause": np.array([causes[k % len(causes)] for k in range(rows)], object)})

    parts = [part(0, 5, ["tick", "irq"]), part(5, 3, ["ipi", None, "tick"]),
             part(8, ROW_GROUP_ROWS, ["thread", "irq"]), part(ROW_GROUP_ROWS + 8, 2, ["nmi"])]
    parked = ParkedParts(tmp_path / "cpu0" / "causes")
    for one in parts:
        parked.append(one)
    plain = [part(0, 4, ["softirq", "tick"])]
    rows = sum(p.rows for p in parts)
    table = SpooledTable.of(tmp_path / "causes.parquet", parts[0].filter(slice(0, 0)),
                            [(0, rows, parked), (1, 4, lambda: iter(plain))])
    written = pq.read_table(table.ready())
    want = Table.concat([*parked.tables(), *plain])
    assert written.column("cause").to_pylist() == want["cause"].tolist()
    assert written.column("start_ns").to_pylist() == want["start_ns"].tolist()
    assert written.num_rows == rows + 4
    assert [written.column("cause").chunk(0).dictionary.to_pylist()[:3]] == [["tick", "irq", "ipi"]]


@pytest.mark.parametrize("workers", [1, 3])
def test_a_large_spooled_table_is_written_in_parts_as_it_reads_whole(tmp_path, monkeypatch,
                                                                     workers):
    """A spooled table of more than PART_ROWS rows is written as a directory
    of parts, runs of CPUs of PART_ROWS rows or more (by 3 worker processes
    side by side, the largest first, or one): read back, it holds the rows of
    the one file a smaller PART_ROWS-free write makes, in order, with the same
    row groups; a bundle's load reads it as that table."""
    from noisescope import bundle as bundle_module
    from noisescope import tables as tables_module
    from noisescope.tables import SpooledTable, parquet_parts

    monkeypatch.setattr(bundle_module, "worker_count", lambda parts: workers)

    def rows_of(cpu: int, count: int):
        def batches():
            for first in range(0, count, 7):
                n = min(7, count - first)
                yield Table({"cpu": np.full(n, cpu, np.int32),
                             "start_ns": np.arange(first, first + n, dtype=np.int64) + cpu * 1000,
                             "cause": np.array(["tick", "irq", "ipi"] * n, object)[:n]})
        return batches

    counts = {0: 30, 1: 5, 2: 12, 3: 40, 4: 3}
    sources = [(cpu, n, rows_of(cpu, n)) for cpu, n in counts.items()]
    empty = next(rows_of(0, 1)()).filter(slice(0, 0))
    one = pq.ParquetFile(SpooledTable.of(tmp_path / "one.parquet", empty, sources).ready())
    monkeypatch.setattr(tables_module, "PART_ROWS", 20)
    table = SpooledTable.of(tmp_path / "parts.parquet", empty, sources)
    assert [list(share) for share in table.shares] == [[0], [1, 2, 3], [4]]
    assert [table.share_rows(k) for k in range(3)] == [30, 57, 3]
    bundle_module._make_side_by_side([table])
    parts = [pq.ParquetFile(part) for part in parquet_parts(table.path)]
    assert table.path.is_dir() and [p.name for p in parquet_parts(table.path)] == [
        "000000.parquet", "000001.parquet", "000002.parquet"]
    assert not list(tmp_path.glob(".*partial*"))
    assert pa.concat_tables([p.read() for p in parts]).to_pydict() == one.read().to_pydict()
    assert [p.metadata.row_group(i).num_rows for p in parts for i in range(p.num_row_groups)] \
        == [one.metadata.row_group(i).num_rows for i in range(one.num_row_groups)]
    path = written(tmp_path, tables={"spooled": table})
    assert noisescope.load(path).table("spooled")["start_ns"].tolist() == \
        one.read().column("start_ns").to_pylist()


def test_a_part_that_fails_to_be_parked_is_cut_off_again(tmp_path):
    """A part whose writing fails half-way (here: a value that cannot be
    pickled, after 800 KB of numbers were written) leaves the parts before it
    whole and the next one appended after them; a first part that fails
    leaves nothing."""
    import numpy as np
    import pytest

    from noisescope.tables import ParkedParts, Table

    def part(first: int, value: object = "tick") -> Table:
        column = np.empty(100_000, dtype=object)
        column[:] = value
        return Table({"start_ns": np.arange(first, first + 100_000, dtype=np.int64),
                      "cause": column})

    parked = ParkedParts(tmp_path / "causes")
    with pytest.raises(Exception):  # noqa: B017 - whatever pickle raises for a lambda
        parked.append(part(0, lambda: None))
    assert (tmp_path / "causes").stat().st_size == 0 and len(parked) == 0
    parked.append(part(0))
    size = (tmp_path / "causes").stat().st_size
    with pytest.raises(Exception):  # noqa: B017
        parked.append(part(1, lambda: None))
    assert (tmp_path / "causes").stat().st_size == size and len(parked) == 1
    parked.append(part(2))
    back = list(parked.tables())
    assert [int(t["start_ns"][0]) for t in back] == [0, 2] and parked.rows == 200_000
    with pytest.raises(ValueError, match="parks"):
        parked.append(Table({"start_ns": np.zeros(1, np.int64)}))


def no_space_under(directory):
    """A _write_table that fails like a full disk for files under `directory`."""
    import noisescope.bundle as bundle_module

    real = bundle_module._write_table

    def write_table(table, path):
        if directory in path.parents:
            raise OSError(28, "No space left on device")
        real(table, path)
    return write_table


def test_a_failed_write_keeps_the_measurement_elsewhere_and_says_where(tmp_path, monkeypatch):
    import noisescope.bundle as bundle_module

    full, spare = tmp_path / "full", tmp_path / "spare"
    full.mkdir()
    spare.mkdir()
    monkeypatch.setattr(bundle_module, "_write_table", no_space_under(full))
    monkeypatch.setattr(bundle_module, "_rescue_directories", lambda destination: [spare])
    bundle = Bundle(minimal_manifest(), results_of_a_scan())
    with pytest.raises(UsageError) as refused:
        bundle.write(full / "b", release_tables=True)
    message = str(refused.value)
    assert message.startswith(f"cannot write the bundle {full / 'b'}: No space left on device;")
    assert os.listdir(full) == []  # no partial directory, no parked files
    [kept] = spare.iterdir()
    assert f"the measurement is kept at {kept};" in message and "\n" not in message
    rescued = noisescope.load(kept)
    assert rescued.complete and bundle.path == kept
    assert rescued.table("detours")["duration_ns"].tolist() == [1000, 2000, 1500]
    assert sorted(rescued.table_names) == sorted(results_of_a_scan())
    validate(rescued.manifest)


def test_a_write_that_fails_everywhere_says_the_measurement_is_lost(tmp_path, monkeypatch):
    import noisescope.bundle as bundle_module

    monkeypatch.setattr(bundle_module, "_write_table", no_space_under(tmp_path))
    monkeypatch.setattr(bundle_module, "_rescue_directories",
                        lambda destination: [tmp_path / "a", tmp_path / "b"])
    for name in "ab":
        (tmp_path / name).mkdir()
    bundle = Bundle(minimal_manifest(), results_of_a_scan())
    with pytest.raises(UsageError, match=r"keeping it elsewhere failed too \(.*/a: No space left on "
                                         r"device; .*/b: No space left on device\): the measurement "
                                         r"is lost"):
        bundle.write(tmp_path / "out", release_tables=True)
    assert [list(d.iterdir()) for d in (tmp_path / "a", tmp_path / "b")] == [[], []]
    assert bundle.table("detours")["duration_ns"].tolist() == [1000, 2000, 1500]  # still in memory


def test_a_manifest_that_cannot_be_written_keeps_the_released_tables_and_says_why(tmp_path):
    bundle = Bundle(minimal_manifest(), results_of_a_scan())
    bundle.manifest["unstorable"] = object()  # after every table was written
    with pytest.raises(TypeError, match="cannot store object"):
        bundle.write(tmp_path / "b", release_tables=True)
    assert os.listdir(tmp_path) == []
    assert bundle.table("detours")["duration_ns"].tolist() == [1000, 2000, 1500]


def test_a_stored_table_is_written_when_first_needed(tmp_path):
    import pyarrow.parquet as pq

    from noisescope.tables import StoredTable

    calls = []

    def write_file(give_up):
        calls.append(1)
        pq.write_table(Table({"x": np.arange(3)}).to_arrow(), tmp_path / "late.parquet")

    stored = StoredTable(tmp_path / "late.parquet", 3, ["x"], write_file)
    assert not calls and not stored.path.exists()
    Bundle(minimal_manifest(), {"late": stored, "again": stored}).write(tmp_path / "b")
    assert calls == [1]  # written once, copied twice
    assert noisescope.load(tmp_path / "b").table("again")["x"].tolist() == [0, 1, 2]


# -- loading checks the manifest against the schema, and every table's file --------------

def written(tmp_path, manifest=None, tables=None):
    tables = tables if tables is not None else {
        "timerlat_histogram": Table({"cpu": np.array([0], np.int32), "lower_ns": np.array([0]),
                                     "upper_ns": np.array([1000]), "count": np.array([5])})}
    return Bundle(manifest or minimal_manifest(), tables).write(tmp_path / "b")


def edit_manifest(path, change):
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("change, words", [
    (lambda m: m.update(kind="spaceship"), "$.kind"),
    (lambda m: m.update(host={"x": 1}), "$.host"),
    (lambda m: m["summaries"].update(timerlat="oops"), "$.summaries.timerlat"),
    (lambda m: m["summaries"].update(other=[{"cpu": 0, "max_ns": "long"}]), "'long'"),
    (lambda m: m.update(complete="yes"), "$.complete"),
    (lambda m: m.update(schema_version="1"), "$.schema_version"),
    (lambda m: m["tables"]["timerlat_histogram"].update(file="../../../../etc/passwd"), "file"),
])
def test_a_manifest_of_the_wrong_shape_is_refused_by_load(tmp_path, change, words):
    path = written(tmp_path)
    edit_manifest(path, change)
    with pytest.raises(UsageError) as error:
        noisescope.load(path)
    assert "manifest.json is corrupt" in str(error.value) and words in str(error.value)
    assert "\n" not in str(error.value)


def test_a_scan_manifest_needs_a_list_of_cpus(tmp_path):
    manifest = {**minimal_manifest(), "kind": "fleet", "parameters": {
        "cpus": "all", "duration_ns": 1, "probes": [], "ranks": 1}, "summaries": {"ranks": []}}
    manifest.pop("source")
    with pytest.raises(UsageError, match=r"\$\.parameters\.cpus"):
        noisescope.load(Bundle(manifest).write(tmp_path / "b"))


def _in_parts(path, name, damage):
    """The table's file made a directory of two parts, each of its rows (twice
    the rows the manifest says), then `damage(first, second)`."""
    file = path / f"{name}.parquet"
    arrow = pq.read_table(file)
    file.unlink()
    file.mkdir()
    first, second = file / "000000.parquet", file / "000001.parquet"
    pq.write_table(arrow, first)
    pq.write_table(arrow, second)
    damage(first, second)


def test_a_table_in_parts_loads_as_one(tmp_path):
    """A table's file may be a directory of Parquet parts (a scan's events:
    a part each CPU): read whole, by CPU, and checked as one table; parts
    not yet whole (`.partial`) are not read."""
    path = written(tmp_path, tables={"detours": Table({
        "cpu": np.array([0, 0, 1], np.int32), "start_ns": np.array([5, 9, 7]),
        "duration_ns": np.array([1, 2, 3])})})
    whole = pq.read_table(path / "detours.parquet")
    (path / "detours.parquet").unlink()
    (path / "detours.parquet").mkdir()
    for number, cpu in enumerate((0, 1)):
        pq.write_table(whole.filter(pa.compute.equal(whole["cpu"], cpu)),
                       path / "detours.parquet" / f"00000{number}.parquet")
    pq.write_table(whole, path / "detours.parquet" / "000002.parquet.partial")
    by_cpu = noisescope.load(path).table_by_cpu("detours", ("start_ns",))
    assert [batch["start_ns"].tolist() for cpu in (0, 1) for batch in by_cpu.batches(cpu)] == [
        [5, 9], [7]]
    assert noisescope.load(path).table("detours")["start_ns"].tolist() == [5, 9, 7]


def _rewrite(path, name, arrow):
    import pyarrow.parquet as pq

    pq.write_table(arrow, path / f"{name}.parquet")


@pytest.mark.parametrize("damage, words", [
    (lambda p: (p / "timerlat_histogram.parquet").unlink(), "is missing"),
    (lambda p: ((p / "timerlat_histogram.parquet").unlink(),
                (p / "timerlat_histogram.parquet").mkdir()), "a directory without Parquet parts"),
    (lambda p: _in_parts(p, "timerlat_histogram", lambda first, second: second.write_bytes(
        b"PAR1garbage")), "000001.parquet is unreadable"),
    (lambda p: _in_parts(p, "timerlat_histogram", lambda first, second: pq.write_table(
        pa.table({"x": [1]}), second)), "has other columns than the first"),
    (lambda p: _in_parts(p, "timerlat_histogram", lambda first, second: None),
     "holds 2 rows"),
    (lambda p: _in_parts(p, "timerlat_histogram", lambda first, second: (
        second.unlink(), second.symlink_to("/etc/passwd"))), "is not a file inside the bundle"),
    (lambda p: (p / "timerlat_histogram.parquet").write_bytes(b"PAR1garbage"), "is unreadable"),
    (lambda p: ((p / "timerlat_histogram.parquet").unlink(),
                (p / "timerlat_histogram.parquet").symlink_to("/etc/passwd")), "outside"),
    (lambda p: _rewrite(p, "timerlat_histogram", pa.table({"x": [1]})), "the manifest says"),
    (lambda p: _rewrite(p, "timerlat_histogram", pa.table({
        "cpu": [0, 0], "lower_ns": [0, 1], "upper_ns": [1, 2], "count": [1, 1]})),
     "the manifest says 1 rows"),
])
def test_a_damaged_table_is_refused_by_load_naming_its_file(tmp_path, damage, words):
    path = written(tmp_path)
    damage(path)
    with pytest.raises(UsageError) as error:
        noisescope.load(path)
    assert "timerlat_histogram.parquet" in str(error.value) and words in str(error.value)


def test_a_table_must_hold_the_columns_and_types_its_readers_use(tmp_path):
    columns = {"cpu": pa.array(["zero"]), "lower_ns": [0], "upper_ns": [1], "count": [5]}
    path = written(tmp_path)
    _rewrite(path, "timerlat_histogram", pa.table(columns))
    with pytest.raises(UsageError, match="column cpu of table timerlat_histogram holds string"):
        noisescope.load(path)
    columns["cpu"] = pa.array([0], pa.int32())
    del columns["count"]
    _rewrite(path, "timerlat_histogram", pa.table(columns))
    edit_manifest(path, lambda m: m["tables"]["timerlat_histogram"].update(
        columns=["cpu", "lower_ns", "upper_ns"]))
    with pytest.raises(UsageError, match="has no column count"):
        noisescope.load(path)


def test_an_empty_table_without_columns_loads(tmp_path):
    path = written(tmp_path, tables={"injections": Table()})
    assert noisescope.load(path).table("injections").rows == 0


OLD_BUNDLES = sorted(p for p in (Path(__file__).parents[1] / "fixtures" / "bundles").iterdir()
                     if p.is_dir())


@pytest.mark.parametrize("path", OLD_BUNDLES, ids=[p.name for p in OLD_BUNDLES])
def test_bundles_of_earlier_versions_load_and_show(path, capsys):
    """Written by earlier noisescope versions of this schema (the commit is in the
    name; tests/fixtures/bundles/README.md): they pass the checks and print."""
    from noisescope.cli.main import main

    bundle = noisescope.load(path)
    for name in bundle.table_names:
        bundle.table(name)
    assert main(["show", str(path)]) == 0
    assert "Traceback" not in capsys.readouterr().err
