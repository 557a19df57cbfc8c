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

from .. import _native
from ..tables import Table, dictionary_codes, repeated
from .events import IPI_VECTORS, LOCAL_TIMER, OTHER_VECTORS, SWITCH_COLUMNS

UNKNOWN_STATE = "?"  # prev_state of an inferred switch
_VECTORS = (LOCAL_TIMER, *IPI_VECTORS, *OTHER_VECTORS)
HANDLER_ENTRIES = frozenset([f"{v}_entry" for v in _VECTORS] + ["irq_handler_entry", "softirq_entry"])
HANDLER_EXITS = frozenset([f"{v}_exit" for v in _VECTORS] + ["irq_handler_exit", "softirq_exit"])


def _what(name: str) -> int:
    """What an event of this name is to the replay (replay.h)."""
    if name in HANDLER_ENTRIES:
        return _native.SWITCH_HANDLER_ENTRY
    if name in HANDLER_EXITS:
        return _native.SWITCH_HANDLER_EXIT
    return _native.SWITCH_WAKEUP if name == "sched_wakeup" else _native.SWITCH_OTHER


EventCodes = tuple[np.ndarray, list[str]]  # dictionary_codes() of an events table's names


def _inferred(cpu: int, mine: Table, theirs: Table, event_codes: EventCodes | None) -> Table:
    """The switches one CPU's trace missed, by the replay of its switches
    (`mine`) and events (`theirs`) in the native core: who runs, and since
    the last switch the tasks woken, when the handler that woke each ended,
    and the first event in the context of each task other than the current one."""
    codes, names = event_codes or dictionary_codes(theirs["event"])
    what = np.array([_what(name) for name in names], np.int64).reshape(-1)[codes]
    times = np.concatenate([theirs["timestamp_ns"], mine["timestamp_ns"]])
    order = np.argsort(times, kind="stable")  # events first at equal times
    out = tuple(np.empty(len(times), np.int64) for _ in range(5))
    ts, pid, woken = (int64_column(theirs[c]) for c in ("timestamp_ns", "pid", "number"))
    count = _native.replay_switches(
        (ts, what, pid, woken),
        tuple(int64_column(mine[c]) for c in ("timestamp_ns", "prev_pid", "next_pid")), order, out)
    ts, prev_pid, prev_comm, next_pid, next_comm = (column[:count] for column in out)
    # the replay names a command by where it read it (replay.h)
    comms = (theirs["name"], mine["prev_comm"], mine["next_comm"])
    return Table({
        "cpu": np.full(count, cpu, np.int32), "timestamp_ns": ts,
        "prev_comm": _picked(comms, prev_comm), "prev_pid": prev_pid.astype(np.int32),
        "prev_prio": np.full(count, -1, np.int32), "prev_state": repeated(UNKNOWN_STATE, count),
        "next_comm": _picked(comms, next_comm), "next_pid": next_pid.astype(np.int32),
        "next_prio": np.full(count, -1, np.int32)})


def _picked(columns: tuple[np.ndarray, ...], index: np.ndarray) -> np.ndarray:
    """The values at `index` of the columns taken one after the other, without
    joining them (a chunk's tens of thousands of events, for a few switches)."""
    picked = np.empty(len(index), dtype=object)
    start = 0
    for column in columns:
        inside = (index >= start) & (index < start + len(column))
        picked[inside] = column[index[inside] - start]
        start += len(column)
    return picked


def int64_column(values: np.ndarray) -> np.ndarray:
    """A column as the native core borrows it: contiguous int64 (a copy only if needed)."""
    return np.ascontiguousarray(values, np.int64)


def complete_switches(switches: Table, events: Table, event_codes: EventCodes | None = None
                      ) -> Table:
    """`switches` (sorted by CPU, then time) with the missing ones added:
    column `inferred` tells them apart (prev_state '?', priorities -1). An
    inferred switch at the same time as an event comes after it.
    `event_codes`: dictionary_codes(events["event"]), if the caller has them
    (taken where the events are all of one CPU, as build_timeline gives them)."""
    recorded = Table({c: switches[c] for c in SWITCH_COLUMNS})
    column = switches["cpu"]
    cpus = [int(column[0])] if len(column) and (column == column[0]).all() else \
        np.unique(column).tolist()  # (one CPU's, as build_timeline gives: no sort)
    parts = [recorded]
    for cpu in cpus:  # (a CPU's own table, as build_timeline gives, is not copied)
        mine = recorded if len(cpus) == 1 else recorded.where(cpu=cpu)
        whole = bool(np.all(events["cpu"] == cpu))
        theirs = events if whole else events.where(cpu=cpu)
        inferred = _inferred(cpu, mine, theirs, event_codes if whole else None)
        if inferred.rows:
            parts.append(inferred)
    merged = Table.concat(parts) if len(parts) > 1 else recorded
    merged = Table({**merged, "inferred": np.arange(merged.rows) >= recorded.rows})
    # by CPU, then time; at equal times the recorded first (they come first in merged, and
    # the sorts are stable); one CPU's, as build_timeline gives them, by one sort
    times = merged["timestamp_ns"]
    order = (np.argsort(times, kind="stable") if len(cpus) == 1
             else np.lexsort((times, merged["cpu"])))
    return merged if np.array_equal(order, np.arange(merged.rows)) else merged.filter(order)
