"""Every subcommand refuses bad input the same way: exit status 2, exactly one
line `noisescope: error: ...` on stderr, no traceback, nothing left behind in
the working directory, and no measurement started.

The commands run in-process through `noisescope.cli.main.main` (what the
installed `noisescope` command calls; a subprocess costs about a second of
start-up here), with tripwires on everything that measures or changes the
machine: the native run, workload launches, kernel tracing, the PM QoS request
and MPI. A few cases run the installed command as a subprocess, to prove the
real entry point behaves the same.

The catalogue: bad values per kind of option (durations, rates, sizes, CPU
lists, counts, integers, paths, empty strings, huge and negative numbers,
binary files) for every option of that kind, damaged bundles for every command
that reads bundles, and hypothesis-generated durations, CPU lists and manifests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noisescope.cli import main as cli_main

CLI = [sys.executable, "-m", "noisescope"]
FIXTURES = Path(__file__).parents[1] / "fixtures"
BINARY = b"\x00\xff\xfe\x89PAR1\x1b[2J\x00" * 64
HUGE = "99999999999999999999999999999"

# -- bad values by kind of option ------------------------------------------------------

BAD = {
    "duration": ["1e300s", "-1s", "10q", "nan", f"{HUGE}h", "\x1b[31m1s"],
    "positive_duration": ["0", "1e-300s"],
    "rate": ["0Hz", "1e300Hz", "fast", "2GHz", HUGE],
    "size": ["100000G", "1e400", "0", "1X"],
    "cpus": ["0-999999999", HUGE, "a", "3-1", "0-8192", "8191"],
    "count": ["2^999999", HUGE, "1", "-5", "k"],
    "int": ["-1", HUGE, "x"],
    "noise": ["1kHz", "1kHz:2ms", "1e300Hz:1ns", "1kHz:1e300s", "1kHz:20us@cpu99999999",
              "1kHz:20us@cpu1/nope"],
    "empty": [""],
}
for kind in ("duration", "rate", "size", "cpus", "count", "noise"):
    BAD[kind] += BAD["empty"]
BAD["positive_duration"] += BAD["duration"]

# (command prefix, option, kind of bad value). `cluster scan` shares the measurement
# options with `scan` (cli/scan.py measurement_options, scan_options): all of them
# are tried on `scan`, a few on `cluster scan` to show the wiring.
MEASUREMENT = [("--cpus", "cpus"), ("--duration", "positive_duration"),
               ("--threshold", "positive_duration"), ("--runtime", "positive_duration"),
               ("--period", "positive_duration"), ("--quantum", "positive_duration"),
               ("--interval", "positive_duration"), ("--trace-buffer", "size"),
               ("--trace-cost", "duration"), ("--trace-threshold", "duration"),
               ("--inject", "noise"), ("--probes", "empty"), ("--label", "empty"),
               ("--max-detours", "int"), ("--priority", "int")]
OPTIONS = [
    *((["scan"], option, kind) for option, kind in MEASUREMENT),
    (["scan"], "-o", "empty"),
    (["timerlat"], "--cpus", "cpus"), (["timerlat"], "--interval", "positive_duration"),
    (["timerlat"], "--duration", "positive_duration"), (["timerlat"], "--loops", "int"),
    (["timerlat"], "--priority", "int"), (["timerlat"], "--histogram", "int"),
    (["timerlat"], "--dma-latency", "int"), (["timerlat"], "--trace-threshold", "duration"),
    (["timerlat"], "-o", "empty"),
    (["inject", "--cpu", "0"], "--rate", "rate"),
    (["inject", "--cpu", "0"], "--length", "positive_duration"),
    (["inject", "--cpu", "0"], "--for", "positive_duration"),
    (["inject", "--for", "1s"], "--cpu", "int"),
    *((["bench"], option, kind) for option, kind in [
        ("--cpus", "cpus"), ("--timeout", "positive_duration"), ("--inject", "noise"),
        ("--runs", "int"), ("--warmup", "int"), ("--ncpus", "int"), ("--fifo", "int"),
        ("--metric", "empty"), ("--name", "empty"), ("-o", "empty"), ("--siblings", "cpus")]),
    (["run", "EXPERIMENT"], "--runs", "int"), (["run", "EXPERIMENT"], "--warmup", "int"),
    (["run", "EXPERIMENT"], "--configurations", "empty"), (["run", "EXPERIMENT"], "-o", "empty"),
    (["run", "EXPERIMENT"], "--siblings", "cpus"),
    (["compare", "BENCH", "BENCH2"], "--resamples", "int"),
    (["compare", "BENCH", "BENCH2"], "--seed", "int"),
    (["compare", "BENCH", "BENCH2"], "--alpha", "int"),
    (["compare", "BENCH", "BENCH2"], "--metrics", "empty"),
    (["compare", "BENCH", "BENCH2"], "--baseline", "empty"),
    (["explain", "SCAN"], "--cpus", "cpus"), (["explain", "SCAN"], "--worst", "int"),
    (["explain", "TIMERLAT"], "--trace-threshold", "duration"),
    (["report", "SCAN"], "-o", "empty"),
    (["predict", "1kHz:1us"], "--procs", "count"),
    (["predict", "1kHz:1us"], "--compute", "duration"),
    (["predict", "1kHz:1us"], "--bytes", "int"), (["predict", "1kHz:1us"], "--iterations", "int"),
    (["predict", "1kHz:1us"], "--seeds", "int"), (["predict", "1kHz:1us"], "--seed", "int"),
    (["predict", "1kHz:1us"], "--latency", "duration"),
    (["predict", "1kHz:1us"], "--gap-per-byte", "duration"),
    (["predict", "1kHz:1us"], "-o", "empty"),
    (["export-trace", "1kHz:1us", "-o", "t"], "--seed", "int"),
    (["export-trace", "SCAN", "-o", "t"], "--cpu", "int"),
    (["import", "cyclictest", "CYCLICTEST"], "--cpus", "cpus"),
    (["import", "cyclictest", "CYCLICTEST"], "--label", "empty"),
    (["system", "show"], "--cpus", "cpus"),
    (["tune"], "--cpus", "cpus"), (["tune", "--cpus", "1"], "--duration", "positive_duration"),
    (["tune", "--cpus", "1"], "--label", "empty"), (["tune", "--cpus", "1"], "-o", "empty"),
    (["tune", "--cpus", "1", "--measure"], "--rounds", "count"),
    (["tune", "--cpus", "1", "--measure"], "--round-duration", "positive_duration"),
    (["tune", "--cpus", "1", "--apply"], "--only", "empty"),
    *((["cluster", "scan", "-o", "fleet"], option, kind) for option, kind in MEASUREMENT[:3]),
    (["cluster", "scan", "-o", "fleet"], "--timeout", "positive_duration"),
    (["cluster", "scan", "-o", "fleet"], "--inject-ranks", "cpus"),
    *((["cluster", "bsp"], option, kind) for option, kind in [
        ("--compute", "positive_duration"), ("--sample", "positive_duration"),
        ("--threshold", "positive_duration"), ("--timeout", "positive_duration"),
        ("--iterations", "int"), ("--block", "int"), ("--seeds", "int"), ("--cpus", "cpus"),
        ("--inject", "noise"), ("--inject-ranks", "cpus")]),
]
# Values that an option of that kind takes as valid, or that are checked only
# against the machine later; listed so that the catalogue says so explicitly.
VALID_HERE = {
    ("--trace-cost", "1e-300s"), ("--trace-threshold", "1e-300s"), ("--compute", "1e-300s"),
    ("--latency", "1e-300s"), ("--gap-per-byte", "1e-300s"),
    ("--priority", "1.5"), ("--max-detours", "1.5"), ("--seed", HUGE), ("--worst", HUGE),
}
# Checked by each rank against its own node once MPI runs (the code of `scan`'s
# cases above): a cluster command cannot refuse these before MPI starts.
AFTER_MPI = {("--cpus", "8191"), ("--inject", "1kHz:20us@cpu99999999"),
             ("--inject-ranks", "8191"), ("--max-detours", HUGE), ("--trace-buffer", "100000G"),
             *(("--priority", v) for v in ("0", "100", "-1", HUGE))}
# Integer options whose bad values are the ones below (their own range).
INT_BAD = {"--priority": ["0", "100", "-1", HUGE], ("timerlat", "--priority"): ["100", "-1", HUGE],
           "--histogram": ["0", "-1", HUGE],
           "--alpha": ["0", "1", "-1", HUGE, "nan"], "--cpu": ["-1", "99999", HUGE],
           "--runs": ["0", "-1", HUGE], "--resamples": ["0", "-1", HUGE]}


def _values(command: str, option: str, kind: str) -> list[str]:
    values = BAD[kind]
    if kind == "int":
        values = INT_BAD.get((command, option), INT_BAD.get(option, values))
    return [v for v in values if (option, v) not in VALID_HERE]


CASES = [(prefix, option, value) for prefix, option, kind in OPTIONS
         for value in _values(prefix[0], option, kind)
         if not (prefix[0] == "cluster" and (option, value) in AFTER_MPI)]

# Whole command lines that are wrong in themselves (bad arguments, files, outputs).
COMMAND_LINES = [
    ["show", ""], ["show", "/nonexistent"], ["show", "."], ["show", "BINARYFILE"],
    ["compare", "BENCH", "/nonexistent"], ["compare", "BINARYDIR"],
    ["explain", "BINARYFILE"], ["report", "/nonexistent"],
    ["scan", "-o", "/proc/x"], ["scan", "-o", "/sys/x"], ["scan", "-o", "missing/dir/x"],
    ["scan", "-o", "EXISTINGFILE"], ["scan", "--probes", "nope"],
    ["scan", "--probes", "detour", "--duration", "1ns"],
    ["scan", "--probes", "ftq", "--duration", "1ms", "--quantum", "2ms"],
    ["scan", "--probes", "timerlat", "--duration", "1s", "--interval", "2s"],
    ["scan", "--duration", "300d"], ["scan", "--runtime", "2s", "--period", "1s"],
    ["scan", "--cpus", "9999"], ["scan", "--inject", "1kHz:20us@cpu9999"],
    ["timerlat", "-i", "1h", "-D", "1s"], ["timerlat", "-l", "10", "-D", "1s"],
    ["timerlat", "-l", "999999999999999"], ["timerlat", "--dma-latency", "99999999999"],
    ["inject", "--cpu", "0", "--rate", "1kHz", "--length", "2ms"],
    ["inject", "--cpu", "0", "--rate", "1MHz", "--length", "1us"],
    ["bench", "--shell", "--", ""], ["bench", "--", ""], ["bench", "--", "/nonexistent/prog"],
    ["bench", "--shell", "--", "a", "b"], ["bench", "--metric", "x", "--", "true"],
    ["bench", "--cpus", "9999", "--", "true"], ["bench", "-o", "/proc/x", "--", "true"],
    ["run", "BINARYFILE"], ["run", "/nonexistent.toml"], ["run", "EXPERIMENT", "-o", "/sys/x"],
    ["run", "EXPERIMENT", "--configurations", "nope"],
    ["predict", "BINARYFILE"], ["predict", "nonsense"], ["predict", "SCAN", "--procs", "1"],
    ["predict", "1kHz:1us", "--iterations", "99999999999999", "--compute", "1s"],
    ["predict", "1kHz:1us", "--bytes", "99999999999999999999"],
    ["predict", "1kHz:1us", "-o", "/proc/x"],
    ["export-trace", "1kHz:1us", "-o", "/sys/x"], ["export-trace", "1kHz:1us", "-o", "/proc/x"],
    ["export-trace", "1kHz:1us", "-o", "EXISTINGFILE"], ["export-trace", "BINARYFILE", "-o", "t"],
    ["export-trace", "SCAN", "--cpu", "999", "-o", "t"],
    ["import", "cyclictest", "BINARYFILE"], ["import", "oslat", "/nonexistent"],
    ["import", "sysjitter", "CYCLICTEST"], ["import", "cyclictest", "CYCLICTEST", "-o", "/sys/x"],
    ["system", "show", "--root", "/nonexistent"], ["system", "show", "--cpus", "9999"],
    ["cleanup", "extra"], ["tune", "--measure"], ["tune", "--cpus", "1", "--restore"],
    ["tune", "--cpus", "1", "--measure", "--only", "irq:x"],
    ["tune", "--cpus", "1", "--measure", "--round-duration", "100ms"],
    ["tune", "--cpus", "1", "--measure", "--apply"],
    ["cluster", "scan"], ["cluster", "bsp", "--collective", "gather"],
    ["nosuchcommand"],
]


# -- fixtures ----------------------------------------------------------------------------

def _cli(*args: str) -> None:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, measured_cpu) -> dict[str, Path]:
    """Real bundles (a traced scan, a timerlat run, two benches) and files to feed
    the commands, made once by the installed command."""
    root = tmp_path_factory.mktemp("inputs")
    _cli("scan", "--cpus", str(measured_cpu), "--probes", "detour,ftq", "--duration", "300ms",
         "--no-report", "-q", "-o", str(root / "scan"))
    _cli("timerlat", "--cpus", str(measured_cpu), "--duration", "300ms", "-q",
         "-o", str(root / "timerlat"))
    for name in ("bench-a", "bench-b"):
        _cli("bench", "--runs", "2", "--warmup", "0", "--label", name, "-q",
             "-o", str(root / name), "--", "true")
    (root / "binary").write_bytes(BINARY)
    (root / "binary-dir").mkdir()
    (root / "binary-dir" / "manifest.json").write_bytes(BINARY)
    (root / "existing").write_text("keep me\n")
    (root / "experiment.toml").write_text(
        '[experiment]\nruns = 1\nwarmup = 0\n[[workload]]\nname = "t"\ncommand = ["true"]\n')
    return {"SCAN": root / "scan", "TIMERLAT": root / "timerlat", "BENCH": root / "bench-a",
            "BENCH2": root / "bench-b", "BINARYFILE": root / "binary",
            "BINARYDIR": root / "binary-dir", "EXISTINGFILE": root / "existing",
            "EXPERIMENT": root / "experiment.toml",
            "CYCLICTEST": FIXTURES / "imports" / "cyclictest" / "hist.json"}


class Tripwire(Exception):
    """Something that measures or changes the machine was reached."""


@pytest.fixture
def refuse(tmp_path, monkeypatch, capsys, inputs):
    """refuse(argv): run the command in-process in an empty directory and assert
    it refused the input the project's way; returns the error line."""
    import noisescope._native
    import noisescope.cluster.mpi
    import noisescope.timerlat
    import noisescope.trace.scanning
    import noisescope.workload

    def trip(what):
        def tripped(*args, **kwargs):
            raise Tripwire(f"{what} was reached: the input was not refused before it")
        return tripped

    monkeypatch.setattr(noisescope._native, "run", trip("a native measurement"))
    monkeypatch.setattr(noisescope.workload.Runner, "__init__", trip("a workload launch"))
    monkeypatch.setattr(noisescope.trace.scanning.ScanTracing, "begin",
                        classmethod(trip("kernel tracing")))
    monkeypatch.setattr(noisescope.timerlat, "cpu_latency_request", trip("a PM QoS request"))
    monkeypatch.setattr(noisescope.cluster.mpi.World, "__init__", trip("MPI"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    sigterm = signal.getsignal(signal.SIGTERM)  # main() installs its own

    def run(argv: list[str]) -> str:
        argv = [str(inputs.get(a, a)) for a in argv]
        try:
            status = cli_main.main(argv)
        finally:
            signal.signal(signal.SIGTERM, sigterm)
        out, err = capsys.readouterr()
        assert_refused(status, err, work)
        return err
    return run


def assert_refused(status: int, stderr: str, directory: Path) -> None:
    lines = stderr.splitlines()
    assert status == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("noisescope: error: "), stderr
    assert "Traceback" not in stderr and "\x1b" not in stderr, stderr
    assert sorted(os.listdir(directory)) == [], "left behind: " + ", ".join(os.listdir(directory))


# -- the catalogue -------------------------------------------------------------------------

def test_the_catalogue_covers_every_subcommand():
    import click

    names = set()
    for name in cli_main.COMMANDS:
        command = cli_main.cli.get_command(None, name)
        subs = command.commands if isinstance(command, click.Group) else {}
        names |= {f"{name} {sub}" for sub in subs} if subs else {name}
    tried = {" ".join(prefix[:2]) if prefix[0] in ("cluster", "system") else prefix[0]
             for prefix, _, _ in CASES}
    tried |= {" ".join(line[:2]) if line[0] in ("cluster", "system") else line[0]
              for line in COMMAND_LINES}
    assert names - tried == set(), "subcommands without bad-input cases"


@pytest.mark.parametrize("prefix, option, value", CASES,
                         ids=[f"{' '.join(p[:2])} {o}={v!r}" for p, o, v in CASES])
def test_a_bad_option_value_is_refused(refuse, prefix, option, value):
    refuse([*prefix, option, value, *(["--", "true"] if prefix == ["bench"] else [])])


@pytest.mark.parametrize("argv", COMMAND_LINES, ids=[" ".join(a) for a in COMMAND_LINES])
def test_a_bad_command_line_is_refused(refuse, argv):
    refuse(argv)


def test_messages_say_what_is_wrong(refuse):
    """The wording the issue found misleading, and errors that name the bound."""
    assert "only" not in refuse(["scan", "-o", "/proc/x"]).lower()
    assert "No such file" not in refuse(["scan", "-o", "/proc/x"])
    assert "quantum" not in refuse(["scan", "--probes", "detour", "--duration", "1ns"])
    assert "longer than the duration" in refuse(["timerlat", "-i", "1h", "-D", "1s"])
    assert "366 days" in refuse(["scan", "--duration", "1e300s"])
    assert "8191" in refuse(["scan", "--cpus", "0-999999999"])
    assert "at most 16M" in refuse(["predict", "1kHz:1us", "--procs", "2^999999"])
    assert "--trace-buffer 100000G" in refuse(["scan", "--trace-buffer", "100000G"])
    assert "whole CPU" in refuse(["inject", "--cpu", "0", "--rate", "1kHz", "--length", "2ms"])
    assert "must not be empty" in refuse(["show", ""])


# -- damaged bundles -------------------------------------------------------------------------

def _edit(manifest_path: Path, change) -> None:
    manifest = json.loads(manifest_path.read_text())
    change(manifest)
    manifest_path.write_text(json.dumps(manifest))


def _set(path: str, value):
    def change(manifest):
        *parents, last = path.split(".")
        node = manifest
        for key in parents:
            node = node[key]
        node[last] = value
    return change


def _replace_table(name: str, table: pa.Table, *, declare: bool):
    def damage(bundle: Path) -> None:
        pq.write_table(table, bundle / f"{name}.parquet")
        if declare:  # the manifest agrees with the file: only the columns are wrong
            _edit(bundle / "manifest.json", _set(f"tables.{name}", {
                "file": f"{name}.parquet", "rows": table.num_rows, "columns": table.column_names}))
    return damage


def _manifest(change):
    return lambda bundle: _edit(bundle / "manifest.json", change)


def _file(name: str, make):
    def damage(bundle: Path) -> None:
        target = bundle / name
        target.unlink()
        make(target)
    return damage


DAMAGE = {
    "host is not host facts": _manifest(_set("host", {"x": 1})),
    "cpus are not a list": _manifest(_set("parameters.cpus", "all")),
    "a summary is not a list": _manifest(_set("summaries.detour", "oops")),
    "a summary row lacks fields": _manifest(_set("summaries.detour", [{"cpu": 0}])),
    "unknown kind": _manifest(_set("kind", "spaceship")),
    "schema version is text": _manifest(_set("schema_version", "1")),
    "complete is text": _manifest(_set("complete", "yes")),
    "unknown warning": _manifest(_set("warnings", [{"code": "x", "message": "", "hint": ""}])),
    "table outside the bundle": _manifest(_set("tables.detours.file", "../../../../etc/passwd")),
    "table entry is not an object": _manifest(_set("tables.detours", "detours.parquet")),
    "manifest is a list": lambda b: (b / "manifest.json").write_text("[]"),
    "manifest is binary": lambda b: (b / "manifest.json").write_bytes(BINARY),
    "manifest nests too deep": lambda b: (b / "manifest.json").write_text("[" * 100_000),
    # (a scan's events: a directory of Parquet parts, one a CPU)
    "events.parquet is missing": lambda b: shutil.rmtree(b / "events.parquet"),
    "a part of events.parquet is garbage": lambda b: (
        b / "events.parquet" / "000000-0000.parquet").write_bytes(BINARY),
    "a part of events.parquet is missing": lambda b: (
        b / "events.parquet" / "000000-0000.parquet").unlink(),
    "events.parquet has no parts": lambda b: (shutil.rmtree(b / "events.parquet"),
                                              (b / "events.parquet").mkdir()),
    "events.parquet is garbage": lambda b: (shutil.rmtree(b / "events.parquet"),
                                            (b / "events.parquet").write_bytes(BINARY)),
    "ftq.parquet is a directory": _file("ftq.parquet", Path.mkdir),
    "a table is a link out of the bundle": _file("ftq.parquet",
                                                 lambda t: t.symlink_to("/etc/passwd")),
    "a table has other columns": _replace_table("detours", pa.table({"x": [1, 2]}),
                                                declare=False),
    "a table has other columns, declared": _replace_table("detours", pa.table({"x": [1, 2]}),
                                                          declare=True),
    "a column has the wrong type": _replace_table(
        "ftq", pa.table({"cpu": ["a"], "start_ns": ["b"], "work": ["c"]}), declare=True),
    "a table has fewer rows": _replace_table(
        "ftq", pa.table({"cpu": pa.array([0], pa.int32()), "start_ns": [1], "work": [2]}),
        declare=False),
}
READERS = [["show", "B"], ["compare", "B", "SCAN"], ["report", "B", "-o", "r.html"],
           ["explain", "B"], ["predict", "B", "--procs", "2"], ["export-trace", "B", "-o", "t"]]


@pytest.fixture
def damaged(inputs, tmp_path):
    def make(kind: str) -> Path:
        bundle = tmp_path / "damaged"
        shutil.copytree(inputs["SCAN"], bundle, symlinks=True)
        if "events" in kind and not (bundle / "events.parquet").exists():
            pytest.skip("the scan was not traced (needs root and tracefs)")
        DAMAGE[kind](bundle)
        return bundle
    return make


@pytest.mark.parametrize("kind", DAMAGE)
def test_every_reader_refuses_a_damaged_bundle(refuse, damaged, kind):
    bundle = damaged(kind)
    for argv in READERS:
        line = refuse([str(bundle) if a == "B" else a for a in argv])
        assert str(bundle) in line, line


# -- generated bad input -------------------------------------------------------------------

GENERATED = settings(max_examples=25, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
durations = st.one_of(
    st.from_regex(r"\A-?[0-9]{0,40}(\.[0-9]*)?(e[-+]?[0-9]{1,4})?[a-zµ]{0,4}\Z"),
    st.text(max_size=12))
cpu_lists = st.one_of(
    st.lists(st.one_of(st.integers(min_value=8192, max_value=10**30).map(str),
                       st.tuples(st.integers(0, 10**30), st.integers(8192, 10**30))
                       .map(lambda r: f"{r[0]}-{r[1]}")), min_size=1, max_size=4)
    .map(",".join),
    st.text(alphabet=",- 0123456789x\x00", max_size=12).filter(
        lambda t: not all(part.strip().isdigit() and int(part) < 2 for part in t.split(",")
                          if part.strip())))


@GENERATED
@given(text=durations)
def test_any_duration_is_read_or_refused(refuse, text):
    """scan --duration: a value is either read into 1 ns ... 366 days, or refused
    the project's way; nothing is measured either way (--cpus 8191 ends a valid one)."""
    from noisescope.errors import UsageError
    from noisescope.units import MAX_DURATION_NS, parse_positive_duration

    try:
        ns = parse_positive_duration(text, what="--duration")
    except UsageError:
        refuse(["scan", "--duration", text])
    else:
        assert 0 < ns <= MAX_DURATION_NS
        assert "CPU 8191" in refuse(["scan", "--duration", text, "--cpus", "8191"])


@GENERATED
@given(text=cpu_lists)
def test_any_bad_cpu_list_is_refused_without_expanding_it(refuse, text):
    refuse(["scan", "--cpus", text])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _paths(node, prefix=()):
    """Every place in a manifest: (path of keys/indices) pairs."""
    yield prefix
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else ()
    for key, child in items:
        yield from _paths(child, (*prefix, key))


@GENERATED
@given(data=st.data())
def test_any_manifest_damage_is_refused_or_harmless(inputs, tmp_path_factory, capsys, data):
    """One value anywhere in a scan's manifest replaced by any JSON value: `show`
    and `explain` either print it (exit 0) or refuse it in one line (exit 2)."""
    manifest = json.loads((inputs["SCAN"] / "manifest.json").read_text())
    places = [p for p in _paths(manifest) if p]
    place = data.draw(st.sampled_from(places))
    node = manifest
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = data.draw(json_values)
    bundle = tmp_path_factory.mktemp("mutated") / "b"
    shutil.copytree(inputs["SCAN"], bundle)
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    for command in ("show", "explain"):
        status = cli_main.main([command, str(bundle)])
        _, err = capsys.readouterr()
        assert status in (0, 2) and "Traceback" not in err, (place, err)
        if status == 2:
            assert len(err.splitlines()) == 1 and err.startswith("noisescope: error: "), err


# -- the real entry point ------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["scan", "--cpus", "0-999999999"], ["timerlat", "-l", "999999999999999"],
    ["show", ""], ["bench", "--shell", "--", ""], ["cluster", "scan", "--cpus", "8191", "-o", "f"],
])
def test_the_installed_command_refuses_the_same_way(tmp_path, argv):
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert_refused(done.returncode, done.stderr, tmp_path)


def test_a_damaged_table_is_refused_by_the_installed_command(inputs, tmp_path):
    bundle = tmp_path / "b"
    shutil.copytree(inputs["SCAN"], bundle)
    if not (bundle / "events.parquet").exists():
        pytest.skip("the scan was not traced (needs root and tracefs)")
    DAMAGE["a part of events.parquet is garbage"](bundle)
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run([*CLI, "show", str(bundle)], capture_output=True, text=True,
                          timeout=60, cwd=work)
    assert_refused(done.returncode, done.stderr, work)
    assert "events.parquet" in done.stderr
