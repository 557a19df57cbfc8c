"""Context switches the trace does not have, put back.

Some switches never reach the trace: those out of the idle task on some
kernels (this project's 6.18 VM records none), and every switch out of some
tasks (the VM's sandbox process). A task then shows up without a switch to
it: in the context of its later events, or as a later switch's `prev`. The
kernel switches to a woken task as soon as the handler that woke it ends
(from idle, or preempting a task of lower priority), so that is when it is
taken to have got the CPU; without a wakeup of it on the CPU, at its first
event seen there; else at the switch that revealed it (it ran for no time).
Where the trace has no handler events (only scheduler events), the wakeup
itself is the handler's end.
"""

from __future__ import annotations

import numpy as np

from ..tables import Table, repeated
from .events import IPI_VECTORS, LOCAL_TIMER, OTHER_VECTORS, SWITCH_COLUMNS

UNKNOWN_STATE = "?"  # prev_state of an inferred switch
_VECTORS = (LOCAL_TIMER, *IPI_VECTORS, *OTHER_VECTORS)
HANDLER_ENTRIES = frozenset([f"{v}_entry" for v in _VECTORS] + ["irq_handler_entry", "softirq_entry"])
HANDLER_EXITS = frozenset([f"{v}_exit" for v in _VECTORS] + ["irq_handler_exit", "softirq_exit"])


class _Cpu:
    """One CPU's replay: who runs, and since the last switch the tasks woken,
    when the handler that woke each ended, and the first event in the
    context of each task other than the current one."""

    def __init__(self) -> None:
        self.pid, self.comm, self.depth = -1, "", 0
        self.woken: dict[int, str] = {}
        self.handler_ends: dict[int, int] = {}
        self.seen: dict[int, int] = {}
        self.inferred: list[tuple[int, int, str, int, str]] = []  # ts, prev pid/comm, next pid/comm

    def switched(self, pid: int, comm: str) -> None:
        self.pid, self.comm, self.depth = pid, comm, 0
        self.woken.clear()
        self.handler_ends.clear()
        self.seen.clear()

    def missed(self, evidence_ts: int, pid: int, comm: str) -> None:
        ts = self.handler_ends.get(pid, self.seen.get(pid, evidence_ts))
        self.inferred.append((ts, self.pid, self.comm, pid, comm))
        self.switched(pid, comm)

    def event(self, ts: int, name: str, pid: int, number: int, text: str) -> None:
        if pid == self.pid:  # still running: the woken tasks did not get the CPU yet
            self.handler_ends.clear()
        elif self.pid >= 0 and pid >= 0:
            self.seen.setdefault(pid, ts)
            if pid in self.woken:
                self.missed(ts, pid, self.woken[pid])
        if name in HANDLER_ENTRIES:
            self.depth += 1
        elif name in HANDLER_EXITS:
            self.depth = max(0, self.depth - 1)
        elif name == "sched_wakeup":
            self.woken.setdefault(number, text)
        if self.depth == 0:
            for woken in self.woken:
                self.handler_ends.setdefault(woken, ts)

    def switch(self, ts: int, prev_pid: int, prev_comm: str, next_pid: int, next_comm: str) -> None:
        if self.pid >= 0 and prev_pid >= 0 and prev_pid != self.pid:
            self.missed(ts, prev_pid, prev_comm)
        self.switched(next_pid, next_comm)


def complete_switches(switches: Table, events: Table) -> Table:
    """`switches` (sorted by CPU, then time) with the missing ones added:
    column `inferred` tells them apart (prev_state '?', priorities -1). An
    inferred switch at the same time as an event comes after it."""
    done = [switches]
    for cpu in np.unique(switches["cpu"]).tolist():
        mine, theirs = switches.where(cpu=cpu), events.where(cpu=cpu)
        replay = _Cpu()
        times = np.concatenate([theirs["timestamp_ns"], mine["timestamp_ns"]])
        order = np.lexsort((np.arange(len(times)), times))  # events first at equal times
        n_events = theirs.rows
        ts, name, pid, number, text = (theirs[c].tolist() for c in ("timestamp_ns", "event",
                                                                    "pid", "number", "name"))
        sw_ts, prev_pid, prev_comm, next_pid, next_comm = (
            mine[c].tolist() for c in ("timestamp_ns", "prev_pid", "prev_comm", "next_pid",
                                       "next_comm"))
        event, switch = replay.event, replay.switch
        for i in order.tolist():
            if i < n_events:
                event(ts[i], name[i], pid[i], number[i], text[i])
            else:
                i -= n_events
                switch(sw_ts[i], prev_pid[i], prev_comm[i], next_pid[i], next_comm[i])
        if replay.inferred:
            ts, prev_pid, prev_comm, next_pid, next_comm = zip(*replay.inferred, strict=True)
            count = len(ts)
            done.append(Table({
                "cpu": np.full(count, cpu, np.int32), "timestamp_ns": np.array(ts, np.int64),
                "prev_comm": np.array(prev_comm, object), "prev_pid": np.array(prev_pid, np.int32),
                "prev_prio": np.full(count, -1, np.int32),
                "prev_state": repeated(UNKNOWN_STATE, count),
                "next_comm": np.array(next_comm, object), "next_pid": np.array(next_pid, np.int32),
                "next_prio": np.full(count, -1, np.int32)}))
    flagged = [Table({**{c: t[c] for c in SWITCH_COLUMNS},
                      "inferred": np.full(t.rows, k > 0)}) for k, t in enumerate(done)]
    merged = Table.concat(flagged)
    if merged.rows == 0:
        return Table({**{c: switches[c] for c in SWITCH_COLUMNS}, "inferred": np.zeros(0, bool)})
    order = np.lexsort((merged["inferred"], merged["timestamp_ns"], merged["cpu"]))
    return merged.filter(order)
