"""SMT sibling occupancy on a hand-made timeline and on a real sched_switch trace.

The real trace was captured on this project's 2-vCPU VM, which has no SMT:
tests/fixtures/capture_sched_switch.py ran a workload task on CPU 0, and on
CPU 1 a second workload task, then a foreign task (sha256sum), then nothing
of ours; the test declares CPUs 0 and 1 siblings. The VM is shared, so other
tasks ran on CPU 1 as well (they count as foreign, as they should).
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from noisescope.tables import Table
from noisescope.trace.events import parse_text
from noisescope.trace.occupancy import Occupancy, occupancy, sibling_pairs

from ..conftest import FIXTURES
from .test_trace_events import identity

TRACE = FIXTURES / "traces" / "sched_switch_smt.txt.gz"
META = json.loads((FIXTURES / "traces" / "sched_switch_smt.json").read_text())


def switches(events: list[tuple[int, int, int, int]]) -> Table:
    """(cpu, timestamp_ns, prev_pid, next_pid) -> a sched_switch table."""
    cpu, ts, prev, nxt = (np.array(c) for c in zip(*events, strict=True))
    names = np.array([f"task{p}" for p in nxt], object)
    return Table({"cpu": cpu, "timestamp_ns": ts, "prev_comm": np.array([f"task{p}" for p in prev],
                  object), "prev_pid": prev, "next_comm": names, "next_pid": nxt,
                  "prev_state": np.array(["R"] * len(cpu), object)})


def captured() -> Table:
    """The fixture's switches, read by the tracing layer's text reader (the
    `mono` trace clock prints seconds: they become nanoseconds as they are)."""
    with gzip.open(TRACE, "rt") as lines:
        switches = parse_text(lines, identity).switches
    assert switches.rows == 1035  # every line of the fixture
    return switches


def test_exact_shares_on_a_known_timeline():
    # CPU 0 runs workload pid 10 during [0, 100) apart from [40, 50) (pid 77).
    # CPU 1: pid 11 (workload) until 30, idle until 60, pid 99 (foreign) until 90, idle after.
    # CPU 2 (a third thread of the core) has no event: what it ran is unknown.
    events = switches([(0, 0, 0, 10), (0, 40, 10, 77), (0, 50, 77, 10), (0, 100, 10, 0),
                       (1, 0, 0, 11), (1, 30, 11, 0), (1, 60, 0, 99), (1, 90, 99, 0)])
    rows = occupancy(events, sibling_pairs([(0, 1, 2)]), workload_pids={10, 11}, cpus=[0],
                     start_ns=0, end_ns=100)
    assert rows == [Occupancy(cpu=0, sibling=1, workload_ns=90, same_ns=30, idle_ns=30,
                              foreign_ns=30, unknown_ns=0),
                    Occupancy(cpu=0, sibling=2, workload_ns=90, same_ns=0, idle_ns=0,
                              foreign_ns=0, unknown_ns=90)]
    assert rows[0].share("same") == pytest.approx(1 / 3)
    # Before the first event of a CPU, what ran is its first prev_pid.
    late = switches([(0, 0, 0, 10), (1, 50, 11, 0)])
    row = occupancy(late, {0: (1,)}, workload_pids={10, 11}, cpus=[0], start_ns=0,
                    end_ns=100)[0]
    assert (row.same_ns, row.idle_ns, row.unknown_ns) == (50, 50, 0)
    by_name = occupancy(events, {0: (1,)}, workload_comm=r"^task1[01]$", cpus=[0], start_ns=0,
                        end_ns=100)
    assert by_name == rows[:1]
    # A CPU that never switched in the window ran what its other events saw
    # current (its timer interrupts): pid 99 throughout, foreign. An event
    # outside the window says nothing about it.
    observed = Table({"cpu": np.array([2, 2, 2], np.int32), "timestamp_ns": np.array([-5, 20, 70]),
                      "pid": np.array([10, 99, 99])})
    seen = occupancy(events, sibling_pairs([(0, 1, 2)]), workload_pids={10, 11}, cpus=[0],
                     start_ns=0, end_ns=100, observed=observed)
    assert seen[0] == rows[0]  # CPU 1 switched: its switches decide
    assert seen[1] == Occupancy(cpu=0, sibling=2, workload_ns=90, same_ns=0, idle_ns=0,
                                foreign_ns=90, unknown_ns=0)
    outside = occupancy(events, {0: (2,)}, workload_pids={10, 11}, cpus=[0], start_ns=0,
                        end_ns=100, observed=observed.filter(observed["timestamp_ns"] < 0))
    assert outside[0].unknown_ns == 90
    # No switch anywhere in the window: both CPUs known from observations only.
    quiet = switches([(0, 200, 10, 0)]).filter(np.zeros(1, bool))
    both = Table({"cpu": np.array([0, 1], np.int32), "timestamp_ns": np.array([50, 60]),
                  "pid": np.array([10, 99])})
    assert occupancy(quiet, {0: (1,)}, workload_pids={10}, cpus=[0], start_ns=0, end_ns=100,
                     observed=both) == [Occupancy(0, 1, 100, 0, 0, 100, 0)]


def brute_force(events: Table, cpu: int, sibling: int, members: set[int], start: int, end: int,
                step: int) -> dict[str, int]:
    """Point sampling every `step` ns, walking each CPU's events in time order."""
    def timeline(c):
        return sorted((int(t), int(p), int(n)) for cc, t, p, n in zip(
            events["cpu"], events["timestamp_ns"], events["prev_pid"], events["next_pid"],
            strict=True) if cc == c and start <= t <= end)

    class Walker:
        def __init__(self, mine):
            self.mine, self.next_index = mine, 0
            self.current = mine[0][1] if mine else None

        def at(self, t):
            while self.next_index < len(self.mine) and self.mine[self.next_index][0] <= t:
                self.current = self.mine[self.next_index][2]
                self.next_index += 1
            return self.current

    own, other = Walker(timeline(cpu)), Walker(timeline(sibling))
    totals = {"workload": 0, "same": 0, "idle": 0, "foreign": 0}
    for t in range(start, end, step):
        running, beside = own.at(t), other.at(t)
        if running not in members:
            continue
        totals["workload"] += step
        key = "idle" if beside == 0 else "same" if beside in members else "foreign"
        totals[key] += step
    return totals


def test_a_captured_trace_agrees_with_point_sampling():
    events = captured()
    members = set(META["workload_pids"])
    start, end = META["start_ns"], META["end_ns"]
    rows = {r.cpu: r for r in occupancy(events, sibling_pairs(META["siblings_declared"]),
                                        workload_pids=members, start_ns=start, end_ns=end)}
    for cpu, sibling in ((0, 1), (1, 0)):
        row, expected = rows[cpu], brute_force(events, cpu, sibling, members, start, end, 10_000)
        assert row.sibling == sibling and row.unknown_ns == 0
        assert row.workload_ns == pytest.approx(expected["workload"], rel=0.01)
        for category in ("same", "idle", "foreign"):
            assert getattr(row, f"{category}_ns") == pytest.approx(
                expected[category], abs=0.005 * expected["workload"])
        assert row.same_ns + row.idle_ns + row.foreign_ns + row.unknown_ns == row.workload_ns
    # Both ran the workload at the same time: the same time seen from either CPU.
    assert rows[0].same_ns == rows[1].same_ns > 0
    # The scenario: CPU 0's workload task ran most of the 1.24 s; the sibling's
    # workload task at most its 0.4 s; the foreign phase (and the machine's
    # other tasks) make up the rest.
    assert rows[0].workload_ns > 0.6 * (end - start)
    assert rows[0].same_ns < 0.45 * 10**9
    assert rows[0].foreign_ns > rows[0].same_ns
