"""Samples handed over while a probe runs: each sampler's ring is drained as
the run goes on, so a run stores every sample however small the ring, and a
drain that falls behind is counted, never silent."""

from __future__ import annotations

import errno
import importlib
import os
from pathlib import Path

import numpy as np
import pytest

from noisescope import _native, load
from noisescope.analysis.groundtruth import match_injections
from noisescope.clock import measurement_clock
from noisescope.diagnostics import Code
from noisescope.probes import detour as detour_probe
from noisescope.probes import native, spool
from noisescope.probes.base import ProbeContext
from noisescope.probes.injection import Injection
from noisescope.probes.quantum import FTQ, FWQ, QuantumSettings, ftq_capacity
from noisescope.probes.schedule import plan_windows
from noisescope.probes.summary import QUANTILES
from noisescope.probes.timerlat import TIMERLAT, TimerlatSettings
from noisescope.scan import ScanOptions, scan
from noisescope.tables import SpooledTable, Table
from noisescope.trace import event_source, scanning
from noisescope.units import SECOND

from ..helpers import RT

# the module (noisescope.trace.attribute is also the name of its function)
attribute_module = importlib.import_module("noisescope.trace.attribute")
THRESHOLD_NS = 2_000
RATE_HZ = 2_000.0  # injected detours: many times what the small ring holds


def test_the_drain_takes_pairs_in_order_across_the_ring_end():
    """A ring of 8 slots filled by hand as the sampler would: 5 pairs, then 6
    more that wrap around the end; the drain hands back all 11 in order and
    frees the slots as it goes."""
    spec = {"a": np.zeros(8, np.uint64), "b": np.zeros(8, np.uint64)}
    slots = np.zeros((1, _native.CONTROL_STRIDE), np.int64)
    drain = native._Drain(native.Ring("a", "b"), [spec], slots)

    def publish(values):
        for v in values:
            spec["a"][v % 8], spec["b"][v % 8] = v, 100 + v
        slots[0, _native.SLOT_PUBLISHED] = values[-1] + 1

    publish(range(5))
    drain.take()
    assert slots[0, _native.SLOT_TAKEN] == 5
    publish(range(5, 11))
    drain.take()
    assert slots[0, _native.SLOT_TAKEN] == 11
    # the sampler's counts: written, dropped, written before the first drop
    result = {"stored": 11, "overflow": 2, "stored_before_loss": 9}
    drain.hand_back([result])
    assert spec["a"].tolist() == list(range(11))
    assert spec["b"].tolist() == [100 + v for v in range(11)]
    assert result == {"stored": 11, "overflow": 2, "stored_before_loss": 9}


def test_a_limit_keeps_the_first_samples_and_counts_the_rest():
    spec = {"a": np.arange(8, dtype=np.uint64), "b": np.arange(8, dtype=np.uint64)}
    slots = np.zeros((1, _native.CONTROL_STRIDE), np.int64)
    slots[0, _native.SLOT_PUBLISHED] = 8
    drain = native._Drain(native.Ring("a", "b", limit=3), [spec], slots)
    drain.take()
    drain.take()
    # 8 written, then 5 more found the ring full
    result = {"stored": 8, "overflow": 5, "stored_before_loss": 8}
    drain.hand_back([result])
    assert spec["a"].tolist() == [0, 1, 2]
    assert result == {"stored": 3, "overflow": 10, "stored_before_loss": 3}


def probe_context(live_facts, duration_ns: int, injection: tuple[float, int] | None = None,
                  spool_dir=None) -> ProbeContext:
    """One CPU for `duration_ns`, with noise injected at (rate Hz, length ns) if given."""
    cpu = max(os.sched_getaffinity(0))
    schedule, _ = plan_windows(duration_ns, rt=False)
    injections = (Injection(cpu, *injection),) if injection else ()
    return ProbeContext((cpu,), schedule, measurement_clock(live_facts.tsc_flags),
                        priority=95 if RT else 0, injections=injections, spool_dir=spool_dir)


def run_with_injection(live_facts, duration_ns: int, spool_dir=None, rate_hz=RATE_HZ,
                       length_ns=20_000, **settings):
    ctx = probe_context(live_facts, duration_ns, (rate_hz, length_ns), spool_dir)
    return detour_probe.run(ctx, threshold_ns=THRESHOLD_NS, **settings)


def test_rings_are_sized_by_rate_and_bounded_only_by_what_a_probe_can_store():
    """A detour ring holds RING_SECONDS at the typical rate whatever the run's
    length (a 300 ms run once had 1,500 slots: a busy CI machine's detours,
    drained every 0.1 s, overflowed it); a probe on a schedule never gets more
    slots than it can store, nor a limited one more than its limit."""
    short, _ = plan_windows(SECOND * 3 // 10, rt=False)
    long, _ = plan_windows(60 * SECOND, rt=False)
    typical = detour_probe.DETOUR_RATE * native.RING_SECONDS
    settings = detour_probe.DetourSettings(THRESHOLD_NS)
    assert detour_probe.DETOUR.ring_size(settings, short, 1) == typical
    assert detour_probe.DETOUR.ring_size(settings, long, 1) == typical
    assert detour_probe.DETOUR.ring_size(settings, short, 4096) == native.MIN_RING
    limited = detour_probe.DetourSettings(THRESHOLD_NS, max_detours=100)
    assert detour_probe.DETOUR.ring_size(limited, long, 1) == 100
    assert FTQ.ring_size(QuantumSettings(1_000_000), short, 1) == ftq_capacity(short, 1_000_000) \
        < native.MIN_RING


def test_a_short_run_at_a_high_detour_rate_stores_every_detour(live_facts):
    """300 ms with 15,000 injections a second: 4,500 detours, three times what
    the ring of a 300 ms run held before it was sized by rate."""
    result = run_with_injection(live_facts, SECOND * 3 // 10, rate_hz=15_000.0, length_ns=3_000)
    [summary] = result.summaries
    assert summary["overflow"] == 0, result.diagnostics
    assert summary["stored"] == summary["detours"] == result.tables["detours"].rows
    assert summary["detours"] >= 0.9 * result.tables["injections"].rows >= 0.9 * 0.9 * 4_500


@pytest.fixture
def small_ring(monkeypatch):
    """Rings of 2,000 slots: a 4 s run at 2 kHz fills one four times over, and
    the drain (every 0.1 s) may be late by up to a second (with 1,000 slots, a
    busy machine made it lose a few now and then)."""
    monkeypatch.setattr(native, "MIN_RING", 2_000)
    monkeypatch.setattr(native, "RING_SECONDS", 0)
    return 2_000


def test_a_run_stores_every_detour_however_small_its_ring(live_facts, small_ring):
    result = run_with_injection(live_facts, 4 * SECOND)
    [summary] = result.summaries
    detours = result.tables["detours"]
    assert summary["overflow"] == 0, result.diagnostics
    assert summary["stored"] == summary["detours"] == detours.rows == summary["stored_before_loss"]
    assert detours.rows >= result.tables["injections"].rows >= 3 * small_ring
    assert np.all(np.diff(detours.start_ns) > 0)  # in order across every turn of the ring
    assert detours.duration_ns.min() >= THRESHOLD_NS


QUANTUM_NS = 250_000  # FTQ's quantum, FWQ's work and timerlat's interval: 4,000 a second


def run_probe(live_facts, probe, settings):
    """3 s of `probe` on one CPU: the result, its summary, its series, its windows."""
    result = probe.run(probe_context(live_facts, 3 * SECOND), settings)
    [summary] = result.summaries
    return result, summary, result.tables[probe.name], result.tables["windows"]


def test_ftq_stores_every_quantum_however_small_its_ring(live_facts, small_ring):
    """Every quantum of every window, each one quantum after the one before
    (a lost turn of the ring would leave a gap of 2,000), in a 3 s run whose
    12,000 quanta fill the ring six times."""
    result, summary, ftq, windows = run_probe(live_facts, FTQ, QuantumSettings(QUANTUM_NS))
    assert summary["overflow"] == 0 and summary["stored_before_loss"] == ftq.rows, \
        result.diagnostics
    # the quanta of the windows' scheduled run time (a window may end late, never early)
    quanta = plan_windows(3 * SECOND, rt=False)[0].measured_ns / QUANTUM_NS
    assert quanta - windows.rows <= ftq.rows <= quanta + windows.rows  # (ticks' rounding)
    assert ftq.rows >= 3 * small_ring
    steps = np.diff(ftq["start_ns"])
    window_of = np.searchsorted(windows["start_ns"], ftq["start_ns"], side="right")
    within = np.diff(window_of) == 0
    assert np.all(np.abs(steps[within] - QUANTUM_NS) <= 1)  # (ns rounding of ticks)


def test_fwq_stores_every_sample_however_small_its_ring(live_facts, small_ring):
    """The samples' work, back to back, covers the measured time: a turn of the
    ring lost would take 2,000 samples' time out of it, one stored twice would
    add it."""
    result, summary, fwq, windows = run_probe(live_facts, FWQ, QuantumSettings(QUANTUM_NS))
    assert summary["overflow"] == 0 and summary["stored_before_loss"] == fwq.rows, \
        result.diagnostics
    assert summary["samples"] == fwq.rows >= 3 * small_ring
    covered = fwq["duration_ns"].sum() / summary["measured_ns"]
    assert 0.99 <= covered <= 1.0
    assert np.all(np.diff(fwq["start_ns"]) > 0)


def test_timerlat_stores_every_wakeup_however_small_its_ring(live_facts, small_ring):
    """Every deadline of the measured time is a stored wakeup or counted as
    missed (overslept), each once: 12,000 in 3 s, six turns of the ring."""
    settings = TimerlatSettings(interval_ns=QUANTUM_NS)
    result, summary, series, windows = run_probe(live_facts, TIMERLAT, settings)
    assert summary["overflow"] == 0 and summary["stored"] == summary["samples"] == series.rows, \
        result.diagnostics
    assert series.rows >= 3 * small_ring
    deadlines = summary["measured_ns"] / QUANTUM_NS
    assert abs(summary["samples"] + summary["missed"] - deadlines) <= windows.rows
    assert np.all(np.diff(series["wakeup_ns"]) > 0)


def test_a_drain_that_falls_behind_is_counted_and_said(live_facts, small_ring, monkeypatch):
    monkeypatch.setattr(native, "DRAIN_INTERVAL_S", 3600.0)  # never during the run
    result = run_with_injection(live_facts, 2 * SECOND)
    [summary] = result.summaries
    # the ring's first fill, taken after the run, and nothing missing among it
    assert summary["stored"] == summary["stored_before_loss"] == small_ring
    assert summary["stored"] + summary["overflow"] == summary["detours"]
    assert summary["overflow"] >= result.tables["injections"].rows - small_ring
    [note] = [d for d in result.diagnostics if d.code is Code.BUFFER_OVERFLOW]
    assert f"{summary['overflow']} detours were counted but not stored" in note.message
    assert "fell behind" in note.message


def test_max_detours_stores_that_many_and_counts_the_rest(live_facts, small_ring):
    result = run_with_injection(live_facts, 2 * SECOND, max_detours=300)
    [summary] = result.summaries
    assert summary["stored"] == result.tables["detours"].rows == 300
    assert summary["stored"] + summary["overflow"] == summary["detours"]
    [note] = [d for d in result.diagnostics if d.code is Code.BUFFER_OVERFLOW]
    assert "beyond the limit of 300 per CPU" in note.message


# -- spooled to files (a scan that writes a bundle) -------------------------------------

def test_the_drain_spools_pairs_in_order_and_holds_none_of_them(tmp_path):
    """The ring of 8 slots of the first test, drained into a spool: the 11
    pairs are read back in order (in batches of 4), none is held in memory."""
    spec = {"a": np.zeros(8, np.uint64), "b": np.zeros(8, np.uint64)}
    slots = np.zeros((1, _native.CONTROL_STRIDE), np.int64)
    spooled = spool.SampleSpool(tmp_path / "spool", ("a", "b"), 1)
    drain = native._Drain(native.Ring("a", "b"), [spec], slots, spooled)
    for values in (range(5), range(5, 11)):  # the second wraps around the ring's end
        for v in values:
            spec["a"][v % 8], spec["b"][v % 8] = v, 100 + v
        slots[0, _native.SLOT_PUBLISHED] = values[-1] + 1
        drain.take()
        assert drain.parts == [[]]  # nothing kept in memory
    result = {"stored": 11, "overflow": 0, "stored_before_loss": 11}
    drain.hand_back([result])
    assert spec["a"] is None and spec["b"] is None  # the ring's memory is let go
    batches = list(spooled.batches(0, rows=4))
    assert [len(a) for a, _ in batches] == [4, 4, 3]
    assert np.concatenate([a for a, _ in batches]).tolist() == list(range(11))
    assert np.concatenate([b for _, b in batches]).tolist() == [100 + v for v in range(11)]
    assert spooled.rows == [11] and result["stored"] == 11


def disk_full_after(monkeypatch, writes: int) -> None:
    """The spool's disk fills on its `writes`+1-th write, which gets half its
    bytes on disk first (the kernel's short write before ENOSPC)."""
    write_all, done = spool._write_all, [0]

    def filling(out, data):
        done[0] += 1
        if done[0] > writes:
            out.write(data.cast("B")[:len(data.cast("B")) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_all(out, data)

    monkeypatch.setattr(spool, "_write_all", filling)


def test_a_full_disk_ends_the_spool_at_the_last_whole_batch_and_counts_the_rest(
        tmp_path, monkeypatch):
    """The ring of 8 slots drained into a spool whose disk fills on the second
    buffer of the third batch: the files keep the first two batches whole (the
    third's first buffer is cut off again), and those after are counted as lost."""
    disk_full_after(monkeypatch, 5)  # two buffers a batch: batches 1-2 whole, 3 half
    spec = {"a": np.zeros(8, np.uint64), "b": np.zeros(8, np.uint64)}
    slots = np.zeros((1, _native.CONTROL_STRIDE), np.int64)
    spooled = spool.SampleSpool(tmp_path / "spool", ("a", "b"), 1)
    drain = native._Drain(native.Ring("a", "b"), [spec], slots, spooled)
    for values in (range(3), range(3, 6), range(6, 8), range(8, 12)):
        for v in values:
            spec["a"][v % 8], spec["b"][v % 8] = v, 100 + v
        slots[0, _native.SLOT_PUBLISHED] = values[-1] + 1
        drain.take()
        assert slots[0, _native.SLOT_TAKEN] == values[-1] + 1  # the ring is freed all the same
    result = {"stored": 12, "overflow": 0, "stored_before_loss": 12}
    drain.hand_back([result])
    assert result == {"stored": 6, "overflow": 6, "stored_before_loss": 6}
    assert spooled.rows == [6] and spooled.failure.errno == errno.ENOSPC
    for name in ("a", "b"):
        assert spooled.path(0, name).stat().st_size == 6 * spool.SAMPLE_BYTES
    [(a, b)] = spooled.batches(0)
    assert a.tolist() == list(range(6)) and b.tolist() == [100 + v for v in range(6)]


@pytest.fixture
def small_batches(monkeypatch):
    """Spooled samples read back 500 at a time: a 4 s run at 2 kHz makes 16 batches or more."""
    monkeypatch.setattr(spool, "SPOOL_ROWS", 500)
    return 500


@pytest.fixture
def spool_ring(monkeypatch):
    """Rings of 4,000 slots (2 s at 2 kHz): the drain writes to files now, which the
    kernel may hold up a while when other work fills the page cache."""
    monkeypatch.setattr(native, "MIN_RING", 4_000)
    monkeypatch.setattr(native, "RING_SECONDS", 0)
    return 4_000


def test_a_spooled_run_stores_every_detour_and_reads_them_batch_by_batch(
        live_facts, spool_ring, small_batches, tmp_path):
    result = run_with_injection(live_facts, 4 * SECOND, spool_dir=tmp_path)
    [summary] = result.summaries
    detours = result.tables["detours"]
    assert isinstance(detours, SpooledTable) and not detours.path.exists()
    batches = list(detours.batches())
    assert all(batch.rows <= small_batches for batch in batches)
    whole = detours.load()
    assert summary["overflow"] == 0, result.diagnostics
    assert summary["stored"] == summary["detours"] == whole.rows == detours.rows
    # 8,000 injections in 4 s: the ring turned over, the spool was read in many batches
    assert whole.rows >= result.tables["injections"].rows >= 1.5 * spool_ring
    assert len(batches) >= 12
    assert np.all(np.diff(whole.start_ns) > 0)  # in order across every batch and turn of the ring
    assert whole.duration_ns.min() >= THRESHOLD_NS
    # the summary's percentiles, from the batches, are exactly those of the whole column
    for name, q in QUANTILES.items():
        assert summary[name] == np.percentile(whole.duration_ns, 100 * q, method="inverted_cdf")
    # the injections found batch by batch are those found in the whole table, nearly all
    cpu = summary["cpu"]
    by_batch = match_injections(detours, result.tables["injections"], result.tables["windows"], cpu)
    at_once = match_injections(whole, result.tables["injections"], result.tables["windows"], cpu)
    assert np.array_equal(by_batch.detected_ns, at_once.detected_ns)
    assert at_once.found >= 0.9 * at_once.injected > 0  # each 20 us injection is a detour
    # its Parquet file: the batches joined into one row group (fewer rows than one holds)
    import pyarrow.parquet as pq

    from noisescope.tables import ROW_GROUP_ROWS

    file = pq.ParquetFile(detours.ready())
    assert whole.rows < ROW_GROUP_ROWS and file.metadata.num_row_groups == 1
    assert np.array_equal(file.read().column("start_ns").to_numpy(), whole.start_ns)


def test_a_disk_that_fills_while_detours_are_spooled_keeps_those_before_and_says_so(
        live_facts, spool_ring, small_batches, tmp_path, monkeypatch):
    """The run goes on; the detours spooled before the disk filled are stored,
    in order and whole, the rest counted, and the result says why."""
    disk_full_after(monkeypatch, 10)  # 5 drains of 0.1 s: about 0.5 s of 4 s stored
    result = run_with_injection(live_facts, 4 * SECOND, spool_dir=tmp_path)
    [summary] = result.summaries
    detours = result.tables["detours"]
    whole = detours.load()
    assert summary["stored"] == summary["stored_before_loss"] == whole.rows > 0
    assert summary["stored"] + summary["overflow"] == summary["detours"]
    assert summary["overflow"] > 2 * whole.rows  # most of the run was not stored
    assert np.all(np.diff(whole.start_ns) > 0) and whole.duration_ns.min() >= THRESHOLD_NS
    [note] = [d for d in result.diagnostics if d.code is Code.WRITE_FAILED]
    assert note.message.startswith(f"CPU {summary['cpu']}: {summary['overflow']} detours were "
                                   f"counted but not stored, after writing them to ")
    assert note.message.endswith("failed (No space left on device)")
    assert not [d for d in result.diagnostics if d.code is Code.BUFFER_OVERFLOW]


def test_a_scan_with_a_bundle_spools_its_samples_and_writes_them_whole(
        live_facts, spool_ring, small_batches, tmp_path, monkeypatch):
    """Traced, so that attribution and the spectrum read the spooled detours too:
    attributed in parts of about 300 detours cut where chunks of 50 ms end."""
    monkeypatch.setattr(scanning, "ATTRIBUTED_ROWS", 300)
    monkeypatch.setattr(attribute_module, "CHUNK_NS", 50_000_000)
    cpu = max(os.sched_getaffinity(0))
    options = ScanOptions(cpus=(cpu,), duration_ns=4 * SECOND, probes=("detour",),
                          threshold_ns=THRESHOLD_NS, injections=(Injection(cpu, RATE_HZ, 20_000),))
    destination = tmp_path / "bundle"
    scan(options, facts=live_facts, destination=destination)
    assert not list(tmp_path.glob(".bundle.*"))  # the spool is gone once the bundle holds it
    bundle = load(destination)
    [summary] = bundle.summaries["detour"]
    detours = bundle.table("detours")
    assert summary["overflow"] == 0
    assert summary["stored"] == summary["detours"] == detours.rows
    assert np.all(np.diff(detours.start_ns) > 0)
    # each 20 us injection is in a detour (8,000 in 4 s; one detour holds several when
    # another task held the CPU a while): the spool was read back in several batches
    assert summary["injections"]["found"] >= 0.9 * summary["injections"]["injected"]
    assert detours.rows > 3 * small_batches
    if bundle.manifest["trace"]["enabled"]:
        [explained] = bundle.summaries["attribution"]
        assert explained["detours"] == detours.rows
        assert explained["noise_ns"] == int(detours.duration_ns.sum())
        assert len(explained["worst"]) == 3
        longest = np.sort(detours.duration_ns)[-3:][::-1]
        assert [w["duration_ns"] for w in explained["worst"]] == longest.tolist()
        causes = bundle.table("detour_causes")
        # every detour's time is split among its causes, batch boundaries or not
        per_detour = {}
        for start, ns in zip(causes.start_ns.tolist(), causes.duration_ns.tolist(), strict=True):
            per_detour[start] = per_detour.get(start, 0) + ns
        assert per_detour == dict(zip(detours.start_ns.tolist(), detours.duration_ns.tolist(),
                                      strict=True))
        assert set(detours["cause"].tolist()) <= {c["cause"] for c in explained["causes"]}
        # explained in parts, as all at once from the events stored in the bundle
        again = attribute_module.attribute(
            Table({c: detours[c] for c in ("cpu", "start_ns", "duration_ns")}),
            event_source(bundle), bundle.trace_coverage,
            injected=scanning.invisible_to_the_kernel(bundle.injections))
        for name in again.causes.columns:
            assert np.array_equal(again.causes[name], causes[name]), name
        for name in again.primary.columns:
            assert np.array_equal(again.primary[name], detours[name]), name
    assert {s["series"] for s in bundle.summaries["spectrum"]} == {"detour"}


def test_a_scan_whose_drain_falls_behind_says_so_in_its_bundle(live_facts, spool_ring,
                                                                tmp_path, monkeypatch):
    """The loss is in the bundle, not only in the probe's result: the manifest's
    counts (stored + overflow = detours, the spooled table holding what was
    stored) and its warning."""
    monkeypatch.setattr(native, "DRAIN_INTERVAL_S", 3600.0)  # never during the run
    cpu = max(os.sched_getaffinity(0))
    options = ScanOptions(cpus=(cpu,), duration_ns=3 * SECOND, probes=("detour",),
                          threshold_ns=THRESHOLD_NS, injections=(Injection(cpu, RATE_HZ, 20_000),),
                          trace=scanning.TraceOptions(enabled=False))
    scan(options, facts=live_facts, destination=tmp_path / "bundle")
    bundle = load(tmp_path / "bundle")
    [summary] = bundle.summaries["detour"]
    assert summary["stored"] == bundle.table("detours").rows == spool_ring
    assert summary["overflow"] >= summary["injections"]["injected"] - spool_ring > 0
    assert summary["stored"] + summary["overflow"] == summary["detours"]
    [note] = [w for w in bundle.warnings if w.code is Code.BUFFER_OVERFLOW]
    assert f"{summary['overflow']} detours were counted but not stored" in note.message


def test_samples_are_spooled_where_there_is_room(tmp_path, monkeypatch):
    """Beside the bundle if its file system has the room, else in the temporary
    directory, else (no room anywhere) in memory."""
    import shutil
    import tempfile

    from noisescope import scan as scan_module

    destination = tmp_path / "out" / "bundle"
    destination.parent.mkdir()
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setattr(scan_module, "SPOOL_ROOM_BYTES", 0)
    beside = scan_module.spool_directory(destination)
    assert beside is not None and beside.parent == destination.parent
    shutil.rmtree(beside)
    real_statvfs = os.statvfs

    def destination_full(path):
        room = real_statvfs(path)
        return room if Path(path) == temporary else os.statvfs_result(
            (room.f_bsize, room.f_frsize, room.f_blocks, 0, 0, *tuple(room)[5:]))

    monkeypatch.setattr(scan_module, "SPOOL_ROOM_BYTES", 1)
    monkeypatch.setattr(scan_module.os, "statvfs", destination_full)
    elsewhere = scan_module.spool_directory(destination)
    assert elsewhere is not None and elsewhere.parent == temporary
    shutil.rmtree(elsewhere)
    monkeypatch.setattr(scan_module, "SPOOL_ROOM_BYTES", 1 << 62)
    assert scan_module.spool_directory(destination) is None


def test_a_spooled_table_of_small_batches_is_written_in_few_row_groups_of_one_cpu_each(tmp_path):
    """Detours explained 8,192 at a time made an hour's file of 3,600 row
    groups, whose metadata the writer holds until it closes (28 MB a file):
    a CPU's batches are joined into row groups of ROW_GROUP_ROWS or more."""
    import pyarrow.parquet as pq

    from noisescope.tables import ROW_GROUP_ROWS

    def table(cpu: int, first: int, rows: int) -> Table:
        return Table({"cpu": np.full(rows, cpu, np.int32),
                      "start_ns": np.arange(first, first + rows, dtype=np.int64)})

    small = ROW_GROUP_ROWS // 64
    sizes = {0: [small] * 200, 1: [10, 0, 7]}  # CPU 0: 3.1 row groups' worth; CPU 1: 17 rows
    sources = []
    for cpu, batch_rows in sizes.items():
        firsts = np.concatenate([[0], np.cumsum(batch_rows)[:-1]])
        sources.append((cpu, sum(batch_rows), lambda cpu=cpu, firsts=firsts, batch_rows=batch_rows:
                        (table(cpu, int(f), n) for f, n in zip(firsts, batch_rows, strict=True))))
    spooled = SpooledTable.of(tmp_path / "t.parquet", table(0, 0, 0), sources)
    written = pq.ParquetFile(spooled.ready())
    groups = [written.metadata.row_group(i) for i in range(written.metadata.num_row_groups)]
    assert [g.num_rows for g in groups] == [ROW_GROUP_ROWS] * 3 + [200 * small - 3 * ROW_GROUP_ROWS, 17]
    for group in groups:  # each of one CPU
        cpu = group.column(0).statistics
        assert cpu.min == cpu.max
    loaded = Table.from_parquet(spooled.path)
    assert np.array_equal(loaded["cpu"], np.repeat([0, 1], [200 * small, 17]))
    assert np.array_equal(loaded["start_ns"], np.concatenate([np.arange(200 * small), np.arange(17)]))
