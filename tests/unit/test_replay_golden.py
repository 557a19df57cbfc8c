"""The attribution replay against golden tables.

tests/fixtures/traces/replay_golden.json.gz holds a randomised synthetic
trace of two CPUs (tests/synthetic_replay.py: nested IRQs, softirqs, lost
exits, hrtimers with and without tick_ functions, wakeups of the spans'
owner before and after the hrtimers, missing switches, NMIs and osnoise
events), its spans, and what the Python replay (main at 57d7087, before the
replay moved into the native core) made of them: the switches completed,
each CPU's timeline, and attribute()'s tables, labels and tasks in three
configurations and in two calls sharing labels and tasks. It was written by
tests/fixtures/make_replay_golden.py; the replay must give exactly the same.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from noisescope import _native
from noisescope.tables import Table, dictionary_codes, factorize
from noisescope.trace.switches import complete_switches

from ..synthetic_replay import CASES, GOLDEN, attribution, columns, tables_from_columns, timelines


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


@pytest.fixture(scope="module")
def trace(golden):
    return tables_from_columns(golden["events"], golden["switches"])


@pytest.fixture(scope="module")
def spans(golden) -> Table:
    return Table(golden["spans"])


def test_the_golden_trace_has_what_the_replay_must_handle(golden):
    """Not a trivial trace: the cases the replay's rules are about occur."""
    names = set(golden["events"]["event"])
    assert {"local_timer_entry", "irq_handler_entry", "softirq_entry", "hrtimer_expire_entry",
            "sched_wakeup", "page_fault_user", "nmi_handler", "irq_noise", "softirq_noise",
            "nmi_noise", "thread_noise", "reschedule_entry", "thermal_apic_entry"} <= names
    inferred = sum(golden["completed_switches"]["inferred"])
    assert 20 <= inferred <= len(golden["completed_switches"]["inferred"]) // 2
    labels = {tuple(pair) for case in golden["cases"].values() for pair in case["labels"]}
    assert {("timer", "hrtimer (own)"), ("timer", "watchdog_timer_fn (own)"),
            ("nmi", "perf_event_nmi_handler"), ("unexplained", "before the timer interrupt"),
            ("unexplained", "CPU idle"), ("injected", "signal")} <= labels
    assert len(golden["timelines"]["0"]["owner_wakeups"]) >= 10


def test_completed_switches_are_the_golden_ones(golden, trace):
    assert columns(complete_switches(trace.switches, trace.events)) == golden["completed_switches"]


def test_timelines_are_the_golden_ones(golden, trace):
    assert timelines(trace) == golden["timelines"]


def causes_in_order_of_pairs(made: dict) -> dict:
    """A golden result with each span's causes in the order of their (cause,
    detail) pairs: the golden file has them in the order the labels were
    numbered, which changed when CPUs came to be explained in separate
    processes (each numbering its own); the rows are the same."""
    causes = made["causes"]
    span = list(zip(causes["cpu"], causes["start_ns"], strict=True))
    groups: list[list[int]] = []
    for i in range(len(span)):
        if i == 0 or span[i] != span[i - 1]:
            groups.append([])
        groups[-1].append(i)
    order = [i for group in groups
             for i in sorted(group, key=lambda i: (causes["cause"][i], causes["detail"][i]))]
    return {**made, "causes": {name: [values[i] for i in order] for name, values in causes.items()}}


@pytest.mark.parametrize("case", CASES)
def test_attribution_is_the_golden_one(golden, trace, spans, case):
    assert attribution(trace, spans, case) == causes_in_order_of_pairs(golden["cases"][case])


def test_attribution_in_two_calls_sharing_labels_and_tasks_is_the_golden_one(golden, trace, spans):
    assert attribution(trace, spans, "fallback", parts=2) == causes_in_order_of_pairs(
        golden["in_parts"])


def test_dictionary_codes_are_those_of_a_dict_in_order_of_first_appearance():
    """The native codes: equal values share a code even as distinct objects
    (strings made at run time), None and numbers included."""
    rng = np.random.default_rng(3)
    pool = ["tick", "".join(["ti", "ck"]), "irq", None, 7, 7.0, "kworker/0:1", "".join("irq")]
    values = np.empty(500, dtype=object)
    values[:] = [pool[i] for i in rng.integers(0, len(pool), 500)]
    ids: dict = {}
    expected = [ids.setdefault(v, len(ids)) for v in values]
    codes, distinct = dictionary_codes(values)
    assert codes.tolist() == expected and distinct == list(ids)
    assert len(distinct) == 5  # "tick", "irq", None, 7 (== 7.0), "kworker/0:1"


@pytest.mark.parametrize("dtype", ["S16", np.int64, np.int32])
def test_factorize_numbers_fixed_width_values_by_first_appearance(dtype):
    """Codes as a dict of the values gives them, in runs and scattered, with
    enough distinct values to grow the native hash table many times; the
    first appearances index the distinct values."""
    rng = np.random.default_rng(4)
    pool = np.array([str(k).encode() if dtype == "S16" else k
                     for k in rng.integers(0, 1 << 30, 3000)], dtype=dtype)
    values = np.repeat(pool[rng.integers(0, len(pool), 4000)], rng.integers(1, 4, 4000))
    ids: dict = {}
    expected = [ids.setdefault(v, len(ids)) for v in values.tolist()]
    codes, first = factorize(values)
    assert codes.tolist() == expected
    assert values[first].tolist() == list(ids) and len(first) == len(set(values.tolist()))
    empty_codes, empty_first = factorize(values[:0])
    assert len(empty_codes) == 0 and len(empty_first) == 0
    with pytest.raises(TypeError):
        factorize(np.array(["tick"], dtype=object))


def test_the_native_replay_refuses_rows_out_of_range():
    """A wrong index from the caller is an error, not a read out of bounds."""
    one, none = np.zeros(1, np.int64), np.zeros(0, np.int64)
    out = tuple(np.zeros(2, np.int64) for _ in range(5))
    with pytest.raises(ValueError, match="order"):
        _native.replay_switches((one, one, one, one), (none, none, none), np.array([5]), out)
    items = (np.array([_native.ITEM_SWITCH]), np.array([0]))  # a switch, but there is none
    with pytest.raises(ValueError, match="out of range"):
        _native.replay_timeline(items, (one,) * 5, (none,) * 4, (none,) * 4, (one,) * 3, 0, (-1, -1),
                                (out, one, one, one, one))
