"""Parts of an analysis in worker processes: the results are those of one
process, errors and stops reach the parent, and no worker outlives it."""

from __future__ import annotations

import importlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from noisescope.tables import ParkedParts, SpooledTable, Table
from noisescope.trace import scanning
from noisescope.trace.attribute import attribute
from noisescope.trace.events import Symbols
from noisescope.trace.explain import WORST_PER_CPU, attribution_summary
from noisescope.trace.session import Recording, TraceClock, TraceSession
from noisescope.trace.tracefs import process_alive
from noisescope.workers import run_parts, worker_count

from .test_trace_events import CAPTURE, load_capture

# the module (noisescope.trace.attribute is also the name of its function)
attribute_module = importlib.import_module("noisescope.trace.attribute")


def test_parts_run_in_other_processes_and_come_back_in_order():
    parent = os.getpid()
    results = run_parts(lambda part: (part * part, os.getpid()), list(range(12)), 3)
    assert [square for square, _ in results] == [p * p for p in range(12)]
    workers = {pid for _, pid in results}
    assert parent not in workers and 1 <= len(workers) <= 3
    assert all(not process_alive(pid) for pid in workers)
    # one worker, or one part: no process is started
    assert {pid for _, pid in run_parts(lambda part: (part, os.getpid()), [1, 2], 1)} == {parent}
    assert run_parts(lambda part: os.getpid(), [7], 4) == [parent]


def test_the_worker_count_is_bounded_by_parts_cpus_and_the_limit():
    cpus = len(os.sched_getaffinity(0))
    assert worker_count(1) == 1
    assert 1 <= worker_count(1_000) <= cpus
    assert worker_count(1_000, limit=1) == 1
    assert worker_count(0) == 1


class Broken(Exception):
    pass


def _fail_on_three(part: int) -> int:
    if part == 3:
        raise Broken(f"part {part}")
    time.sleep(0.05)
    return part


def test_a_workers_error_reaches_the_parent_as_itself():
    with pytest.raises(Broken, match="part 3"):
        run_parts(_fail_on_three, list(range(8)), 2)


def test_the_parts_of_a_killed_worker_are_done_by_the_parent():
    parent = os.getpid()

    def dies_on_two(part: int) -> tuple[int, int]:
        if part == 2 and os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
        return part, os.getpid()

    results = run_parts(dies_on_two, list(range(6)), 2)
    assert [part for part, _ in results] == list(range(6))
    assert results[2][1] == parent  # with whatever else the killed one had taken
    workers = {pid for _, pid in results} - {parent}
    assert len(workers) == 1  # the other worker's parts are its own


def test_a_worker_takes_the_next_part_when_it_is_done_with_one():
    """Parts are not dealt out in fixed shares: while one worker is busy with
    a long part, the other does all the short ones."""
    def timed(part: int) -> tuple[int, int]:
        time.sleep(1.0 if part == 0 else 0.01)
        return part, os.getpid()

    results = run_parts(timed, list(range(10)), 2)
    assert [part for part, _ in results] == list(range(10))
    long_one = results[0][1]
    assert {pid for part, pid in results[1:]} == {pid for _, pid in results} - {long_one}


STOPPED_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from noisescope import interrupts
    from noisescope.workers import run_parts

    directory = Path(sys.argv[1])

    def slow(part):
        (directory / f"worker-{os.getpid()}").touch()
        time.sleep(60)
        return part

    with interrupts.keeping():
        stage = interrupts.Stage()
        result = stage.run("the parts", lambda: run_parts(slow, list(range(6)), 2))
        print("cut short:", stage.cut_short, "result:", result, flush=True)
""")


def test_a_stop_ends_the_workers_and_the_parent_keeps_going(tmp_path):
    """A Ctrl-C reaches the whole process group: the workers ignore it, the
    parent stops the step (Stage) and ends them, then goes on."""
    script = tmp_path / "stopped.py"
    script.write_text(STOPPED_SCRIPT)
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob("worker-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = [int(p.name.split("-")[1]) for p in tmp_path.glob("worker-*")]
    assert len(workers) == 2, "the workers did not start"
    os.killpg(child.pid, signal.SIGINT)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert "cut short: the parts result: None" in out
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while any(process_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(process_alive(pid) for pid in workers)


@pytest.mark.parametrize("killed", [False, True])
def test_cpus_explained_side_by_side_are_explained_as_all_at_once(tmp_path, monkeypatch, killed):
    """Four CPUs' detours attributed in 1 and in 3 processes, in parts of about
    80 detours cut where chunks of 10 ms end, and all at once in one call:
    the same tables, row for row (each CPU numbers its causes itself in a
    worker; the order of a detour's causes is that of the causes, not of their
    numbering). Killed: the worker of CPU 2 dies after parking two parts, and
    the scan's own process explains that CPU again."""
    monkeypatch.setattr(scanning, "ATTRIBUTED_ROWS", 80)
    monkeypatch.setattr(attribute_module, "CHUNK_NS", 10_000_000)
    if killed:
        append, parent = ParkedParts.append, os.getpid()

        def dying_append(parts, table):
            append(parts, table)
            if (os.getpid() != parent and (parts.path.parent.name, parts.path.name, len(parts))
                    == ("cpu2", "causes", 2)):
                (tmp_path / f"killed-{os.getpid()}").touch()
                os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would

        monkeypatch.setattr(ParkedParts, "append", dying_append)
    session, recording = _four_cpu_recording(tmp_path)
    capture = session.decode(recording)
    trace = session.recorded_events([capture])
    spooled, detours = _quarters_of_the_captured_detours(tmp_path, tuple(recording.pages))
    results = []
    for workers in (1, 3):
        annotated, causes = scanning.attribute_in_batches(
            spooled, trace, capture.coverage, None, tmp_path / f"attributed-{workers}", workers)
        results.append((annotated.load(), causes.load()))
    assert len(list(tmp_path.glob("killed-*"))) == (1 if killed else 0)  # with 3 workers
    assert _parts_in(tmp_path / "attributed-1" / "cpu2" / "causes") >= 3
    at_once = attribute(Table.concat(list(detours.values())), trace, capture.coverage)
    expected = (at_once.annotate(Table.concat(list(detours.values()))), at_once.causes)
    assert expected[1].rows > 2 * expected[0].rows  # detours of several causes
    assert len(set(expected[1]["detail"].tolist())) > 5
    for annotated, causes in results:
        for got, want in zip((annotated, causes), expected, strict=True):
            assert got.columns == want.columns
            for name in want.columns:
                assert np.array_equal(got[name], want[name]), name


def _parts_in(path) -> int:
    """How many tables ParkedParts parked in a file."""
    count = 0
    with open(path, "rb") as parked:
        while parked.peek(1):
            pickle.load(parked)
            count += 1
    return count


def test_a_chunk_of_more_detours_than_a_part_holds_is_explained_alone(tmp_path, monkeypatch):
    """Where a chunk holds more detours than ATTRIBUTED_ROWS (a high detour
    rate), the part ends with that chunk: parts stay about a chunk long, never
    the CPU's whole run in one (its memory grew with the run's length)."""
    monkeypatch.setattr(scanning, "ATTRIBUTED_ROWS", 20)
    monkeypatch.setattr(attribute_module, "CHUNK_NS", 10_000_000)  # 50-80 detours a chunk
    session, recording = _four_cpu_recording(tmp_path)
    capture = session.decode(recording)
    spooled, detours = _quarters_of_the_captured_detours(tmp_path, tuple(recording.pages))
    mine, _ = scanning._attribute_cpu(1, spooled, session.recorded_events([capture]),
                                      capture.coverage, None, tmp_path / "parts")
    rows = [part.rows for part in mine.tables()]
    starts = detours[1]["start_ns"]
    biggest_chunk = np.bincount((starts - starts[0]) // 10_000_000).max()
    assert sum(rows) == detours[1].rows and len(rows) >= 3
    assert scanning.ATTRIBUTED_ROWS < max(rows) <= biggest_chunk < detours[1].rows / 2
    at_once = attribute(detours[1], session.recorded_events([capture]), capture.coverage)
    in_parts = Table.concat(list(mine.tables()))
    for name in at_once.annotate(detours[1]).columns:  # what one call on them all gives
        assert np.array_equal(in_parts[name], at_once.annotate(detours[1])[name]), name


def _quarters_of_the_captured_detours(tmp_path, cpus, stepped_back=()):
    """A quarter of the captured run's detours on each CPU, the last on CPU 0 (each
    CPU meets the causes in another order than all CPUs together do), spooled in
    two batches a CPU (the later one first on the CPUs `stepped_back`, as a clock
    that stepped back would leave them); and the same as tables."""
    run = json.loads((CAPTURE / "run.json").read_text())
    starts, durations = (np.array(run["detours"][c], np.int64) for c in ("start_ns", "duration_ns"))
    detours = {}
    for cpu, chosen in zip(cpus, reversed(np.array_split(np.arange(len(starts)), len(cpus))),
                           strict=True):
        detours[cpu] = Table({"cpu": np.full(len(chosen), cpu, np.int32),
                              "start_ns": starts[chosen], "duration_ns": durations[chosen]})
    empty = detours[cpus[0]].filter(slice(0, 0))
    spooled = SpooledTable.of(tmp_path / "detours.parquet", empty, [
        (cpu, table.rows, lambda table=table, back=cpu in stepped_back: iter(
            [table.filter(slice(0, 120)), table.filter(slice(120, None))][::-1 if back else 1]))
        for cpu, table in detours.items()])
    return spooled, detours


def _four_cpu_recording(tmp_path):
    """A session of four CPUs that each recorded the captured CPU's pages, and
    that recording."""
    formats, layout, pages, _, clock = load_capture()
    [data] = pages.values()
    cpus = (0, 1, 2, 3)
    session = TraceSession(cpus, clock, symbols=Symbols(CAPTURE / "kallsyms"))
    session.formats, session.layout = formats, layout
    session.trace_clock = TraceClock("x86-tsc", clock)
    files = {}
    for cpu in cpus:  # the captured CPU's pages, as if every CPU had recorded them
        files[cpu] = tmp_path / f"rec.cpu{cpu}.raw"
        files[cpu].write_bytes(data)
    return session, Recording(0, 2**62, {cpu: 0 for cpu in cpus}, files)


def _in_batches_of_4_pages(monkeypatch) -> None:
    """Several batches of pages per CPU of the captured buffer."""
    from noisescope.trace import session as session_module

    monkeypatch.setattr(session_module, "PAGES_PER_BATCH", 4)


@pytest.mark.parametrize("killed", [False, True])
def test_cpus_decoded_side_by_side_spool_what_one_process_spools(tmp_path, monkeypatch, killed):
    """The first decoding pass with its CPUs in 2 and 3 worker processes, each
    writing its CPUs' parts of the spool's tables: the parts hold what one
    process decoding every CPU in turn writes, part for part, row for row and
    row group for row group, and the recording's tally (counts, batches of
    pages, names, coverage) is the same. Killed: the worker of CPU 2 dies once
    that CPU's parts are written, and the scan's own process decodes it again
    (its events are spooled once)."""
    import pyarrow.parquet as pq

    from noisescope.tables import parquet_parts
    from noisescope.trace.store import CpuParts, EventSpool

    if killed:
        close, parent = CpuParts.close, os.getpid()

        def dying_close(self):
            close(self)
            if os.getpid() != parent and self._parts["events"].stem.name == "000002":
                (tmp_path / f"killed-{os.getpid()}").touch()
                os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would

        monkeypatch.setattr(CpuParts, "close", dying_close)
    _in_batches_of_4_pages(monkeypatch)
    session, recording = _four_cpu_recording(tmp_path)
    results = {}
    for workers in (1, 2, 3):
        spool = EventSpool(tmp_path / f"spool-{workers}")
        spool.directory.mkdir()
        if workers == 1:
            capture = session.decode(recording, spool.append)
        else:
            capture, failure = session.decode_side_by_side(
                recording, spool.reserve_parts(len(recording.pages)), workers)
            assert failure is None
        source = spool.finish()
        parts = [[pq.ParquetFile(part) for part in parquet_parts(path)]
                 for path in (source.events_path, source.switches_path)]
        results[workers] = (
            [[f.read().to_pydict() for f in files] for files in parts],
            [[[f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)]
              for f in files] for files in parts],
            (capture.event_count, capture.switch_count, capture.missed_pages,
             sorted(capture.event_names), [(b.cpu, b.offset, b.size, b.first_ns, b.last_ns)
                                           for b in capture.batches],
             {name: capture.coverage[name].tolist() for name in capture.coverage.columns}))
    assert len(list(tmp_path.glob("killed-*"))) == (2 if killed else 0)  # one per run
    (events, switches), _, (event_count, switch_count, *_) = results[1]
    assert [part["cpu"][0] for part in events] == [0, 1, 2, 3]  # a part a CPU, in order
    assert sum(len(part["cpu"]) for part in events) == event_count > 4000
    assert sum(len(part["cpu"]) for part in switches) == switch_count
    assert len({b[0] for b in results[1][2][4]}) == 4 and len(results[1][2][4]) > 8
    assert results[2] == results[1] and results[3] == results[1]


def test_a_worker_that_cannot_write_its_parts_decodes_on_and_the_spool_is_given_up(
        tmp_path, monkeypatch):
    """A write error in a worker (a full disk) ends neither the decoding nor
    the other workers: the recording is counted whole, the error comes back,
    its parts are gone, and the scan gives the spool up (it spools the events
    again when the bundle needs them)."""
    import errno

    from noisescope.trace.store import EventSpool, _Part

    write = _Part._write

    def full_for_cpu_1(self, arrow):
        if self.stem.name == "000001":
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(self, arrow)

    monkeypatch.setattr(_Part, "_write", full_for_cpu_1)
    _in_batches_of_4_pages(monkeypatch)
    session, recording = _four_cpu_recording(tmp_path)
    whole = session.decode(recording)
    spool = EventSpool(tmp_path / "spool")
    spool.directory.mkdir()
    capture, failure = session.decode_side_by_side(recording, spool.reserve_parts(4), 2)
    assert isinstance(failure, OSError) and failure.errno == errno.ENOSPC
    assert (capture.event_count, capture.switch_count) == (whole.event_count, whole.switch_count)
    written = sorted(p.name for p in (tmp_path / "spool" / "events.parquet.partial").iterdir())
    assert written == ["000000-0000.parquet", "000002-0000.parquet", "000003-0000.parquet"]
    # (none half-made)
    spool.discard()
    assert not list((tmp_path / "spool").iterdir())


@pytest.mark.parametrize("workers,killed,stepped_back", [
    (1, False, ()), (3, False, ()), (3, True, ()), (1, False, (1,)), (3, False, (1,))])
def test_detours_explained_while_the_pages_are_decoded_are_those_explained_afterwards(
        tmp_path, monkeypatch, workers, killed, stepped_back):
    """The first decoding pass explains each CPU's detours as it decodes the
    CPU's pages (`_ExplainAlong`), in one process and with its CPUs in 3
    workers, in batches of 4 pages, parts of 80 detours and chunks of 10 ms:
    the same tables, row for row, as attribute_in_batches makes from the pages
    decoded again, and each batch of pages is decoded once. Killed: the worker
    of CPU 2 dies once that CPU is explained; the scan's own process decodes and
    explains it again. Stepped back: CPU 1's later detours come first, so the
    stream would have let go of the events its earlier ones need: that CPU is
    explained from its pages read again (and only that one)."""
    from noisescope.trace.events import RawDecoder
    from noisescope.trace.store import EventSpool

    monkeypatch.setattr(scanning, "ATTRIBUTED_ROWS", 80)
    monkeypatch.setattr(attribute_module, "CHUNK_NS", 10_000_000)
    _in_batches_of_4_pages(monkeypatch)
    session, recording = _four_cpu_recording(tmp_path)
    spooled, detours = _quarters_of_the_captured_detours(tmp_path, tuple(recording.pages),
                                                         stepped_back)
    along = scanning._ExplainAlong(spooled, None, set(session.formats), tmp_path / "along")
    attribute_cpu, sources = scanning._attribute_cpu, tmp_path / "sources"

    def noted_attribute_cpu(cpu, detours, trace, *rest):
        with open(sources, "a") as out:  # (from the workers too)
            out.write(f"{cpu}:{type(trace).__name__}\n")
        return attribute_cpu(cpu, detours, trace, *rest)

    monkeypatch.setattr(scanning, "_attribute_cpu", noted_attribute_cpu)
    assert along.reads("detour", recording) and not along.reads("ftq", recording)
    if killed:
        explain, parent = scanning._ExplainAlong.__call__, os.getpid()

        def dying_explain(self, cpu, batches, again):
            explained = explain(self, cpu, batches, again)
            if os.getpid() != parent and cpu == 2:
                (tmp_path / f"killed-{os.getpid()}").touch()
                os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
            return explained

        monkeypatch.setattr(scanning._ExplainAlong, "__call__", dying_explain)
    decode, decoded = RawDecoder.decode, tmp_path / "decoded"

    def counted_decode(self, cpu, pages):
        with open(decoded, "a") as out:  # (from the workers too)
            out.write(f"{cpu}\n")
        return decode(self, cpu, pages)

    monkeypatch.setattr(RawDecoder, "decode", counted_decode)
    spool = EventSpool(tmp_path / "spool")
    spool.directory.mkdir()
    if workers == 1:
        capture = session.decode(recording, spool.append, along)
    else:
        capture, _ = session.decode_side_by_side(recording, spool.reserve_parts(4), workers, along)
    spool.finish()
    assert len(list(tmp_path.glob("killed-*"))) == (1 if killed else 0)
    for cpu in recording.pages:
        noted = [line.split(":")[1] for line in sources.read_text().split() if
                 line.startswith(f"{cpu}:")]
        assert set(noted) == ({"StreamedEvents", "RecordedEvents"} if cpu in stepped_back
                              else {"StreamedEvents"})
    calls = decoded.read_text().split()
    worst = 2 * WORST_PER_CPU  # the batches that hold the worst detours, read for their events
    for cpu in recording.pages:  # once per batch of pages (the killed worker's CPU: what the
        # worker decoded before it died, and all of it again in the parent)
        batches = sum(b.cpu == cpu for b in capture.batches)
        if (killed and cpu == 2) or cpu in stepped_back:
            assert batches < calls.count(str(cpu)) < 2 * batches + worst
        else:
            assert batches <= calls.count(str(cpu)) <= batches + worst
    trace = session.recorded_events([capture])
    got = scanning.spooled_attribution(spooled, trace, capture.coverage, {
        cpu: (mine, causes) for cpu, (mine, causes, _) in capture.read_along.items()},
        along.directory)
    decoded.unlink()
    want = scanning.attribute_in_batches(spooled, trace, capture.coverage, None,
                                         tmp_path / "afterwards", 1)
    assert decoded.read_text().split()  # there, the pages that hold detours are decoded again
    annotated, causes = want[0].load(), want[1].load()
    assert annotated.rows == sum(t.rows for t in detours.values()) and causes.rows > 2 * annotated.rows
    for table_got, table_want in zip(got, (annotated, causes), strict=True):
        table_got = table_got.load()
        assert table_got.columns == table_want.columns
        for name in table_want.columns:
            assert np.array_equal(table_got[name], table_want[name]), name
    # and each CPU's summary row, made in its worker, is the one made of all CPUs afterwards
    summaries = attribution_summary(*want, trace)
    assert [capture.read_along[row["cpu"]][2] for row in summaries] == summaries
    assert all(row["worst"] and row["worst"][0]["chain"] for row in summaries)


@pytest.mark.parametrize("how", ["one process", "workers", "twice"])
def test_a_stop_while_the_first_pass_explains_keeps_the_events_and_leaves_the_causes_out(
        tmp_path, monkeypatch, how):
    """A Ctrl-C while the first decoding pass explains the detours (in one
    process: as CPU 2 is explained; with 3 workers: while the scan's process
    waits for them) stops the explaining as a stop after the pass would: the
    bundle keeps every event of the recording, its detours go unexplained, and
    the stage names what was cut short. Twice (the stage given up): the
    recording is left out."""
    from noisescope import interrupts
    from noisescope.trace import session as session_module
    from noisescope.trace.scanning import ScanTracing, TraceOptions

    session, recording = _four_cpu_recording(tmp_path)
    whole = session.decode(recording)
    spooled, _ = _quarters_of_the_captured_detours(tmp_path, tuple(recording.pages))
    stage = interrupts.Stage()
    if how == "workers":
        run_parts, calls = session_module.run_parts, []

        def stopped_run_parts(*args, **kwargs):
            calls.append(args)
            if len(calls) == 1:
                raise KeyboardInterrupt  # as a Ctrl-C while the workers run
            return run_parts(*args, **kwargs)

        monkeypatch.setattr(session_module, "run_parts", stopped_run_parts)
    else:
        explain = scanning._ExplainAlong.__call__

        def stopped_explain(self, cpu, batches, again):
            if cpu == 2:
                next(batches)
                if how == "twice":
                    stage.give_up()  # what a second signal does
                raise KeyboardInterrupt  # as a Ctrl-C in the middle of the CPU
            return explain(self, cpu, batches, again)

        monkeypatch.setattr(scanning._ExplainAlong, "__call__", stopped_explain)
    workdir = tmp_path / "work"
    workdir.mkdir()
    tracing = ScanTracing(TraceOptions(workers=3 if how == "workers" else 1), session,
                          workdir=workdir, spooling=True, recordings=[("detour", recording)])
    tables, summaries = {"detours": spooled}, {"detour": []}
    tracing.finish(tables, summaries, stage)
    assert "detour_causes" not in tables and "attribution" not in summaries
    assert tables["detours"] is spooled
    if how == "twice":
        assert stage.cut_short == "reading the trace" and tracing.incomplete
        assert tables["events"].rows == tables["sched_switch"].rows == 0
        return
    assert stage.cut_short == "explaining the detours" and not tracing.incomplete
    assert how != "workers" or len(calls) == 2  # counted again side by side
    for name, rows in (("events", whole.event_count), ("sched_switch", whole.switch_count)):
        assert rows > 1000 and tables[name].rows == rows
        assert tables[name].load().rows == rows  # spooled again, whole
    assert tables["trace_coverage"]["end_ns"].tolist() == [recording.end_ns] * 4
