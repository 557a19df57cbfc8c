"""MPI for the cluster commands, through mpi4py (the optional extra noisescope[mpi]).

Rank 0 coordinates. After the start-up (a few collectives while every rank is
known to be alive), every exchange is point to point between rank 0 and one
other rank, and every wait on another rank has a deadline: rank 0 polls for
messages (MPI_Iprobe) until its deadline and reports the ranks it did not
hear from, instead of stalling in a collective whose tree runs through a
rank that died or hangs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import UsageError

POLL_S = 0.005  # rank 0's polling period while it waits for messages
PING_ROUNDS = 8  # clock offset: the round trip with the least delay of these wins
SPIN_AFTER_PING_S = 0.05

# Message tags, one per kind of exchange.
HELLO, PING, PONG, START, RESULT = range(1, 6)


def import_mpi():
    """mpi4py's MPI module, or a one-line error saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise UsageError("the cluster commands need mpi4py, which is not installed",
                         "pip install 'noisescope[mpi]' (with an MPI library such as "
                         "Debian's openmpi-bin and libopenmpi-dev)") from None
    return MPI


@dataclass(frozen=True)
class RankPlacement:
    """Where this rank runs."""

    rank: int
    size: int
    node: str  # the processor name MPI reports (the host name)
    local_rank: int  # among the ranks on the same node
    local_size: int
    allowed_cpus: tuple[int, ...]  # the launcher's binding, else every CPU it may use (host.default_cpus)
    # The CPUs each rank on this node would measure (--cpus, else its affinity), by local rank.
    local_candidates: tuple[tuple[int, ...], ...]

    def to_dict(self) -> dict:
        return {"rank": self.rank, "size": self.size, "node": self.node,
                "local_rank": self.local_rank, "local_size": self.local_size,
                "allowed_cpus": list(self.allowed_cpus)}


@dataclass(frozen=True)
class ClockOffset:
    """A rank's CLOCK_MONOTONIC minus rank 0's, measured by ping-pong (Cristian's
    method): the exchange with the shortest round trip bounds the error by half
    of that round trip."""

    offset_ns: int
    round_trip_ns: int

    @property
    def uncertainty_ns(self) -> int:
        return self.round_trip_ns // 2


class World:
    """COMM_WORLD, with the deadline-bound exchanges the cluster commands use."""

    def __init__(self, mpi=None):
        self.MPI = mpi or import_mpi()
        self.comm = self.MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._pending: list = []  # isend requests to complete before finalizing

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def placement(self, requested: tuple[int, ...] | None = None) -> RankPlacement:
        """Collective: every rank must call it, at start-up. `requested`: the CPUs
        this rank was asked to measure (None: those it may run on)."""
        from ..host import default_cpus, read_host_facts

        allowed = default_cpus(read_host_facts())
        local = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED, key=self.rank)
        try:
            candidates = tuple(tuple(c) for c in local.allgather(tuple(requested or allowed)))
            return RankPlacement(self.rank, self.size, self.MPI.Get_processor_name(),
                             local.Get_rank(), local.Get_size(), allowed, candidates)
        finally:
            local.Free()

    def share(self, value):
        """Collective at start-up: rank 0's value on every rank."""
        return self.comm.bcast(value, root=0)

    # -- point to point, rank 0 <-> the others -------------------------------------
    def send(self, payload, dest: int, tag: int) -> None:
        self._pending.append(self.comm.isend(payload, dest=dest, tag=tag))

    def collect(self, tag: int, ranks, deadline: float) -> dict[int, object]:
        """Rank 0: the message with `tag` from each of `ranks` that arrives before
        `deadline` (time.monotonic()); ranks missing from the result did not answer."""
        waiting = set(ranks)
        received: dict[int, object] = {}
        status = self.MPI.Status()
        while waiting:
            while self.comm.iprobe(source=self.MPI.ANY_SOURCE, tag=tag, status=status):
                source = status.Get_source()
                received[source] = self.comm.recv(source=source, tag=tag)
                waiting.discard(source)
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        return received

    def receive_from_root(self, tag: int, deadline: float):
        """A non-root rank: the next message from rank 0 with `tag`, answering
        rank 0's clock pings meanwhile; None at the deadline (rank 0 is gone or
        stuck). Polls every millisecond, and without pause for a moment after a
        ping so that the next round trips are not lengthened by the polling."""
        status = self.MPI.Status()
        spin_until = 0.0
        while True:
            if self.comm.iprobe(source=0, tag=PING, status=status):
                self.comm.recv(source=0, tag=PING)
                self.comm.send(time.monotonic_ns(), dest=0, tag=PONG)
                spin_until = time.monotonic() + SPIN_AFTER_PING_S
                continue
            if self.comm.iprobe(source=0, tag=tag, status=status):
                return self.comm.recv(source=0, tag=tag)
            now = time.monotonic()
            if now >= deadline:
                return None
            if now >= spin_until:
                time.sleep(POLL_S / 5)

    def measure_offset(self, rank: int, deadline: float) -> ClockOffset | None:
        """Rank 0: the offset of `rank`'s CLOCK_MONOTONIC (the rank answers pings
        while it waits in receive_from_root); None if it stops answering."""
        best: ClockOffset | None = None
        status = self.MPI.Status()
        for _ in range(PING_ROUNDS):
            sent = time.monotonic_ns()
            self.comm.send(None, dest=rank, tag=PING)
            while not self.comm.iprobe(source=rank, tag=PONG, status=status):
                if time.monotonic() >= deadline:
                    return None
            remote = self.comm.recv(source=rank, tag=PONG)
            back = time.monotonic_ns()
            sample = ClockOffset(remote - (sent + back) // 2, back - sent)
            if best is None or sample.round_trip_ns < best.round_trip_ns:
                best = sample
        return best

    # -- the end -------------------------------------------------------------------
    def finish(self) -> None:
        """Complete this rank's sends (rank 0 receives everything it waits for)."""
        for request in self._pending:
            request.wait()
        self._pending.clear()

    def abort(self, code: int) -> None:
        """End the whole job: a rank that hangs would keep MPI_Finalize (and the
        launcher) waiting for ever."""
        self.comm.Abort(code)
