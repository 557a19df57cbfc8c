"""`noisescope cluster scan` at 16 ranks under a real mpirun (oversubscribed on this
2-CPU machine): the clock offsets measured down the tree, the records gathered up
it, and a rank that hangs reported by its parent. Each rank runs tests/e2e/tree_rank.py
(one CPU each, its receipts logged, a rank made to hang). The ranks share one
CLOCK_MONOTONIC, so every true offset is 0."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import noisescope
from noisescope.cluster.tree import Tree

from .test_cluster import MPIRUN, _rank_process, communicate_past_teardown

pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun (openmpi-bin)")
mpi4py = pytest.importorskip("mpi4py")

RANKS = 16
TREE = Tree(RANKS)
RANK_PROGRAM = [sys.executable, str(Path(__file__).with_name("tree_rank.py"))]
SCAN = ["cluster", "scan", "--duration", "200ms", "--probes", "ftq", "--no-report", "-q"]


def tree_scan(out: Path, log: Path, *extra: str, env: dict | None = None):
    """The 16-rank scan; ends it (and any rank it left stopped) if it outlives 120 s
    (mpirun alone, hung in its teardown after every rank ended: sooner)."""
    log.mkdir()
    proc = subprocess.Popen([*MPIRUN, "-n", str(RANKS), *RANK_PROGRAM, *SCAN, "-o", str(out),
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TREE_LOG": str(log), **(env or {})},
                            start_new_session=True)
    try:
        stdout, stderr = communicate_past_teardown(proc, 120)
    finally:
        for rank in range(RANKS):  # a rank stopped on purpose, should the job not end it
            pid = _rank_process(rank, str(out))
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, stdout, stderr


def received_from(log: Path) -> dict[int, set[int]]:
    """For each rank that closed its session: the ranks it received messages from."""
    return {int(path.stem.removeprefix("rank")): {source for source, _ in json.loads(
        path.read_text())} for path in log.glob("rank*.json")}


def test_offsets_go_down_the_tree_and_every_record_up_it(tmp_path):
    out, log = tmp_path / "fleet", tmp_path / "log"
    code, _, stderr = tree_scan(out, log)
    assert code == 0, stderr
    fleet = noisescope.load(out)
    ranks = fleet.summaries["ranks"]
    assert [(r["rank"], r["status"]) for r in ranks] == [(r, "ok") for r in range(RANKS)]
    # every rank's record reached rank 0: its per-CPU summary and windows are in the fleet
    assert sorted(s["rank"] for s in fleet.summaries["ftq"]) == list(range(RANKS))
    assert set(fleet.windows["rank"].tolist()) == set(range(RANKS))
    # Each rank received only from its parent and children: rank 0 from its 4 children.
    received = received_from(log)
    assert sorted(received) == list(range(RANKS))
    assert received[0] == set(TREE.children(0)) == {1, 2, 4, 8}
    for rank, sources in received.items():
        assert sources <= {TREE.parent(rank), *TREE.children(rank)}, (rank, sources)
    # The true offsets are 0: each measured one lies within its stated uncertainty, and
    # the uncertainty, which adds half a round trip per hop, grows with every hop.
    for row in ranks:
        offset, uncertainty = row["offset_ns"], row["offset_uncertainty_ns"]
        assert -uncertainty <= offset <= uncertainty, row
        if row["rank"]:
            above = ranks[TREE.parent(row["rank"])]["offset_uncertainty_ns"]
            assert uncertainty > above, (row, above)
    assert ranks[0]["offset_ns"] == ranks[0]["offset_uncertainty_ns"] == 0


@pytest.mark.parametrize("at", ["ready", "report"])
def test_a_rank_that_hangs_is_missing_with_its_subtree_as_its_parent_says(tmp_path, at):
    """Rank 12 (parent 8, children 13 and 14, and 15 below 14) stops before its
    HELLO, or before its RESULT: rank 8 gives up on it after the 2 s timeout and
    reports it and the ranks below it missing; rank 0 writes the fleet and ends the
    job."""
    out, log = tmp_path / "fleet", tmp_path / "log"
    code, _, stderr = tree_scan(out, log, "--timeout", "2s",
                                env={"HANG_RANK": "12", "HANG_AT": at})
    assert code != 0 and "ending the MPI job: rank(s) 12, 13, 14, 15 did not answer" in stderr
    ranks = {r["rank"]: r for r in noisescope.load(out).summaries["ranks"]}
    said = {"ready": "not ready within 2 s of rank 8",
            "report": "no result within 2 s of rank 8's end (died or hangs)"}[at]
    assert ranks[12]["status"] == "missing" and ranks[12]["reason"] == said
    for rank in (13, 14, 15):
        assert ranks[rank]["status"] == "missing"
        assert ranks[rank]["reason"] == "below rank 12, which did not answer rank 8"
    assert all(ranks[r]["status"] == "ok" for r in range(12))
    assert received_from(log)[0] <= set(TREE.children(0))
