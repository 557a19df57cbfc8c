"""Explaining late timer wakeups: the owner rules of attribution on
hand-written trace text (times in ns). The measuring thread ns-timerlat/1
(pid 100) sleeps; a span runs from its deadline to its wakeup. As on this
project's VM, the trace has no switch out of the idle task, nor out of the
sandbox's tokio-rt-worker: they are put back from the wakeups."""

from __future__ import annotations

import numpy as np

from noisescope.tables import Table
from noisescope.trace.events import parse_text
from noisescope.trace.switches import complete_switches
from noisescope.trace.wakeups import explain_late_wakeups

from .test_attribute import line, switch
from .test_trace_events import identity

IDLE = ("unexplained", "CPU idle")
BEFORE = ("unexplained", "before the timer interrupt")
OUTSIDE = ("unexplained", "outside guest handlers")
OWN_TIMER = ("timer", "hrtimer_wakeup (own)")


def own_timer(at: int, task: str, length: int = 2000) -> list[str]:
    """A local timer interrupt at `at` that wakes the measuring thread."""
    return [line(at, "local_timer_entry", "vector=236", task=task),
            line(at + 300, "hrtimer_expire_entry", "hrtimer=0000 function=hrtimer_wakeup now=1",
                 task=task),
            line(at + 500, "sched_wakeup", "comm=ns-timerlat/1 pid=100 prio=49 target_cpu=001",
                 task=task),
            line(at + length, "local_timer_exit", "vector=236", task=task)]


# (deadline, wakeup) of three late wakeups and what ran meanwhile
TRACE = [
    # 1: a higher-priority thread runs at the deadline and keeps the CPU
    switch(5_000, "ns-timerlat/1", 100, "ns-inject/1", 200, state="S"),
    *own_timer(12_000, "ns-inject/1-200"),
    switch(40_000, "ns-inject/1", 200, "ns-timerlat/1", 100, state="S"),
    # 2: the CPU is idle; a device interrupt comes between the wakeup and the switch
    switch(50_000, "ns-timerlat/1", 100, "swapper/1", 0, state="S"),
    *own_timer(75_000, "<idle>-0", length=1000),
    line(76_500, "irq_handler_entry", "irq=25 name=virtio0-input.0", task="<idle>-0"),
    line(78_500, "irq_handler_exit", "irq=25 ret=handled", task="<idle>-0"),
    # 3: a softirq already running at the deadline (seen thanks to the look-back)
    switch(90_000, "ns-timerlat/1", 100, "swapper/1", 0, state="S"),
    line(99_000, "softirq_entry", "vec=3 [action=NET_RX]", task="<idle>-0"),
    line(103_000, "softirq_exit", "vec=3 [action=NET_RX]", task="<idle>-0"),
    *own_timer(104_000, "<idle>-0", length=1000),
    # 4: the thread was preempted (runnable) when its deadline passed: no
    # wakeup in the span, the other thread's time is all delay
    switch(200_000, "ns-timerlat/1", 100, "kworker/1:1", 300, state="R+"),
    switch(230_000, "kworker/1:1", 300, "ns-timerlat/1", 100, state="I"),
    # 5: a task whose switches out are not traced holds the CPU at the deadline
    switch(300_000, "ns-timerlat/1", 100, "tokio-rt-worker", 500, state="S"),
    *own_timer(320_000, "tokio-rt-worker-500"),
    switch(330_000, "ns-timerlat/1", 100, "swapper/1", 0, state="S"),
]
SPANS = [(10_000, 41_000), (60_000, 79_500), (100_000, 106_000), (210_000, 231_000),
         (310_000, 325_000)]


def test_late_wakeups_go_to_what_held_the_cpu():
    trace = parse_text(TRACE, identity)
    series = Table({"cpu": np.full(len(SPANS), 1, np.int32),
                    "wakeup_ns": np.array([w for _, w in SPANS], np.int64),
                    "latency_ns": np.array([w - d for d, w in SPANS], np.int64)})
    coverage = Table({"cpu": np.array([1], np.int32), "start_ns": np.array([0]),
                      "end_ns": np.array([10**9])})
    summaries = [{"cpu": 1, "tid": 100}, {"cpu": 0, "tid": 99}]
    late = explain_late_wakeups(series, 5_000, summaries, trace, coverage)
    causes = late.causes
    splits = [{(c, d): int(ns) for c, d, ns in zip(*(causes.filter(causes["start_ns"] == start)[k]
                                                     for k in ("cause", "detail", "duration_ns")),
                                                   strict=True)} for start, _ in SPANS]
    for split, (deadline, wakeup) in zip(splits, SPANS, strict=True):
        assert sum(split.values()) == wakeup - deadline  # every nanosecond has one cause
    # before its timer interrupt the injector is not yet in the way; after it, it is
    assert splits[0] == {BEFORE: 2_000, OWN_TIMER: 2_000, ("thread", "ns-inject/1"): 26_000,
                         OUTSIDE: 1_000}
    # the thread got the CPU when the last handler after its wakeup ended
    assert splits[1] == {IDLE: 15_500, OWN_TIMER: 1_000, ("irq", "virtio0-input.0"): 2_000,
                         OUTSIDE: 1_000}
    assert splits[2] == {("softirq", "NET_RX"): 3_000, IDLE: 1_000, OWN_TIMER: 1_000, OUTSIDE: 1_000}
    assert splits[3] == {("thread", "kworker/1:1"): 20_000, OUTSIDE: 1_000}
    assert splits[4] == {BEFORE: 10_000, OWN_TIMER: 2_000, OUTSIDE: 3_000}
    primary = list(zip(late.spans["cause"].tolist(), late.spans["cause_detail"].tolist(), strict=True))
    assert primary == [("thread", "ns-inject/1"), ("irq", "virtio0-input.0"), ("softirq", "NET_RX"),
                       ("thread", "kworker/1:1"), OWN_TIMER]
    # one summary row per measured CPU; the one without late wakeups says so
    rows = {row["cpu"]: row for row in late.summary}
    assert rows[0]["wakeups"] == 0 and rows[0]["causes"] == [] and rows[0]["worst"] == []
    assert rows[1]["wakeups"] == 5 and rows[1]["threshold_ns"] == 5_000
    assert rows[1]["latency_ns"] == sum(w - d for d, w in SPANS)
    top = rows[1]["causes"][0]
    assert (top["cause"], top["detail"], top["count"]) == ("thread", "ns-inject/1", 1)
    assert rows[1]["worst"][0]["start_ns"] == 10_000
    assert any(e["event"] == "sched_wakeup" and e["number"] == 100 for e in rows[1]["worst"][0]["chain"])


def test_switches_missing_from_the_trace_are_put_back():
    trace = parse_text(TRACE, identity)
    completed = complete_switches(trace.switches, trace.events)
    inferred = completed.filter(completed["inferred"])
    assert list(zip(inferred["timestamp_ns"].tolist(), inferred["prev_pid"].tolist(),
                    inferred["next_pid"].tolist(), inferred["prev_state"].tolist(), strict=True)) == [
        (78_500, 0, 100, "?"), (105_000, 0, 100, "?"), (322_000, 500, 100, "?")]
    assert set(inferred["next_comm"].tolist()) == {"ns-timerlat/1"}
    recorded = completed.filter(~completed["inferred"])
    assert recorded.rows == trace.switches.rows
    assert np.all(np.diff(completed["timestamp_ns"]) >= 0)
