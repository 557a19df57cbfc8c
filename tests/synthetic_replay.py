"""A randomised synthetic trace for the attribution replay, and what the
attribution makes of it (tests/unit/test_replay_golden.py; its golden file
is written by tests/fixtures/make_replay_golden.py).

The trace, CPU by CPU in three bursts (each in its own CHUNK_NS chunk of
spans), has local timer interrupts running hrtimers (tick_ functions and
others, waking the span owner or another task, or a wakeup before any),
nested device IRQs, IPIs and other vectors, softirqs after them, page
faults, wakeups, exits lost or with the wrong number, exits without an
entry, equal time stamps, switches missing from the trace (a woken task
then shows up in its events), NMIs (known by their end and length) and the
osnoise tracer's noise events (irq, softirq, NMI, thread) for the same
handlers. The spans lie in the bursts (some begin inside a handler), across
them, in the quiet time between events and after the traced time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from noisescope.tables import Table
from noisescope.trace.attribute import Labels, attribute, build_timeline
from noisescope.trace.events import EVENT_COLUMNS, SWITCH_COLUMNS, TraceEvents

GOLDEN = Path(__file__).parent / "fixtures" / "traces" / "replay_golden.json.gz"
SEED = 15
CPUS = (0, 1)
BURSTS_NS = (100_000_000, 1_200_000_000, 2_300_000_000)  # each in a chunk of its own
ACTIVITIES = 150  # per burst and CPU
HRTIMERS = ("tick_nohz_handler", "tick_sched_timer", "hrtimer_wakeup", "it_real_fn",
            "watchdog_timer_fn")
IRQS = ((27, "virtio0-input.0"), (28, "virtio0-output.0"), (30, "eth0"))
IPIS = ("reschedule", "call_function", "call_function_single", "irq_work")
OTHER = ("thermal_apic", "x86_platform_ipi")
SOFTIRQS = ((1, "TIMER"), (3, "NET_RX"), (7, "SCHED"), (8, "HRTIMER"), (9, "RCU"))
STATES = ("R", "R+", "S", "D", "I")


class _CpuStream:
    """One CPU's events and switches, activity by activity."""

    def __init__(self, cpu: int, rng: np.random.Generator):
        self.cpu, self.rng = cpu, rng
        self.tasks = [(0, f"swapper/{cpu}"), (100 + cpu, f"ns-detour/{cpu}"),
                      (50 + cpu, f"kworker/{cpu}:1"), (10 + cpu, f"ksoftirqd/{cpu}"), (300, "app"),
                      (301, "app-2")]
        self.current = self.tasks[1]
        self.woken: list[tuple[int, str]] = []
        self.events: list[tuple] = []  # EVENT_COLUMNS
        self.switches: list[tuple] = []  # SWITCH_COLUMNS
        self.ts = 0

    def ev(self, name: str, number: int = 0, text: str = "") -> None:
        self.events.append((self.cpu, self.ts, name, self.current[0], number, text))

    def step(self, most: int = 2_000) -> None:
        self.ts += int(self.rng.choice([0, 10, int(self.rng.integers(100, most))],
                                       p=[0.08, 0.07, 0.85]))

    def wakeup(self, owner: float = 0.0) -> None:
        """A task woken: the CPU's sampler (the owner of its late wakeups) with
        probability `owner`, else any task."""
        sampler = self.rng.random() < owner
        who = self.tasks[1 if sampler else int(self.rng.integers(1, len(self.tasks)))]
        self.ev("sched_wakeup", who[0], who[1])
        self.woken.append(who)

    def handler_body(self, hard: bool) -> None:
        """What runs inside a handler: hrtimers (hard ones), each of which may
        wake a task, or a wakeup before any; a nested IPI, maybe with an hrtimer."""
        rng = self.rng
        if rng.random() < (0.15 if hard else 0.35):
            self.step()
            self.wakeup(owner=0.4 if hard else 0.0)
        if hard:
            for _ in range(int(rng.choice([0, 1, 2, 3], p=[0.2, 0.45, 0.25, 0.1]))):
                self.step()
                self.ev("hrtimer_expire_entry", 0, str(rng.choice(HRTIMERS)))
                if rng.random() < 0.3:
                    self.step()
                    self.wakeup(owner=0.4)
        if rng.random() < 0.1:  # a nested IPI; an hrtimer in it counts for the hard IRQ below
            self.step()
            self.ev("irq_work_entry", 246)
            if rng.random() < 0.4:
                self.step()
                self.ev("hrtimer_expire_entry", 0, str(rng.choice(HRTIMERS)))
            self.step()
            self.ev("irq_work_exit", 246)

    def osnoise(self, name: str, since: int, text: str) -> None:
        """The osnoise tracer's account of a handler that began at `since`, most times."""
        if self.rng.random() < 0.7:
            self.ev(name, self.ts - since, text)

    def switch(self) -> None:
        rng = self.rng
        nxt = self.woken.pop() if self.woken and rng.random() < 0.7 else \
            self.tasks[int(rng.integers(0, len(self.tasks)))]
        if nxt == self.current:
            return
        lost = rng.random() < (0.7 if self.current[0] == 0 else 0.2)  # most out of idle
        if not lost:
            self.switches.append((self.cpu, self.ts, self.current[1], self.current[0], 120,
                                  str(rng.choice(STATES)), nxt[1], nxt[0], 120))
        self.current = nxt
        self.woken.clear()

    def timer(self) -> None:
        rng = self.rng
        since = self.ts
        self.ev("local_timer_entry", 236)
        self.handler_body(hard=True)
        self.step(6_000)
        if rng.random() < 0.9:
            self.ev("local_timer_exit", 236)
        self.osnoise("irq_noise", since, "local_timer:236")
        if rng.random() < 0.5:
            vec, name = SOFTIRQS[int(rng.integers(0, len(SOFTIRQS)))]
            self.step()
            since = self.ts
            self.ev("softirq_entry", vec, name)
            if name == "HRTIMER":  # hrtimers run in a softirq: no hard IRQ's (but a lost exit's)
                self.step()
                self.ev("hrtimer_expire_entry", 0, str(rng.choice(HRTIMERS)))
            self.step(4_000)
            if rng.random() < 0.93:
                self.ev("softirq_exit", vec, name)
            self.osnoise("softirq_noise", since, name)

    def irq(self) -> None:
        rng = self.rng
        irq, name = IRQS[int(rng.integers(0, len(IRQS)))]
        since = self.ts
        self.ev("irq_handler_entry", irq, name)
        self.handler_body(hard=True)
        if rng.random() < 0.2:  # nested: another device's IRQ
            other, other_name = IRQS[int(rng.integers(0, len(IRQS)))]
            self.step()
            self.ev("irq_handler_entry", other, other_name)
            self.step()
            self.ev("irq_handler_exit", other)
        self.step(5_000)
        roll = rng.random()
        if roll < 0.85:
            self.ev("irq_handler_exit", irq)
        elif roll < 0.92:
            self.ev("irq_handler_exit", irq + 1)  # the wrong number: no entry matches
        self.osnoise("irq_noise", since, f"{name}:{irq}")

    def vector(self, vectors: tuple[str, ...]) -> None:
        vector = str(self.rng.choice(vectors))
        since = self.ts
        self.ev(f"{vector}_entry", 250)
        self.handler_body(hard=False)
        self.step(3_000)
        if self.rng.random() < 0.9:
            self.ev(f"{vector}_exit", 250)
        self.osnoise("irq_noise", since, f"{vector}:250")

    def activity(self) -> None:
        rng = self.rng
        what = rng.choice(["timer", "irq", "ipi", "other", "fault", "wakeup", "switch", "nmi",
                           "noise", "stray"],
                          p=[0.2, 0.1, 0.1, 0.03, 0.07, 0.07, 0.27, 0.04, 0.06, 0.06])
        if what == "switch" or (self.woken and rng.random() < 0.3):
            self.switch()
        elif what == "timer":
            self.timer()
        elif what == "irq":
            self.irq()
        elif what in ("ipi", "other"):
            self.vector(IPIS if what == "ipi" else OTHER)
        elif what == "fault":
            self.ev(str(rng.choice(["page_fault_user", "page_fault_kernel"])), 6)
        elif what == "wakeup":
            self.wakeup()
        elif what == "nmi":
            self.ev("nmi_handler", int(rng.integers(300, 3_000)), "perf_event_nmi_handler")
            if rng.random() < 0.5:
                self.ev("nmi_noise", int(rng.integers(300, 3_000)), "")
        elif what == "noise":  # osnoise events with no handler events of their own
            name, text = [("irq_noise", "local_timer:236"), ("softirq_noise", "RCU"),
                          ("thread_noise", "kworker/u4:2")][int(rng.integers(0, 3))]
            self.ev(name, int(rng.integers(200, 8_000)), text)
        else:  # stray: exits without an entry, a workqueue item
            self.ev(str(rng.choice(["local_timer_exit", "softirq_exit", "reschedule_exit",
                                    "workqueue_execute_start"])), 1, "RCU")


def synthetic_trace(seed: int = SEED) -> TraceEvents:
    rng = np.random.default_rng(seed)
    events: list[tuple] = []
    switches: list[tuple] = []
    for cpu in CPUS:
        stream = _CpuStream(cpu, rng)
        for burst in BURSTS_NS:
            stream.ts = burst + int(rng.integers(0, 5_000))
            for _ in range(ACTIVITIES):
                stream.ts += int(rng.exponential(6_000)) // 10 * 10
                stream.activity()
        events += stream.events
        switches += stream.switches
    events.sort(key=lambda row: (row[0], row[1]))  # stable: equal times keep their order
    switches.sort(key=lambda row: (row[0], row[1]))
    event_columns = dict(zip(EVENT_COLUMNS, map(list, zip(*events, strict=True)), strict=True))
    switch_columns = dict(zip(SWITCH_COLUMNS, map(list, zip(*switches, strict=True)), strict=True))
    return tables_from_columns(event_columns, switch_columns)


def tables_from_columns(events: dict, switches: dict) -> TraceEvents:
    kinds = {"cpu": np.int32, "timestamp_ns": np.int64, "pid": np.int32, "number": np.int64,
             "prev_pid": np.int32, "next_pid": np.int32, "prev_prio": np.int32, "next_prio": np.int32}
    return TraceEvents(
        Table({c: np.array(events[c], kinds.get(c, object)) for c in EVENT_COLUMNS}),
        Table({c: np.array(switches[c], kinds.get(c, object)) for c in SWITCH_COLUMNS}))


def spans(seed: int = SEED) -> Table:
    """In the bursts (short and long), in the quiet time, after the traced time."""
    rng = np.random.default_rng(seed + 1)
    rows = []
    for cpu in CPUS:
        for burst in BURSTS_NS:
            starts = burst + rng.integers(0, 900_000, 45)
            lengths = np.where(rng.random(45) < 0.15, rng.integers(50_000, 400_000, 45),
                               rng.integers(500, 30_000, 45))
            rows += [(cpu, int(s), int(d)) for s, d in zip(starts, lengths, strict=True)]
            rows.append((cpu, burst + 950_000_000, 20_000))  # nothing traced happens there
        rows.append((cpu, BURSTS_NS[-1] + 1_000_000_000, 10_000))  # after the coverage
    cpu, start, duration = zip(*rows, strict=True)
    return Table({"cpu": np.array(cpu, np.int32), "start_ns": np.array(start, np.int64),
                  "duration_ns": np.array(duration, np.int64)})


def coverage() -> Table:
    return Table({"cpu": np.array(CPUS, np.int32), "start_ns": np.zeros(len(CPUS), np.int64),
                  "end_ns": np.full(len(CPUS), BURSTS_NS[-1] + 500_000_000, np.int64)})


def injected() -> Table:
    starts = np.array([BURSTS_NS[0] + 200_000, BURSTS_NS[0] + 500_000, BURSTS_NS[1] + 300_000],
                      np.int64)
    return Table({"cpu": np.zeros(3, np.int32), "mode": np.array(["thread", "signal", "signal"], object),
                  "start_ns": starts, "duration_ns": np.array([40_000, 20_000, 60_000], np.int64)})


def without(trace: TraceEvents, names: tuple[str, ...]) -> TraceEvents:
    return TraceEvents(trace.events.filter(~np.isin(trace.events["event"], names)), trace.switches)


# Case name -> (the trace's events left out, owners, osnoise, injected noise)
CASES = {
    "fallback": ((), None, "fallback", True),
    "owner-prefer": ((), {0: 100}, "prefer", False),
    "owner-osnoise-fallback": (("softirq_entry", "softirq_exit", "nmi_handler"), {1: 101},
                               "fallback", False),
}


def columns(table: Table) -> dict:
    return {name: table[name].tolist() for name in table.columns}


def attribution(trace: TraceEvents, every: Table, case: str, parts: int = 1) -> dict:
    """attribute() of the case's spans, in `parts` calls cut between the first
    and second burst (chunks whole, labels and tasks kept from call to call)."""
    dropped, owners, osnoise, with_injections = CASES[case]
    trace = without(trace, dropped)
    labels, tasks = Labels(), {}
    cut = BURSTS_NS[1] - 1_000_000
    pieces = [every] if parts == 1 else [every.filter(every["start_ns"] < cut),
                                         every.filter(every["start_ns"] >= cut)]
    primary, causes = [], []
    for piece in pieces:
        result = attribute(piece, trace, coverage(), owners=owners,
                           injected=injected() if with_injections else None, osnoise=osnoise,
                           labels=labels, tasks=tasks)
        primary.append(result.primary)
        causes.append(result.causes)
    return {"primary": columns(Table.concat(primary)), "causes": columns(Table.concat(causes)),
            "labels": [list(pair) for pair in labels.pairs],
            "tasks": [[pid, comm, task] for (pid, comm), task in tasks.items()]}


def timelines(trace: TraceEvents) -> dict:
    """Each CPU's whole timeline, its sampler the owner, with osnoise preferred."""
    out = {}
    for cpu in CPUS:
        part = trace.read(cpu, 0, 2**62)
        timeline = build_timeline(part.events, part.switches, Labels(), {}, {"irq", "softirq", "nmi"},
                                  owner=100 + cpu)
        out[str(cpu)] = {name: getattr(timeline, name).tolist()
                         for name in ("starts", "label", "task", "pid", "since", "owner_wakeups",
                                      "owner_sleeps")}
    return out
