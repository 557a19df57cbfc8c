"""Samples handed over while a probe runs: each sampler's ring is drained as
the run goes on, so a run stores every sample however small the ring, and a
drain that falls behind is counted, never silent."""

from __future__ import annotations

import os

import numpy as np
import pytest

from noisescope import _native
from noisescope.clock import measurement_clock
from noisescope.diagnostics import Code
from noisescope.probes import detour as detour_probe
from noisescope.probes import native
from noisescope.probes.base import ProbeContext
from noisescope.probes.injection import Injection
from noisescope.probes.schedule import plan_windows
from noisescope.units import SECOND

from ..helpers import RT

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


def run_with_injection(live_facts, duration_ns: int, **settings):
    cpu = max(os.sched_getaffinity(0))
    schedule, _ = plan_windows(duration_ns, rt=False)
    ctx = ProbeContext((cpu,), schedule, measurement_clock(live_facts.tsc_flags),
                       priority=95 if RT else 0,
                       injections=(Injection(cpu, RATE_HZ, 20_000),))
    return detour_probe.run(ctx, threshold_ns=THRESHOLD_NS, **settings)


@pytest.fixture
def small_ring(monkeypatch):
    """Rings of 1,000 slots: a 4 s run at 2 kHz fills one eight times over."""
    monkeypatch.setattr(native, "MIN_RING", 1_000)
    monkeypatch.setattr(native, "RING_SECONDS", 0)
    return 1_000


def test_a_run_stores_every_detour_however_small_its_ring(live_facts, small_ring):
    result = run_with_injection(live_facts, 4 * SECOND)
    [summary] = result.summaries
    detours = result.tables["detours"]
    assert summary["overflow"] == 0, result.diagnostics
    assert summary["stored"] == summary["detours"] == detours.rows == summary["stored_before_loss"]
    assert detours.rows >= result.tables["injections"].rows >= 6 * small_ring
    assert np.all(np.diff(detours.start_ns) > 0)  # in order across every turn of the ring
    assert detours.duration_ns.min() >= THRESHOLD_NS


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
