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

import pytest

from noisescope.tables import Table
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


@pytest.mark.parametrize("case", CASES)
def test_attribution_is_the_golden_one(golden, trace, spans, case):
    assert attribution(trace, spans, case) == golden["cases"][case]


def test_attribution_in_two_calls_sharing_labels_and_tasks_is_the_golden_one(golden, trace, spans):
    assert attribution(trace, spans, "fallback", parts=2) == golden["in_parts"]
