"""What each rank runs in tests/e2e/test_cluster_tree.py (and bench/cluster_tree.py):
`noisescope ARGS...` with three changes for many ranks on this 2-CPU machine.

- Rank r measures CPU r mod the CPUs it may use: 16 ranks on 2 CPUs would be refused
  (more ranks than CPUs on a node), and the protocol, not the placement, is under test.
- With TREE_LOG=DIR, each rank writes DIR/rankN.json when it closes the session: the
  (source, tag) of every message it received after start-up.
- With HANG_RANK=R and HANG_AT=ready|report, rank R stops itself (SIGSTOP) on entering
  Session.ready or Session.report, as a rank that hangs there would; the job's end
  (rank 0's MPI_Abort) or the test kills it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from noisescope.cli.main import main
from noisescope.cluster import mpi, scan, session

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))


def one_cpu_each(placement):
    allowed = placement.allowed_cpus
    return (allowed[placement.rank % len(allowed)],)


def logging_receives(receive):
    def logged(world, source, tag):
        world.received.append((source, tag))
        return receive(world, source, tag)
    return logged


def logging_close(close, directory: Path):
    def logged(self):
        (directory / f"rank{self.world.rank}.json").write_text(json.dumps(self.world.received))
        close(self)
    return logged


def hanging(method):
    def stopped(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGSTOP)
        return method(self, *args, **kwargs)
    return stopped


scan.assign_cpus = one_cpu_each
if os.environ.get("TREE_LOG"):
    mpi.World.received = []
    mpi.World._receive = logging_receives(mpi.World._receive)
    session.Session.close = logging_close(session.Session.close, Path(os.environ["TREE_LOG"]))
if os.environ.get("HANG_RANK") == str(RANK):
    name = os.environ["HANG_AT"]
    setattr(session.Session, name, hanging(getattr(session.Session, name)))

sys.exit(main(sys.argv[1:]))
