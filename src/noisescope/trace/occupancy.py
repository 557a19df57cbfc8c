"""SMT sibling occupancy: while a CPU ran the workload, what did its sibling run?

From sched_switch events (a Table with cpu, timestamp_ns, prev_comm, prev_pid,
next_comm, next_pid, prev_state, as the tracing layer parses them), for each
workload CPU and each of its SMT siblings: the time the CPU ran a workload
task, split by what the sibling did meanwhile: ran a task of the same
workload, was idle (pid 0), ran a foreign task, or is unknown (no event on
the sibling yet tells what it ran). Core scheduling should drive `foreign`
to zero; `nosmt` removes the siblings altogether.

Each CPU's timeline is a step function: from one of its switch events to
the next it runs `next_pid`; before its first event in the window it ran
that event's `prev_pid`. A CPU with no switch in the window ran one task
throughout: the one any other event recorded on it (`observed`: cpu,
timestamp_ns, pid, e.g. its timer interrupts) says was current.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass

import numpy as np

from ..tables import Table

UNKNOWN_PID = -1
CATEGORIES = ("same", "idle", "foreign", "unknown")


@dataclass(frozen=True)
class Occupancy:
    cpu: int
    sibling: int
    workload_ns: int  # time `cpu` ran a workload task inside the window
    same_ns: int  # ... while the sibling ran a task of the same workload
    idle_ns: int
    foreign_ns: int
    unknown_ns: int

    def share(self, category: str) -> float | None:
        """Fraction of workload_ns (None when the CPU never ran the workload)."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; one of {CATEGORIES}")
        return getattr(self, f"{category}_ns") / self.workload_ns if self.workload_ns else None

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update({f"{c}_share": self.share(c) for c in CATEGORIES})
        return data


def sibling_pairs(groups: Iterable[Iterable[int]]) -> dict[int, tuple[int, ...]]:
    """{cpu: its siblings} from thread-sibling groups such as host facts' smt_siblings."""
    pairs = {}
    for group in groups:
        members = tuple(sorted(set(group)))
        for cpu in members:
            pairs[cpu] = tuple(c for c in members if c != cpu)
    return pairs


def _timeline(events: Table, cpu: int, start_ns: int, end_ns: int,
              observed: Table | None) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints and the pid running from each one on (without a switch in
    the window, the task an observation saw throughout)."""
    mine = events.where(cpu=cpu)
    if mine.rows == 0:
        return np.array([start_ns], np.int64), np.array([_current(observed, cpu, start_ns, end_ns)],
                                                         np.int64)
    order = np.argsort(mine["timestamp_ns"], kind="stable")
    times = mine["timestamp_ns"][order].astype(np.int64)
    after = mine["next_pid"][order].astype(np.int64)
    before = np.int64(mine["prev_pid"][order][0])
    return np.concatenate(([start_ns], times)), np.concatenate(([before], after))


def _current(observed: Table | None, cpu: int, start: int, end: int) -> int:
    """The task an observation on `cpu` inside [start, end] saw current
    (UNKNOWN_PID without one). Used only where the CPU did not switch in that
    window, so any of them will do."""
    if observed is None or not observed.rows:
        return UNKNOWN_PID
    times = observed["timestamp_ns"]
    pids = observed["pid"][(observed["cpu"] == cpu) & (times >= start) & (times <= end)]
    return int(pids[0]) if len(pids) else UNKNOWN_PID


def _state_at(points: np.ndarray, times: np.ndarray, pids: np.ndarray) -> np.ndarray:
    return pids[np.searchsorted(times, points, side="right") - 1]


def occupancy(events: Table, siblings: dict[int, tuple[int, ...]], *,
              workload_pids: Collection[int] = (), workload_comm: str | None = None,
              cpus: Iterable[int] | None = None, start_ns: int | None = None,
              end_ns: int | None = None, observed: Table | None = None) -> list[Occupancy]:
    """Sibling occupancy for every workload CPU and sibling pair.

    A task belongs to the workload when its pid is in workload_pids or its comm
    matches the regular expression workload_comm. The window defaults to the
    first and last event of the table. `observed` (cpu, timestamp_ns, pid:
    the task current when any other event fired) tells what a CPU without a
    switch in the window ran."""
    if events.rows == 0 and (start_ns is None or end_ns is None):
        return []  # no window to look at
    times = events["timestamp_ns"].astype(np.int64)
    start = int(times.min()) if start_ns is None else int(start_ns)
    end = int(times.max()) if end_ns is None else int(end_ns)
    events = events.filter((times >= start) & (times <= end))
    members = set(int(p) for p in workload_pids)
    if workload_comm is not None:
        pattern = re.compile(workload_comm)
        for column_pid, column_comm in (("prev_pid", "prev_comm"), ("next_pid", "next_comm")):
            for pid, comm in zip(events[column_pid], events[column_comm], strict=True):
                if pattern.search(str(comm)):
                    members.add(int(pid))
    members.discard(0)
    member_array = np.array(sorted(members), np.int64)
    measured = sorted(set(cpus) if cpus is not None else
                      {int(c) for c in np.unique(events["cpu"])} & set(siblings))
    result = []
    for cpu in measured:
        own_times, own_pids = _timeline(events, cpu, start, end, observed)
        for sibling in siblings.get(cpu, ()):
            other_times, other_pids = _timeline(events, sibling, start, end, observed)
            points = np.union1d(own_times, other_times)
            points = points[(points >= start) & (points < end)]
            lengths = np.diff(np.append(points, end))
            running = np.isin(_state_at(points, own_times, own_pids), member_array)
            beside = _state_at(points, other_times, other_pids)
            unknown = beside == UNKNOWN_PID
            idle = beside == 0
            same = np.isin(beside, member_array)
            foreign = ~(unknown | idle | same)
            result.append(Occupancy(
                cpu, sibling, int(lengths[running].sum()),
                *(int(lengths[running & mask].sum()) for mask in (same, idle, foreign, unknown))))
    return result
