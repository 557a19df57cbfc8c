"""The tracing plumbing that needs no root: tracefs helpers on fake trees,
buffer sizing, the trace clock, and the event spool (Parquet, read back by
CPU and time)."""

from __future__ import annotations

import os
import subprocess
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

import noisescope
from noisescope.bundle import Bundle
from noisescope.clock import MeasurementClock
from noisescope.errors import UsageError
from noisescope.tables import StoredTable, Table, parquet_parts
from noisescope.trace import attribute
from noisescope.trace.events import EVENT_COLUMNS, SWITCH_COLUMNS, TraceEvents
from noisescope.trace.session import MAX_BUFFER_KB, MIN_BUFFER_KB, TraceClock, buffer_kb_for
from noisescope.trace.store import EventSpool, PageBatch, RecordedEvents, time_span
from noisescope.trace.tracefs import (
    TracingUnavailable,
    leftover_instances,
    process_alive,
    tracefs_mounts,
)
from noisescope.units import cpumask_text, parse_size_kib

from .test_bundle import minimal_manifest
from .test_trace_events import CAPTURE, load_capture

CLOCK = MeasurementClock("tsc", 2e9, "kernel", None, origin_ticks=1000,
                         origin_monotonic_raw_ns=5_000, origin_realtime_ns=0)


@pytest.mark.parametrize("cpus, text", [
    ((0,), "1"), ((0, 1), "3"), ((1, 3), "a"), ((32,), "1,00000000"), ((0, 40, 63), "80000100,00000001"),
])
def test_cpumask_text(cpus, text):
    assert cpumask_text(cpus) == text


def test_tracefs_mount_points():
    mounts = ("sysfs /sys sysfs rw 0 0\nnodev /sys/kernel/tracing tracefs rw,relatime 0 0\n"
              "tracefs /sys/kernel/debug/tracing tracefs rw 0 0\n")
    assert [str(p) for p in tracefs_mounts(mounts)] == ["/sys/kernel/tracing",
                                                         "/sys/kernel/debug/tracing"]
    assert tracefs_mounts("proc /proc proc rw 0 0\n") == []


def test_a_killed_process_is_gone_even_before_it_is_reaped():
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while process_alive(child.pid) and time.monotonic() < deadline:  # a zombie until wait()
        time.sleep(0.01)
    assert not process_alive(child.pid)
    child.wait()
    assert not process_alive(child.pid)
    assert process_alive(os.getpid())


def test_leftovers_are_our_instances_of_gone_processes(tmp_path):
    child = subprocess.Popen(["true"])
    child.wait()
    for name in (f"noisescope-{child.pid}", f"noisescope-{os.getpid()}", f"noisescope-{os.getppid()}",
                 "noisescope-notapid", "rtla-osnoise", f"other-{child.pid}"):
        (tmp_path / "instances" / name).mkdir(parents=True)
    assert leftover_instances(tmp_path) == [f"noisescope-{child.pid}"]
    assert leftover_instances(tmp_path / "missing") == []


def test_buffer_size_follows_the_recording_and_the_memory():
    assert buffer_kb_for(1_000_000_000, 2, None) == MIN_BUFFER_KB
    ten_seconds = buffer_kb_for(10_000_000_000, 2, None)
    assert ten_seconds > MIN_BUFFER_KB and buffer_kb_for(60_000_000_000, 2, None) > ten_seconds
    assert buffer_kb_for(10**15, 2, None) == MAX_BUFFER_KB
    assert buffer_kb_for(60_000_000_000, 64, 8 * 1024 * 1024) <= 8 * 1024 * 1024 // 64


def test_trace_clock_choice_and_mapping():
    tsc = TraceClock.choose("[local] global counter uptime perf mono mono_raw boot x86-tsc", CLOCK)
    assert tsc.name == "x86-tsc"
    assert tsc.to_ns(np.array([1000 + 2_000_000], np.uint64)).tolist() == [1_000_000]
    raw = TraceClock.choose("[local] global mono_raw", CLOCK)
    assert raw.name == "mono_raw" and raw.to_ns(np.array([5_000 + 42], np.uint64)).tolist() == [42]
    with pytest.raises(TracingUnavailable):
        TraceClock.choose("[local] global", CLOCK)


@pytest.mark.parametrize("text, kib", [("64M", 65536), ("512K", 512), ("1G", 1048576),
                                       ("2048", 2048), ("1.5MiB", 1536)])
def test_parse_size(text, kib):
    assert parse_size_kib(text) == kib


@pytest.mark.parametrize("text", ["", "12 parsecs", "0", "-1M"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size_kib(text)


@pytest.fixture(scope="module")
def captured_trace():
    from noisescope.trace.events import Symbols, decode_raw

    formats, layout, pages, _, clock = load_capture()
    trace, _ = decode_raw(pages, formats, layout, TraceClock("x86-tsc", clock).to_ns,
                          Symbols(CAPTURE / "kallsyms"))
    return trace


def test_spooled_events_read_back_like_the_ones_in_memory(tmp_path, captured_trace):
    spool = EventSpool(tmp_path)
    events, switches = captured_trace.events, captured_trace.switches
    half = events.rows // 2  # two batches, two row groups
    spool.append(type(captured_trace)(events.filter(np.arange(events.rows) < half),
                                      switches.filter(np.arange(switches.rows) < switches.rows // 2)))
    spool.append(type(captured_trace)(events.filter(np.arange(events.rows) >= half),
                                      switches.filter(np.arange(switches.rows) >= switches.rows // 2)))
    stored = spool.finish()
    assert stored.event_names() == captured_trace.event_names()
    ts = events["timestamp_ns"]
    start, end = int(ts[events.rows // 4]), int(ts[3 * events.rows // 4])
    from_disk, in_memory = stored.read(1, start, end), captured_trace.read(1, start, end)
    for name in events.columns:
        assert np.array_equal(from_disk.events[name], in_memory.events[name]), name
    for name in switches.columns:
        assert np.array_equal(from_disk.switches[name], in_memory.switches[name]), name
    assert stored.read(7, start, end).events.rows == 0
    # each table a directory of parts: one a CPU (the two batches of one CPU in one part)
    cpus = sorted(set(events["cpu"].tolist()))
    for path, table in ((stored.events_path, events), (stored.switches_path, switches)):
        parts = parquet_parts(path)
        assert path.is_dir() and len(parts) == len(cpus)
        assert [pq.read_table(part)["cpu"].unique().to_pylist() for part in parts] == [
            [cpu] for cpu in cpus]
        assert sum(pq.read_metadata(part).num_rows for part in parts) == table.rows
        # every column required (no definition levels to encode)
        assert not any(field.nullable for part in parts for field in pq.read_schema(part))


def test_a_long_part_rolls_over_into_files_of_part_rows(tmp_path, monkeypatch, captured_trace):
    """A CPU's part of a spooled table is written in files of PART_ROWS rows
    or so (a writer's metadata per row group stays bounded however long the
    CPU was traced), named in order: read back, the same rows in the same
    order as one file; each file whole under its own name."""
    from noisescope.trace import store

    monkeypatch.setattr(store, "ROW_GROUP_ROWS", 100)
    monkeypatch.setattr(store, "PART_ROWS", 300)
    events = captured_trace.events
    one_cpu = events.filter(events["cpu"] == events["cpu"][0])
    spool = EventSpool(tmp_path)
    for first in range(0, one_cpu.rows, 70):  # batches of 70 events
        spool.append_table("events", one_cpu.filter(slice(first, first + 70)))
    stored = spool.finish()
    files = parquet_parts(stored.events_path)
    assert [f.name for f in files] == [f"000000-{k:04d}.parquet" for k in range(len(files))]
    # row groups of 140 (two batches reach 100); a file takes them until it holds 300 or more
    assert len(files) == -(-one_cpu.rows // 420) > 2
    assert [pq.read_metadata(f).num_rows for f in files[:-1]] == [420] * (len(files) - 1)
    assert pq.read_table(stored.events_path)["timestamp_ns"].to_pylist() == \
        one_cpu["timestamp_ns"].tolist()
    assert not list(stored.events_path.glob("*.partial"))


def test_a_null_in_a_spooled_event_column_fails_the_write(tmp_path, captured_trace):
    """The spool's columns are required: a batch with a missing value is
    refused (the spool's failure), never written as something else."""
    spool = EventSpool(tmp_path)
    spool.append(captured_trace)
    broken = captured_trace.events.filter(slice(0, 3))
    spool.append_table("events", Table({**broken, "name": np.array(["a", None, "b"], object)}))
    with pytest.raises(Exception, match="non-nullable"):
        spool.finish()


def test_attribution_is_the_same_from_disk_and_from_memory(tmp_path, captured_trace):
    import json

    spool = EventSpool(tmp_path)
    spool.append(captured_trace)
    run = json.loads((CAPTURE / "run.json").read_text())
    detours = Table({k: np.array(v) for k, v in run["detours"].items()})
    coverage = Table({k: np.array(v) for k, v in run["coverage"].items()})
    on_disk = attribute(detours, spool.finish(), coverage)
    in_memory = attribute(detours, captured_trace, coverage)
    for name in in_memory.causes.columns:
        assert np.array_equal(on_disk.causes[name], in_memory.causes[name])


def test_a_stop_while_the_spool_waits_for_its_writer_ends_the_wait_only_once_it_is_done(
        tmp_path, monkeypatch, captured_trace):
    """A Ctrl-C while finish() waits for the files' writer threads, one of
    them in the middle of a write: the caller hears of it only once both
    threads have written what was queued, so that giving the spool up
    (closing the files) cannot race the threads' writes."""
    import signal
    import threading

    from noisescope.trace.store import _Part

    write = _Part._write
    writes = {"begun": 0, "done": 0}  # by both files' threads
    writing, handled, release = threading.Event(), threading.Event(), threading.Event()

    def held_write(self, arrow):
        writes["begun"] += 1
        writing.set()
        release.wait()  # until the Ctrl-C has been handled
        write(self, arrow)
        writes["done"] += 1

    def on_sigint(signum, frame):
        handled.set()
        raise KeyboardInterrupt

    def ctrl_c_during_a_write():
        writing.wait()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        handled.wait()
        release.set()

    monkeypatch.setattr(_Part, "_write", held_write)
    spool = EventSpool(tmp_path)
    spool.append(captured_trace)
    previous = signal.signal(signal.SIGINT, on_sigint)
    helper = threading.Thread(target=ctrl_c_during_a_write)
    try:
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            spool.finish()
        at_the_stop = dict(writes)
    finally:
        release.set()
        helper.join()
        signal.signal(signal.SIGINT, previous)
    assert at_the_stop["begun"] == at_the_stop["done"] == 2  # both files written, none under way
    spool.discard()


def test_bundles_copy_stored_tables_in(tmp_path, captured_trace):
    (tmp_path / "spool").mkdir()
    spool = EventSpool(tmp_path / "spool")
    spool.append(captured_trace)
    source = spool.finish()
    stored = {"events": StoredTable(source.events_path, captured_trace.events.rows, list(EVENT_COLUMNS)),
              "sched_switch": StoredTable(source.switches_path, captured_trace.switches.rows,
                                          list(SWITCH_COLUMNS))}
    assert stored["events"].load().rows == captured_trace.events.rows  # readable before writing
    bundle = Bundle(minimal_manifest(), {**stored, "small": Table({"x": [1, 2]})})
    written = noisescope.load(bundle.write(tmp_path / "b"))
    assert stored["events"].path.exists()  # copied, not taken: the scan removes its spool
    assert written.manifest["tables"]["events"]["rows"] == captured_trace.events.rows
    assert written.sched_switch["next_comm"].tolist() == captured_trace.switches["next_comm"].tolist()
    assert written.events["event"].dtype == object  # dictionary-encoded on disk, strings here
    assert bundle.table("events").rows == captured_trace.events.rows  # now read from the bundle


def test_events_read_again_from_the_pages_are_the_spooled_ones(tmp_path, monkeypatch):
    """What a scan explains its detours from (the recordings' raw pages,
    decoded again a batch at a time) gives exactly what the spool of the
    same batches gives back, and the same attribution."""
    import json

    from noisescope.trace import session as session_module
    from noisescope.trace.events import Symbols
    from noisescope.trace.session import Recording, TraceSession

    formats, layout, pages, _, clock = load_capture()
    monkeypatch.setattr(session_module, "PAGES_PER_BATCH", 4)  # several batches per CPU
    session = TraceSession(tuple(pages), clock, symbols=Symbols(CAPTURE / "kallsyms"))
    session.formats, session.layout = formats, layout
    session.trace_clock = TraceClock("x86-tsc", clock)
    files = {}
    for cpu, data in pages.items():
        files[cpu] = tmp_path / f"cpu{cpu}.raw"
        files[cpu].write_bytes(data)
    recording = Recording(0, 2**62, {cpu: 0 for cpu in pages}, files)
    (tmp_path / "spool").mkdir()
    spool = EventSpool(tmp_path / "spool")
    capture = session.decode(recording, spool.append)
    spooled, recorded = spool.finish(), session.recorded_events([capture])
    assert len(capture.batches) >= 10 and capture.event_names == spooled.event_names()
    assert recorded.event_names() == spooled.event_names()

    everything = spooled.read(1, 0, 2**62)
    ts = np.sort(everything.events["timestamp_ns"])
    for start, end in [(0, 2**62), (int(ts[10]), int(ts[20])), (int(ts[100]), int(ts[-100])),
                       (int(ts[-1]) + 1, 2**62)]:
        again, back = recorded.read(1, start, end), spooled.read(1, start, end)
        for got, want in ((again.events, back.events), (again.switches, back.switches)):
            assert got.columns == want.columns
            for name in want.columns:
                assert got[name].dtype == want[name].dtype, name
                assert np.array_equal(got[name], want[name]), name
    assert recorded.read(7, 0, 2**62).events.rows == 0

    run = json.loads((CAPTURE / "run.json").read_text())
    detours = Table({k: np.array(v) for k, v in run["detours"].items()})
    coverage = Table({k: np.array(v) for k, v in run["coverage"].items()})
    from_pages, from_spool = attribute(detours, recorded, coverage), attribute(detours, spooled, coverage)
    for name in from_spool.causes.columns:
        assert np.array_equal(from_pages.causes[name], from_spool.causes[name]), name
    for name in from_spool.primary.columns:
        assert np.array_equal(from_pages.primary[name], from_spool.primary[name]), name


def test_consecutive_reads_decode_a_shared_batch_once(tmp_path):
    """A CPU's spans are explained in time order: a batch of pages that two
    consecutive reads need is decoded once, and what each read gets is the same."""

    decoded = []

    class Decoder:  # one event per batch, at the batch's first time
        def decode(self, cpu, pages):
            decoded.append(pages)
            first = int(pages.decode())
            return TraceEvents(Table({"cpu": np.array([cpu], np.int32),
                                      "timestamp_ns": np.array([first], np.int64),
                                      "event": np.array(["e"], object),
                                      "pid": np.array([1], np.int32),
                                      "number": np.array([0], np.int64),
                                      "name": np.array([""], object)}),
                               TraceEvents.empty().switches)

    raw = tmp_path / "cpu0.raw"
    raw.write_bytes(b"100200300")
    batches = [PageBatch(0, raw, 3 * i, 3, 100 * (i + 1), 100 * (i + 1) + 50) for i in range(3)]
    recorded = RecordedEvents(Decoder(), batches, {"e"})
    reads = [(100, 200), (200, 300), (300, 350), (100, 350)]  # batches 0-1, 1-2, 2, 0-2
    got = [recorded.read(0, start, end).events["timestamp_ns"].tolist() for start, end in reads]
    assert got == [[100, 200], [200, 300], [300], [100, 200, 300]]
    assert decoded == [b"100", b"200", b"300", b"100", b"200"]  # 1 and 2 kept, then needed again


def test_events_streamed_while_decoded_are_those_read_again(tmp_path, monkeypatch):
    """StreamedEvents (a CPU's batches as the first pass decodes them) gives
    what RecordedEvents gives, for reads whose starts never move back, lets
    the batches before a read's start go, and pulls no batch before a read
    needs it."""
    from noisescope.trace import session as session_module
    from noisescope.trace.events import RawDecoder, Symbols
    from noisescope.trace.store import StreamedEvents

    formats, layout, pages, _, clock = load_capture()
    monkeypatch.setattr(session_module, "PAGES_PER_BATCH", 4)
    [(cpu, data)] = pages.items()
    raw = tmp_path / "cpu.raw"
    raw.write_bytes(data)
    decoder = RawDecoder(formats, layout, TraceClock("x86-tsc", clock).to_ns,
                         Symbols(CAPTURE / "kallsyms"))
    step = 4 * layout.page_size
    decoded = [decoder.decode(cpu, data[k:k + step]) for k in range(0, len(data), step)]
    recorded = RecordedEvents(decoder, [PageBatch(cpu, raw, k, step, first, last) for k, batch in
                                        zip(range(0, len(data), step), decoded, strict=True)
                                        if (span := time_span(batch)) for first, last in [span]],
                              set())
    pulled = []

    def batches():
        for batch in decoded:
            pulled.append(batch)
            yield batch

    streamed = StreamedEvents(cpu, batches(), {"sched_switch"})
    ts = np.sort(np.concatenate([b.events["timestamp_ns"] for b in decoded]))
    reads = [(int(ts[0]), int(ts[50])), (int(ts[40]), int(ts[400])), (int(ts[400]), int(ts[400])),
             (int(ts[1000]), int(ts[3000])), (int(ts[3000]), int(ts[-1]) + 1)]
    for start, end in reads:
        got, want = streamed.read(cpu, start, end), recorded.read(cpu, start, end)
        for a, b in ((got.events, want.events), (got.switches, want.switches)):
            for name in b.columns:
                assert np.array_equal(a[name], b[name]), name
        # pulled only until it held a batch that begins after the read's end; let go only what
        # ended before its start
        assert len(pulled) < 2 or time_span(pulled[-2])[0] <= end
        assert streamed._held[0][1] >= start
    assert len(pulled) == len(decoded) and len(streamed._held) < len(decoded) / 2
    assert streamed.event_names() == {"sched_switch"}
    with pytest.raises(ValueError, match="CPU"):
        streamed.read(cpu + 1, 0, 1)


def test_a_stream_that_goes_back_in_time_says_so_rather_than_read_less(tmp_path):
    """Where a CPU's reads or its decoded batches go back in time (a clock that
    stepped back), what the stream let go may be needed: OutOfOrder, never
    fewer events. Batches that meet at one time follow one another."""
    from noisescope.trace.events import RawDecoder, Symbols
    from noisescope.trace.store import OutOfOrder, StreamedEvents

    formats, layout, pages, _, clock = load_capture()
    [(cpu, data)] = pages.items()
    decoder = RawDecoder(formats, layout, TraceClock("x86-tsc", clock).to_ns,
                         Symbols(CAPTURE / "kallsyms"))
    step = 4 * layout.page_size
    decoded = [decoder.decode(cpu, data[k:k + step]) for k in range(0, len(data), step)]
    spans = [time_span(batch) for batch in decoded]
    assert len(decoded) > 4 and all(a[1] <= b[0] for a, b in zip(spans[:-1], spans[1:], strict=True))
    mid = spans[3][0]

    streamed = StreamedEvents(cpu, iter(decoded), set())
    assert streamed.read(cpu, mid, mid).events.rows + streamed.read(cpu, mid, mid).switches.rows
    with pytest.raises(OutOfOrder, match=f"CPU {cpu}"):  # batches 0-2 were let go
        streamed.read(cpu, spans[1][0], spans[1][1])

    stepped_back = decoded[:2] + [decoded[0]] + decoded[2:]  # the third batch earlier
    streamed = StreamedEvents(cpu, iter(stepped_back), set())
    streamed.read(cpu, spans[0][0], spans[0][1])
    with pytest.raises(OutOfOrder, match="decoded after"):
        streamed.read(cpu, spans[1][0], spans[2][1])

    t = spans[0][1]  # a batch of only the first batch's last moment: it follows it
    again = TraceEvents(decoded[0].events.filter(decoded[0].events["timestamp_ns"] == t),
                        decoded[0].switches.filter(decoded[0].switches["timestamp_ns"] == t), True)
    batches = [decoded[0], again, decoded[1]]
    streamed = StreamedEvents(cpu, iter(batches), set())
    got = streamed.read(cpu, t, t)
    assert got.events.rows + got.switches.rows == sum(
        (b.events["timestamp_ns"] == t).sum() + (b.switches["timestamp_ns"] == t).sum()
        for b in batches) >= 2


def _two_recordings(tmp_path, monkeypatch):
    """A session over the captured raw pages, and two recordings of them."""
    from noisescope.trace import session as session_module
    from noisescope.trace.events import Symbols
    from noisescope.trace.session import Recording, TraceSession

    formats, layout, pages, _, clock = load_capture()
    monkeypatch.setattr(session_module, "PAGES_PER_BATCH", 4)  # several batches per CPU
    session = TraceSession(tuple(pages), clock, symbols=Symbols(CAPTURE / "kallsyms"))
    session.formats, session.layout = formats, layout
    session.trace_clock = TraceClock("x86-tsc", clock)
    recordings = []
    for name in ("first", "second"):
        files = {}
        for cpu, data in pages.items():
            files[cpu] = tmp_path / f"{name}.cpu{cpu}.raw"
            files[cpu].write_bytes(data)
        recordings.append((name, Recording(0, 2**62, {cpu: 0 for cpu in pages}, files)))
    return session, recordings


@pytest.mark.parametrize("trouble", [None, "stop", "disk full"])
def test_a_scan_spools_its_events_in_the_first_pass_and_never_half_a_recording(
        tmp_path, monkeypatch, trouble):
    """A scan with a bundle writes the events to Parquet while it first decodes
    them. A stop in the middle of a recording leaves none of its events in the
    tables, which then hold exactly the recordings decoded whole; a write that
    fails (a full disk) ends nothing. Either way the events are spooled again
    when the bundle needs them."""
    import errno

    from noisescope import interrupts
    from noisescope.trace.scanning import ScanTracing, TraceOptions
    from noisescope.trace.store import _Part

    stop_in_second = trouble == "stop"
    if trouble == "disk full":
        write, failures = _Part._write, [OSError(errno.ENOSPC, "No space left on device")]

        def failing_write(self, *args):
            if failures:
                raise failures.pop()
            return write(self, *args)

        monkeypatch.setattr(_Part, "_write", failing_write)

    session, recordings = _two_recordings(tmp_path, monkeypatch)
    workdir = tmp_path / "work"
    workdir.mkdir()
    tracing = ScanTracing(TraceOptions(), session, workdir=workdir, spooling=True,
                          recordings=recordings)
    whole = session.decode(recordings[0][1])
    decode = session.decode

    def stopping_decode(recording, sink=None, read_along=None):
        if recording is recordings[1][1] and stop_in_second:
            def stop_after_one(batch):
                sink(batch)
                raise KeyboardInterrupt  # a Ctrl-C after the first batch went to the spool
            return decode(recording, stop_after_one, read_along)
        return decode(recording, sink, read_along)

    monkeypatch.setattr(session, "decode", stopping_decode)
    stage = interrupts.Stage()
    tracing._decode(stage)
    stored = tracing._stored_events()
    assert [p for p, _ in tracing.captures] == (["first"] if stop_in_second else ["first", "second"])
    # written whole in the first pass, or not at all
    assert stored["events"].is_ready == (trouble is None)
    assert not list(workdir.glob("*.partial"))
    recorded = len(tracing.captures)
    for name, rows in (("events", whole.event_count), ("sched_switch", whole.switch_count)):
        assert rows > 0 and stored[name].rows == recorded * rows
        assert sum(pq.read_metadata(part).num_rows
                   for part in parquet_parts(stored[name].ready())) == recorded * rows


def test_what_covers_a_range_is_found_by_bisection_as_by_looking_at_each():
    """_Overlaps (the batches of pages, the row groups of one CPU) finds exactly
    what a look at every range finds, in their order, also for ranges out of
    order and overlapping (a long batch beside short ones)."""
    from noisescope.trace.store import _Overlaps

    rng = np.random.default_rng(7)
    for _ in range(300):
        firsts = np.sort(rng.integers(0, 1000, rng.integers(0, 30)))
        ranges = [(int(f), int(f + rng.integers(0, 200 if rng.random() < 0.9 else 900)))
                  for f in firsts]
        if len(ranges) > 3 and rng.random() < 0.3:  # not in order of their firsts
            ranges[1], ranges[2] = ranges[2], ranges[1]
        overlaps = _Overlaps(ranges)
        for start in rng.integers(-50, 1300, 8).tolist():
            end = start + int(rng.integers(0, 300))
            expected = [i for i, (first, last) in enumerate(ranges) if first <= end and last >= start]
            assert overlaps.find(start, end) == expected
