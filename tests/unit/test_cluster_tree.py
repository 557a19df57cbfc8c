"""The cluster protocol's tree (cluster/tree.py) and the protocol on it (session.py),
its ranks as threads of this process talking through a fake COMM_WORLD (the real
mpirun runs are in tests/e2e/test_cluster_tree.py). Threads share CLOCK_MONOTONIC,
so every true clock offset is 0."""

from __future__ import annotations

import math
import pickle
import sys
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest

from noisescope.cluster.mpi import World
from noisescope.cluster.scan import fleet_bundle
from noisescope.cluster.session import Session
from noisescope.cluster.tree import Star, Tree
from noisescope.errors import UsageError
from noisescope.scan import ScanOptions

from ..synthetic_fleet import CPUS, PROBES, SMALL_NS, Planted, fleet_nodes, fleet_of


def reached(tree: Tree, rank: int) -> list[int]:
    """`rank` and every rank found by following children from it, repeats kept."""
    found, frontier = [rank], [rank]
    while frontier:
        frontier = [child for r in frontier for child in tree.children(r)]
        found += frontier
    return found


@pytest.mark.parametrize("shape", [Tree, Star])
def test_every_rank_is_reached_once_within_log2_hops(shape):
    for size in range(1, 71):
        tree = shape(size)
        assert sorted(reached(tree, 0)) == list(range(size)), size  # each rank exactly once
        for rank in range(size):
            for child in tree.children(rank):
                assert tree.parent(child) == rank
                assert tree.depth(child) == tree.depth(rank) + 1
            below = reached(tree, rank)
            assert sorted(below) == list(tree.subtree(rank))  # contiguous, in rank order
            assert tree.height(rank) == max(map(tree.depth, below)) - tree.depth(rank)
        assert tree.parent(0) is None and tree.depth(0) == 0
        if shape is Tree:
            assert max(map(tree.depth, range(size))) <= math.ceil(math.log2(size)), size
            assert len(tree.children(0)) == math.ceil(math.log2(size))


# -- the protocol over a fake COMM_WORLD ---------------------------------------------

class Aborted(Exception):
    """The job was ended (rank 0's MPI_Abort): a rank's next MPI call ends its thread."""


class FakeComm:
    """One rank's COMM_WORLD: messages (pickled, as mpi4py sends them) in per-rank
    mailboxes; `received` logs the (source, tag) of each message taken."""

    ANY_SOURCE = -1

    def __init__(self, rank: int, boxes: list[list], lock: threading.Lock,
                 aborted: threading.Event):
        self.rank, self.boxes, self.lock, self.aborted = rank, boxes, lock, aborted
        self.received: list[tuple[int, int]] = []

    def Get_rank(self):  # noqa: N802 (mpi4py's names)
        return self.rank

    def Get_size(self):  # noqa: N802
        return len(self.boxes)

    def send(self, payload, dest, tag):
        with self.lock:
            self.boxes[dest].append((self.rank, tag, pickle.dumps(payload)))

    def isend(self, payload, dest, tag):
        self.send(payload, dest, tag)
        return SimpleNamespace(wait=lambda: None)

    def _find(self, source, tag):
        return next((i for i, (s, t, _) in enumerate(self.boxes[self.rank])
                     if t == tag and source in (s, self.ANY_SOURCE)), None)

    def iprobe(self, source, tag, status):
        if self.aborted.is_set():
            raise Aborted
        with self.lock:
            found = self._find(source, tag)
            if found is not None:
                status.source = self.boxes[self.rank][found][0]
            return found is not None

    def recv(self, source, tag):
        with self.lock:
            sender, _, payload = self.boxes[self.rank].pop(self._find(source, tag))
        self.received.append((sender, tag))
        return pickle.loads(payload)

    def Abort(self, code):  # noqa: N802
        self.aborted.set()


class FakeStatus:
    source = None

    def Get_source(self):  # noqa: N802
        return self.source


def fake_worlds(size: int) -> list[World]:
    boxes, lock, aborted = [[] for _ in range(size)], threading.Lock(), threading.Event()
    return [World(SimpleNamespace(COMM_WORLD=FakeComm(rank, boxes, lock, aborted),
                                  Status=FakeStatus, ANY_SOURCE=FakeComm.ANY_SOURCE))
            for rank in range(size)]


TIMEOUT_NS = 1_000_000_000


@pytest.fixture(autouse=True)
def quick_threads():
    """Threads take turns faster: the clock pings go back and forth between them."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    yield
    sys.setswitchinterval(interval)


@dataclass
class Run:
    root: Session
    worlds: list[World]
    started: dict[int, object]  # rank -> what its ready() returned, or the error it raised


def run_ranks(records: list[dict], *, tree=Tree, stops: dict[int, str] | None = None,
              late: dict[int, float] | None = None, failures: dict[int, str] | None = None,
              require_all: bool = False) -> Run:
    """Every rank's session through ready, report and close, each rank a thread, as
    cluster scan (or bsp, `require_all`) goes through them. A rank in `stops` stops
    for good on entering "ready" or "report" (as a rank that hangs); one in `late`
    reports that many seconds after the others; one in `failures` fails to prepare."""
    size = len(records)
    worlds = fake_worlds(size)
    stops, late, failures = stops or {}, late or {}, failures or {}
    sessions: dict[int, Session] = {}
    started: dict[int, object] = {}

    def rank_thread(rank: int) -> None:
        session = sessions[rank] = Session(worlds[rank], TIMEOUT_NS, tree=tree(size))
        if stops.get(rank) == "ready":
            return
        hello = {"node": records[rank]["node"], "cpus": records[rank]["cpus"]}
        try:
            started[rank] = session.ready(hello, failures.get(rank), require_all=require_all)
        except UsageError as error:  # refused, or no START came (its parent stopped)
            started[rank] = error
            return
        except Aborted:
            return
        if stops.get(rank) == "report" or require_all and rank in failures:  # bsp raises
            return
        time.sleep(late.get(rank, 0))
        try:
            session.report({**records[rank], "failure": failures.get(rank)})
            session.close()
        except Aborted:
            pass

    threads = [threading.Thread(target=rank_thread, args=(rank,), daemon=True)
               for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    return Run(sessions[0], worlds, started)


@pytest.fixture(scope="module")
def records():
    planted = Planted.spread(20, noisy=2)
    return planted, [record for _, record in fleet_nodes(planted, SMALL_NS)]


def same(a, b) -> bool:
    """Equal, arrays (of the same dtype) included, at any depth."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def assert_only_parent_and_children(worlds, tree):
    for world in worlds:
        talked = {source for source, _ in world.comm.received}
        assert talked <= {tree.parent(world.rank), *tree.children(world.rank)}, world.rank


def test_every_record_reaches_rank_0_through_its_children_and_the_fleet_is_as_before(records):
    planted, sent = records
    run = run_ranks(sent)
    root, worlds = run.root, run.worlds
    tree = Tree(len(sent))
    assert_only_parent_and_children(worlds, tree)
    assert {s for s, _ in worlds[0].comm.received} == set(tree.children(0)) == {1, 2, 4, 8, 16}
    outcomes = [root.outcomes[r] for r in range(len(sent))]
    assert [o.status for o in outcomes] == ["ok"] * len(sent)
    assert all(same(o.record, r) for o, r in zip(outcomes, sent, strict=True))  # as sent
    # Every thread reads one CLOCK_MONOTONIC: each offset lies within its
    # uncertainty, which adds a round trip's half per hop (more hops, more of it).
    for rank, outcome in enumerate(outcomes):
        offset = outcome.offset
        assert -offset.uncertainty_ns <= offset.offset_ns <= offset.uncertainty_ns, rank
        if rank:
            above = root.outcomes[tree.parent(rank)].offset
            assert offset.uncertainty_ns > above.uncertainty_ns
    # The fleet bundle of these records is the one made of them directly (as rank 0
    # made it when it received every record itself), its offsets apart.
    ours = fleet_bundle(ScanOptions(cpus=CPUS, duration_ns=SMALL_NS, probes=PROBES,
                                    label="synthetic fleet"), root,
                        started="2026-01-01T00:00:00.000000Z",
                        argv=["noisescope", "cluster", "scan"], timeout_ns=TIMEOUT_NS,
                        inject_ranks=None)
    before = fleet_of(planted, sent, SMALL_NS)
    assert ours.table_names == before.table_names
    offsets = ("offset_ns", "offset_uncertainty_ns")
    for name in before.table_names:
        mine, theirs = ours.table(name), before.table(name)
        assert ([(c, mine[c].dtype) for c in mine.columns if c not in offsets]
                == [(c, theirs[c].dtype) for c in theirs.columns if c not in offsets]), name
        assert ([{k: v for k, v in row.items() if k not in offsets} for row in mine.to_rows()]
                == [{k: v for k, v in row.items() if k not in offsets}
                    for row in theirs.to_rows()]), name
    for kind in ("fleet", "distribution", "alignment", "differences"):
        assert ours.summaries[kind] == before.summaries[kind], kind


def measured(run: Run) -> list[int]:
    return [rank for rank, o in sorted(run.root.outcomes.items()) if o.status == "ok" and o.record]


# (rank that stops, where): a relay under a relay, the same rank after START, a leaf,
# rank 0's child with the largest subtree, rank 0's leaf child.
@pytest.mark.parametrize("stopped, at", [(12, "ready"), (12, "report"), (15, "ready"),
                                         (16, "report"), (1, "ready")])
def test_a_rank_that_stops_is_reported_missing_by_its_parent_with_its_subtree(records, stopped,
                                                                            at):
    _, sent = records
    run = run_ranks(sent, stops={stopped: at})
    tree = Tree(len(sent))
    parent, lost = tree.parent(stopped), list(tree.subtree(stopped))
    assert run.root.unanswered == lost
    assert measured(run) == [r for r in range(len(sent)) if r not in lost]
    said = {"ready": f"not ready within 1 s of rank {parent}",
            "report": f"no result within 1 s of rank {parent}'s end (died or hangs)"}[at]
    for rank in lost:
        assert run.root.outcomes[rank].reason == (
            said if rank == stopped else f"below rank {stopped}, which did not answer rank {parent}")
    assert run.worlds[0].comm.aborted.is_set()  # rank 0 ended the job
    assert_only_parent_and_children(run.worlds, tree)


def test_a_rank_later_than_its_parent_is_waited_for_with_a_stopped_rank_below_it(records):
    """Rank 12 ends 0.6 s after its parent 8 (within the 1 s timeout); rank 14, below
    it, never reports. Rank 12 waits 1 s for 14 and then answers, 1.6 s after rank 8's
    end: rank 8 waits that long for it, since rank 12 said when it ended."""
    _, sent = records
    run = run_ranks(sent, stops={14: "report"}, late={12: 0.6})
    assert run.root.unanswered == [14, 15]
    assert run.root.outcomes[14].reason.endswith("of rank 12's end (died or hangs)")
    assert measured(run) == [r for r in range(len(sent)) if r not in (14, 15)]


def test_a_failed_rank_passes_on_its_subtree_and_is_listed_with_its_reason(records):
    _, sent = records
    run = run_ranks(sent, failures={8: "CPU 999 is offline"})
    outcome = run.root.outcomes[8]
    assert (outcome.status, outcome.reason, outcome.record, outcome.offset) == (
        "failed", "CPU 999 is offline", None, None)
    assert run.started[8] == 0  # it does not measure
    assert measured(run) == [r for r in range(len(sent)) if r != 8]  # those below it do
    assert run.root.unanswered == [] and not run.worlds[0].comm.aborted.is_set()


def test_a_run_that_needs_every_rank_refuses_on_all_of_them_through_the_tree(records):
    _, sent = records
    run = run_ranks(sent, failures={12: "CPU 999 is offline"}, require_all=True)
    refusals = {rank: str(error) for rank, error in run.started.items() if rank != 12}
    assert sorted(refusals) == [r for r in range(len(sent)) if r != 12]  # every other rank
    assert set(refusals.values()) == {"rank 12 failed: CPU 999 is offline; every rank must "
                                      "take part; fix that rank and start again"}
    assert run.started[12] == 0  # the failed rank passes the refusal on and raises its own


def test_the_star_is_the_protocol_before_the_tree(records):
    _, sent = records
    run = run_ranks(sent, tree=Star)
    assert measured(run) == list(range(len(sent)))
    assert {s for s, _ in run.worlds[0].comm.received} == set(range(1, len(sent)))
