"""MPI for the cluster commands, through mpi4py (the optional extra noisescope[mpi]).

After the start-up (a few collectives while every rank is known to be alive),
every exchange is point to point between a rank and its parent or children in
the tree (tree.py), and every wait on another rank has a deadline: a rank
polls for its children's messages (MPI_Iprobe) until their deadlines and
reports those it did not hear from, instead of stalling in a collective that
runs through a rank that died or hangs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import UsageError

POLL_S = 0.001  # a rank's polling period while it waits for messages
PING_ROUNDS = 8  # clock offset: the round trip with the least delay of these wins
SPIN_AFTER_PING_S = 0.05

# Message tags, one per kind of exchange (session.py says what each carries).
READY, HELLO, PING, PONG, START, ENDED, RESULT = range(1, 8)


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
    """One rank's CLOCK_MONOTONIC minus another's, within +/- uncertainty_ns.

    Measured by ping-pong between a parent and a child (Cristian's method): the
    child's reading was taken between the parent's send and receipt, so it is
    within half the round trip of their midpoint; the exchange with the shortest
    round trip wins. Along a path of the tree, offsets and uncertainties add."""

    offset_ns: int
    uncertainty_ns: int

    @classmethod
    def of_ping(cls, sent_ns: int, remote_ns: int, back_ns: int) -> ClockOffset:
        round_trip = back_ns - sent_ns
        return cls(remote_ns - (sent_ns + back_ns) // 2, -(-round_trip // 2))

    def __add__(self, other: ClockOffset) -> ClockOffset:
        return ClockOffset(self.offset_ns + other.offset_ns,
                           self.uncertainty_ns + other.uncertainty_ns)


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

    # -- point to point, a rank <-> its parent and children ---------------------------
    def send(self, payload, dest: int, tag: int) -> None:
        self._pending.append(self.comm.isend(payload, dest=dest, tag=tag))

    def poll(self, tag: int):
        """(source, payload) of a message with `tag` that has arrived, else None."""
        status = self.MPI.Status()
        if not self.comm.iprobe(source=self.MPI.ANY_SOURCE, tag=tag, status=status):
            return None
        source = status.Get_source()
        return source, self._receive(source, tag)

    def receive_from_parent(self, parent: int, tag: int, deadline: float):
        """The next message from `parent` with `tag`, answering its clock pings
        meanwhile; None at the deadline (the parent is gone or stuck). Polls every
        POLL_S, and without pause for a moment after a ping so that the next round
        trips are not lengthened by the polling."""
        status = self.MPI.Status()
        spin_until = 0.0
        while True:
            if self.comm.iprobe(source=parent, tag=PING, status=status):
                self._receive(parent, PING)
                self.comm.send(time.monotonic_ns(), dest=parent, tag=PONG)
                spin_until = time.monotonic() + SPIN_AFTER_PING_S
                continue
            if self.comm.iprobe(source=parent, tag=tag, status=status):
                return self._receive(parent, tag)
            now = time.monotonic()
            if now >= deadline:
                return None
            if now >= spin_until:
                time.sleep(POLL_S)

    def measure_offset(self, child: int, deadline: float) -> ClockOffset | None:
        """The offset of `child`'s CLOCK_MONOTONIC against this rank's (the child
        answers pings while it waits in receive_from_parent): the best of the
        round trips done by the deadline; None if not even one came back."""
        best: ClockOffset | None = None
        status = self.MPI.Status()
        for _ in range(PING_ROUNDS):
            sent = time.monotonic_ns()
            self.comm.send(None, dest=child, tag=PING)
            while not self.comm.iprobe(source=child, tag=PONG, status=status):
                if time.monotonic() >= deadline:
                    return best
            remote = self._receive(child, PONG)
            sample = ClockOffset.of_ping(sent, remote, time.monotonic_ns())
            if best is None or sample.uncertainty_ns < best.uncertainty_ns:
                best = sample
        return best

    def _receive(self, source: int, tag: int):
        """Every message this rank receives after start-up comes through here."""
        return self.comm.recv(source=source, tag=tag)

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
