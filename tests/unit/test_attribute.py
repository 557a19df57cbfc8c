"""Splitting detours into causes: the classification rules on hand-written
trace text (times in ns), and the acceptance checks on a captured real trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from noisescope.tables import Table
from noisescope.trace.attribute import attribute
from noisescope.trace.events import Symbols, decode_raw, parse_text
from noisescope.trace.explain import attribution_summary, breakdown
from noisescope.trace.session import TraceClock

from ..trace_checks import injections_attributed, local_timers_explained
from .test_trace_events import CAPTURE, identity, load_capture

SAMPLER = "ns-detour/1-100"
SWITCH = "prev_comm={} prev_pid={} prev_prio=120 prev_state={} ==> next_comm={} next_pid={} next_prio=120"


def line(ts: int, event: str, fields: str, task: str = SAMPLER, cpu: int = 1) -> str:
    return f"{task:>20} [{cpu:03d}] d.... {ts}: {event}: {fields}"


def switch(ts: int, prev: str, prev_pid: int, nxt: str, next_pid: int, state: str = "R+") -> str:
    return line(ts, "sched_switch", SWITCH.format(prev, prev_pid, state, nxt, next_pid),
                task=f"{prev}-{prev_pid}")


def explain(lines: list[str], spans: list[tuple[int, int]], covered_until: int = 10**9,
            cpu: int = 1, injected: Table | None = None, osnoise: str = "fallback"):
    trace = parse_text(lines, identity)
    table = Table({"cpu": np.full(len(spans), cpu, np.int32),
                   "start_ns": np.array([s for s, _ in spans], np.int64),
                   "duration_ns": np.array([d for _, d in spans], np.int64)})
    coverage = Table({"cpu": np.array([cpu], np.int32), "start_ns": np.array([0]),
                      "end_ns": np.array([covered_until])})
    result = attribute(table, trace, coverage, injected=injected, osnoise=osnoise)
    splits = []
    for start in table["start_ns"].tolist():
        rows = result.causes.filter(result.causes["start_ns"] == start)
        splits.append({(c, d): int(ns) for c, d, ns in zip(rows["cause"], rows["detail"],
                                                           rows["duration_ns"], strict=True)})
    for split, (_, duration) in zip(splits, spans, strict=True):
        assert sum(split.values()) == duration  # every nanosecond has exactly one cause
    primary = list(zip(result.primary["cause"].tolist(), result.primary["cause_detail"].tolist(),
                       strict=True))
    return splits, primary, result


OUTSIDE = ("unexplained", "outside guest handlers")
NOTHING = ("unexplained", "no guest activity")


def test_tick_with_softirq_and_the_time_around_it():
    splits, primary, _ = explain([
        line(8000, "local_timer_entry", "vector=236"),
        line(8400, "hrtimer_expire_entry", "hrtimer=0000 function=tick_nohz_handler now=1"),
        line(14000, "local_timer_exit", "vector=236"),
        line(14200, "softirq_entry", "vec=7 [action=SCHED]"),
        line(14800, "softirq_exit", "vec=7 [action=SCHED]"),
    ], [(1000, 14000)])
    assert splits[0] == {("tick", ""): 6000, ("softirq", "SCHED"): 600, OUTSIDE: 7400}
    assert primary == [("tick", "")]


def test_timer_wakeup_then_the_woken_thread_preempts():
    splits, primary, _ = explain([
        line(27000, "local_timer_entry", "vector=236"),
        line(27300, "hrtimer_expire_entry", "hrtimer=0000 function=hrtimer_wakeup now=1"),
        line(30000, "local_timer_exit", "vector=236"),
        switch(31000, "ns-detour/1", 100, "ns-inject/1", 200),
        switch(55000, "ns-inject/1", 200, "ns-detour/1", 100, state="S"),
    ], [(20000, 40000)])
    assert splits[0] == {("timer", "hrtimer_wakeup"): 3000, ("thread", "ns-inject/1"): 24000,
                         OUTSIDE: 13000}
    assert primary == [("thread", "ns-inject/1")]


def test_irq_inside_another_thread_counts_as_the_irq():
    splits, primary, _ = explain([
        switch(110000, "ns-detour/1", 100, "kworker/1:1", 300),
        line(130000, "irq_handler_entry", "irq=25 name=virtio0-input.0", task="kworker/1:1-300"),
        line(135000, "irq_handler_exit", "irq=25 ret=handled", task="kworker/1:1-300"),
        line(140000, "workqueue_execute_start", "work struct 00ff: function vmstat_update",
             task="kworker/1:1-300"),
        line(150000, "workqueue_execute_end", "work struct 00ff: function vmstat_update",
             task="kworker/1:1-300"),
        switch(190000, "kworker/1:1", 300, "ns-detour/1", 100, state="I"),
    ], [(100000, 100000)])
    assert splits[0] == {("thread", "kworker/1:1"): 75000, ("irq", "virtio0-input.0"): 5000,
                         OUTSIDE: 20000}
    assert primary == [("thread", "kworker/1:1")]


def test_nothing_in_the_guest_is_the_host():
    splits, primary, result = explain([line(10, "local_timer_entry", "vector=236"),
                                       line(20, "local_timer_exit", "vector=236")],
                                      [(300000, 5000)])
    assert splits[0] == {NOTHING: 5000}
    assert primary == [("unexplained", "")]
    assert result.primary["trace_events"].tolist() == [0]


def test_injected_signal_handler_time_is_injected_below_the_kernel_s_handlers():
    # The injector's timer fires (20-26 us), its signal handler spins in user
    # space in the sampler's thread from 30 us for 20 us, a tick interrupts it.
    # The kernel records nothing for the spin itself; the injector recorded it.
    injected = Table({"cpu": np.array([1, 0, 1], np.int32),
                      "mode": np.array(["signal", "signal", "signal"], dtype=object),
                      "start_ns": np.array([30_000, 30_000, 900_000], np.int64),
                      "duration_ns": np.array([20_000, 20_000, 20_000], np.int64)})
    splits, primary, _ = explain([
        line(20_000, "local_timer_entry", "vector=236"),
        line(21_000, "hrtimer_expire_entry", "hrtimer=0000 function=posix_timer_fn now=1"),
        line(26_000, "local_timer_exit", "vector=236"),
        line(40_000, "local_timer_entry", "vector=236"),
        line(41_000, "hrtimer_expire_entry", "hrtimer=0000 function=tick_nohz_handler now=1"),
        line(44_000, "local_timer_exit", "vector=236"),
    ], [(18_000, 34_000), (300_000, 5_000)], injected=injected)
    assert splits[0] == {("timer", "posix_timer_fn"): 6_000, ("tick", ""): 4_000,
                         ("injected", "signal"): 16_000, OUTSIDE: 8_000}
    assert primary[0] == ("injected", "signal")
    assert splits[1] == {NOTHING: 5_000}  # no injection there, on this CPU


def test_a_preempted_injection_is_injected_before_and_after_the_other_task():
    # The spin (30-50 us, as the injector recorded it) is preempted by a
    # kworker from 35 to 40 us and interrupted by the tick at 44-46 us.
    injected = Table({"cpu": np.array([1], np.int32), "mode": np.array(["signal"], dtype=object),
                      "start_ns": np.array([30_000]), "duration_ns": np.array([20_000])})
    splits, _, _ = explain([
        line(20_000, "local_timer_entry", "vector=236"),
        line(21_000, "hrtimer_expire_entry", "hrtimer=0000 function=posix_timer_fn now=1"),
        line(26_000, "local_timer_exit", "vector=236"),
        switch(35_000, "ns-detour/1", 100, "kworker/1:1", 50),
        switch(40_000, "kworker/1:1", 50, "ns-detour/1", 100),
        line(44_000, "local_timer_entry", "vector=236"),
        line(44_500, "hrtimer_expire_entry", "hrtimer=0000 function=tick_nohz_handler now=1"),
        line(46_000, "local_timer_exit", "vector=236"),
    ], [(18_000, 34_000)], injected=injected)
    assert splits[0] == {("timer", "posix_timer_fn"): 6_000, ("thread", "kworker/1:1"): 5_000,
                         ("tick", ""): 2_000, ("injected", "signal"): 13_000, OUTSIDE: 8_000}


def test_injected_intervals_are_merged_before_they_are_measured():
    # Injections at 10-30 and 20-40 us overlap (one 10-40 us stretch, not 40 us
    # of it), 50-60 us is apart, 100 us is empty; the span 5-70 us has no
    # guest activity but a tick at 45-47 us. Spans before, inside and after.
    injected = Table({"cpu": np.full(4, 1, np.int32), "mode": np.array(["signal"] * 4, object),
                      "start_ns": np.array([50_000, 10_000, 20_000, 100_000]),
                      "duration_ns": np.array([10_000, 20_000, 20_000, 0])})
    splits, primary, _ = explain([
        line(45_000, "local_timer_entry", "vector=236"),
        line(45_500, "hrtimer_expire_entry", "hrtimer=0000 function=tick_nohz_handler now=1"),
        line(47_000, "local_timer_exit", "vector=236"),
    ], [(5_000, 65_000), (2_000, 3_000), (25_000, 5_000), (55_000, 30_000)], injected=injected)
    assert splits[0] == {("injected", "signal"): 40_000, ("tick", ""): 2_000, OUTSIDE: 23_000}
    assert splits[1] == {NOTHING: 3_000}
    assert splits[2] == {("injected", "signal"): 5_000}
    assert splits[3] == {("injected", "signal"): 5_000, OUTSIDE: 25_000}  # (injected: guest time)
    assert primary == [("injected", "signal"), NOTHING[:1] + ("",), ("injected", "signal"),
                       ("injected", "signal")]


def test_nmi_known_by_its_end_and_length():
    splits, primary, _ = explain([
        line(405000, "nmi_handler", "perf_event_nmi_handler() delta_ns: 2000 handled: 1"),
    ], [(400000, 10000)])
    assert splits[0] == {("nmi", "perf_event_nmi_handler"): 2000, OUTSIDE: 8000}
    assert primary == [("nmi", "perf_event_nmi_handler")]


def test_fault_of_the_sampler_lasts_until_the_next_event():
    splits, _, _ = explain([
        line(501000, "page_fault_user", "address=0x1 ip=0x2 error_code=0x6"),
        line(502000, "local_timer_entry", "vector=236"),
        line(503000, "local_timer_exit", "vector=236"),
    ], [(500000, 4000)])
    # no hrtimer ran in that interrupt: a periodic tick
    assert splits[0] == {("fault", "user"): 1000, ("tick", ""): 1000, OUTSIDE: 2000}


def test_fault_of_another_task_is_that_task_s_time():
    splits, _, _ = explain([
        switch(605000, "ns-detour/1", 100, "bash", 400),
        line(610000, "page_fault_user", "address=0x1 ip=0x2 error_code=0x6", task="bash-400"),
        switch(630000, "bash", 400, "ns-detour/1", 100, state="S"),
    ], [(600000, 40000)])
    assert splits[0] == {("thread", "bash"): 25000, OUTSIDE: 15000}


def test_ipis_by_kind():
    splits, primary, _ = explain([
        line(701000, "reschedule_entry", "vector=253"),
        line(701500, "reschedule_exit", "vector=253"),
        line(702000, "call_function_single_entry", "vector=251"),
        line(702100, "call_function_single_exit", "vector=251"),
    ], [(700000, 3000)])
    assert splits[0] == {("ipi", "reschedule"): 500, ("ipi", "call function single"): 100,
                         OUTSIDE: 2400}
    assert primary == [("ipi", "reschedule")]


def test_spans_after_the_trace_was_complete_are_untraced():
    splits, primary, _ = explain([line(100, "local_timer_entry", "vector=236")],
                                 [(50, 200), (900000, 1000)], covered_until=800000)
    assert splits[1] == {("untraced", ""): 1000} and primary[1] == ("untraced", "")


def test_a_switch_missing_from_the_trace_does_not_leak_into_later_detours():
    # The task switched in at 1,000,000 never shows up again (its events are
    # not in the trace); the sampler's later tick is not "another thread".
    splits, _, _ = explain([
        switch(1000000, "ns-detour/1", 100, "tokio-rt-worker", 500),
        line(1015000, "local_timer_entry", "vector=236"),
        line(1016000, "local_timer_exit", "vector=236"),
    ], [(999000, 3000), (1010000, 10000)])
    assert splits[0] == {("thread", "tokio-rt-worker"): 2000, OUTSIDE: 1000}
    assert splits[1] == {("tick", ""): 1000, OUTSIDE: 9000}


def test_osnoise_events_explain_what_entry_exit_events_do_not():
    osnoise_only = [
        line(2000, "irq_noise", "local_timer:236 start 1.000000001 duration 1000 ns"),
        line(6000, "softirq_noise", "   TIMER:1 start 1.000000004 duration 500 ns"),
        line(9000, "thread_noise", "kworker/1:1:300 start 1.000000006 duration 3000 ns"),
    ]
    splits, _, _ = explain(osnoise_only, [(0, 10000)])
    assert splits[0] == {("tick", ""): 1000, ("softirq", "TIMER"): 500,
                         ("thread", "kworker/1:1"): 3000, OUTSIDE: 5500}
    # With entry/exit events of a class present, osnoise's copy of it is not used twice.
    both = osnoise_only + [line(1000, "local_timer_entry", "vector=236"),
                           line(2000, "local_timer_exit", "vector=236")]
    splits, _, _ = explain(both, [(0, 10000)])
    assert splits[0][("tick", "")] == 1000 and splits[0][("softirq", "TIMER")] == 500


def test_preferring_osnoise_events_names_the_same_causes_as_entry_exit_events():
    """The kernel's accounting (osnoise) and the entry/exit events tell the
    same story: each class read from one source only, named alike (a vector's
    IPI name, the tick vs a timer from the hrtimer it ran, a softirq)."""
    native = [
        line(1000, "local_timer_entry", "vector=236"),
        line(1200, "hrtimer_expire_entry", "hrtimer=0x1 function=tick_nohz_handler now=1"),
        line(2000, "local_timer_exit", "vector=236"),
        line(3000, "call_function_single_entry", "vector=251"),
        line(3400, "call_function_single_exit", "vector=251"),
        line(4000, "local_timer_entry", "vector=236"),
        line(4100, "hrtimer_expire_entry", "hrtimer=0x2 function=hrtimer_wakeup now=1"),
        line(4500, "local_timer_exit", "vector=236"),
        line(5000, "softirq_entry", "vec=1 [action=TIMER]"),
        line(5500, "softirq_exit", "vec=1 [action=TIMER]"),
    ]
    osnoise = [  # the same activity as the kernel's osnoise hooks account it
        line(2000, "irq_noise", "local_timer:236 start 1.000000001 duration 1000 ns"),
        line(3400, "irq_noise", "call_function_single:251 start 1.000000003 duration 400 ns"),
        line(4500, "irq_noise", "local_timer:236 start 1.000000004 duration 500 ns"),
        line(5500, "softirq_noise", "   TIMER:1 start 1.000000005 duration 500 ns"),
    ]
    expected = {("tick", ""): 1000, ("ipi", "call function single"): 400,
                ("timer", "hrtimer_wakeup"): 500, ("softirq", "TIMER"): 500, OUTSIDE: 7600}
    for mode in ("fallback", "prefer"):
        splits, _, _ = explain(native + osnoise, [(0, 10000)], osnoise=mode)
        assert splits[0] == expected, mode
    # Preferring osnoise really reads the osnoise events: without them, nothing is named.
    hrtimers = [entry for entry in native if "hrtimer_expire" in entry]
    splits, _, _ = explain(native[:0] + hrtimers + osnoise[1:], [(0, 10000)], osnoise="prefer")
    assert ("tick", "") not in splits[0] and splits[0][("timer", "hrtimer_wakeup")] == 500


def test_breakdown_counts_totals_shares_and_maxima():
    lines = [line(1000, "local_timer_entry", "vector=236"), line(3000, "local_timer_exit", "vector=236"),
             line(11000, "local_timer_entry", "vector=236"), line(12000, "local_timer_exit", "vector=236")]
    _, _, result = explain(lines, [(0, 4000), (10000, 4000), (20000, 2000)])
    spans = Table({"cpu": np.full(3, 1, np.int32), "start_ns": np.array([0, 10000, 20000]),
                   "duration_ns": np.array([4000, 4000, 2000])})
    rows = breakdown(result.annotate(spans), result.causes, 1)
    assert rows[0] == {"cause": "unexplained", "detail": "outside guest handlers", "count": 2,
                       "total_ns": 5000, "share_pct": 50.0, "max_ns": 3000}
    assert rows[1]["cause"] == "tick" and rows[1]["total_ns"] == 3000 and rows[1]["max_ns"] == 2000
    assert rows[2]["detail"] == "no guest activity" and rows[2]["count"] == 1


# -- the acceptance checks on a real trace captured on the development VM ------

@pytest.fixture(scope="module")
def captured():
    formats, layout, pages, _, clock = load_capture()
    trace, _ = decode_raw(pages, formats, layout, TraceClock("x86-tsc", clock).to_ns,
                          Symbols(CAPTURE / "kallsyms"))
    run = json.loads((CAPTURE / "run.json").read_text())
    detours = Table({k: np.array(v) for k, v in run["detours"].items()})
    coverage = Table({k: np.array(v) for k, v in run["coverage"].items()})
    result = attribute(detours, trace, coverage)
    return run, trace, result.annotate(detours), result.causes


def test_captured_local_timers_are_matched_and_the_tick_is_named(captured):
    run, trace, detours, causes = captured
    windows = Table({k: np.array(v) for k, v in run["windows"].items()})
    ok, tick = local_timers_explained(trace.events, detours, causes, windows, run["cpu"])
    assert tick.sum() >= 20  # ~38 ticks in 150 ms at 250 Hz
    assert ok[tick].mean() >= 0.99  # the tick is named the tick
    assert ok.mean() >= 0.99  # and the other timer interrupts by the hrtimer they ran


def test_captured_injections_are_attributed_to_the_injecting_thread(captured):
    run, _, detours, causes = captured
    windows = Table({k: np.array(v) for k, v in run["windows"].items()})
    injections = Table({k: np.array(v) for k, v in run["injections"].items()})
    # The capture's 20 us spins: the thread's time around them is 2.6-19 us
    # (median 2.9 us); a spin counted twice would add 20 us more.
    attributed = injections_attributed(injections, detours, causes, windows, run["cpu"],
                                       overhead_ns=15_000)
    assert len(attributed) >= 100  # 150 ms at 1 kHz
    assert attributed.mean() >= 0.95


def test_captured_summary_is_consistent(captured):
    _, trace, detours, causes = captured
    rows = attribution_summary(detours, causes, trace, worst=2)
    (row,) = rows
    assert row["noise_ns"] == int(detours["duration_ns"].sum())
    assert sum(c["total_ns"] for c in row["causes"]) == row["noise_ns"]
    assert pytest.approx(sum(c["share_pct"] for c in row["causes"])) == 100.0
    worst = row["worst"]
    assert worst[0]["duration_ns"] == detours["duration_ns"].max()
    assert sum(s["duration_ns"] for s in worst[0]["split"]) == worst[0]["duration_ns"]
    offsets = [e["offset_ns"] for e in worst[0]["chain"]]
    assert offsets == sorted(offsets) and all(0 <= o <= worst[0]["duration_ns"] for o in offsets)
