"""LogGP costs and collective schedules, vectorised over processes.

The machine keeps three clocks per process, as LogGOPSim does: when its CPU is
free (`ready`), and when its NIC may start the next send or receive (the gap g
between messages plus G per extra byte). A message:

* send: starts when the CPU and the send gap allow; the CPU is busy for o
  (noise charged); the message arrives L after the send overhead ends;
* receive: starts when the message has arrived, the CPU is free and the receive
  gap allows; the CPU is busy for o (noise charged), then (bytes - 1) G.

A collective is a sequence of rounds; in each round a set of processes sends
and a set of processes receives, matched elementwise after a permutation. One
process handles its messages in round order (a send of round k+1 needs the
receive of round k). Collectives order the processes ("slots") so that every
round works on contiguous slices, which numpy handles without copies.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ...errors import UsageError
from .replay import NoiseReplay


@dataclass(frozen=True)
class LogGP:
    latency_ns: int = 2500  # L
    overhead_ns: int = 1500  # o
    gap_ns: int = 1000  # g
    gap_per_byte_ns: int = 6  # G

    def __post_init__(self):
        for name, value in asdict(self).items():
            if value < 0:
                raise UsageError(f"LogGP parameter {name} is negative ({value})",
                                 "give a time of 0 or more")

    def transfer_ns(self, message_bytes: int) -> int:
        """Time the bytes after the first one take: (s - 1) G."""
        return max(message_bytes - 1, 0) * self.gap_per_byte_ns

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> LogGP:
        return cls(**data)


# Processes per block of the allreduce's short-distance rounds: the arrays of a block
# (2 MB per int64 column) stay in the last-level cache, and there are few enough blocks
# for numpy's per-call cost not to matter (2^15 was slower with noise, 2^22 was a
# round over all of 4M processes: 2^18 took 0.6 of that time here).
ROUND_BLOCK = 1 << 18


class SimulatedMachine:
    """P processes under LogGP; noise (if any) is charged to every busy window."""

    def __init__(self, procs: int, loggp: LogGP, noise: NoiseReplay | None = None):
        self.procs = procs
        self.loggp = loggp
        self.noise = noise
        self.ready = np.zeros(procs, np.int64)
        # Between two sends (or two receives) a process always pays at least 2 o of
        # overhead in the schedules below, so a gap g <= 2 o can never delay anything
        # and its clocks need not be kept.
        self.gaps = loggp.gap_ns > 2 * loggp.overhead_ns
        if self.gaps:
            self.next_send = np.zeros(procs, np.int64)
            self.next_receive = np.zeros(procs, np.int64)

    def busy(self, start: np.ndarray, busy_ns: int, procs: slice) -> np.ndarray:
        """End of busy windows starting at `start` (a new array)."""
        if self.noise is None:
            return start + busy_ns
        return self.noise.finish(start, busy_ns, procs)

    def _set_ready(self, procs: slice, done: np.ndarray) -> None:
        if procs.start in (0, None) and procs.stop == self.procs:
            self.ready = done
        else:
            self.ready[procs] = done

    def compute(self, busy_ns: int) -> None:
        self.ready = self.busy(self.ready, busy_ns, slice(0, self.procs))

    def send(self, procs: slice, message_bytes: int) -> np.ndarray:
        """Processes `procs` send one message each; returns the arrival times."""
        p = self.loggp
        start = self.ready[procs]
        if self.gaps:
            start = np.maximum(start, self.next_send[procs])
            self.next_send[procs] = start + (p.gap_ns + p.transfer_ns(message_bytes))
        done = self.busy(start, p.overhead_ns, procs)
        self._set_ready(procs, done)
        return done + p.latency_ns

    def receive(self, procs: slice, arrival: np.ndarray, message_bytes: int) -> None:
        """Processes `procs` receive the messages arriving at `arrival` (reused)."""
        p = self.loggp
        transfer = p.transfer_ns(message_bytes)
        start = np.maximum(arrival, self.ready[procs], out=arrival)
        if self.gaps:
            np.maximum(start, self.next_receive[procs], out=start)
            self.next_receive[procs] = start + (p.gap_ns + transfer)
        done = self.busy(start, p.overhead_ns, procs)
        if transfer:
            done += transfer
        self._set_ready(procs, done)


class Collective:
    """No communication (the base of the others)."""

    def slot_ranks(self, procs: int) -> np.ndarray:
        """The MPI rank of each slot (noise traces are assigned by rank)."""
        return np.arange(procs)

    def run(self, machine: SimulatedMachine) -> None:
        """One collective operation, starting from each process's `ready` time."""


class DisseminationBarrier(Collective):
    """ceil(log2 P) rounds; in round k process i signals i + 2^k and waits for i - 2^k."""

    message_bytes = 1

    def run(self, machine: SimulatedMachine) -> None:
        everyone = slice(0, machine.procs)
        distance = 1
        while distance < machine.procs:
            arrival = machine.send(everyone, self.message_bytes)
            machine.receive(everyone, np.roll(arrival, distance), self.message_bytes)
            distance *= 2


class RecursiveDoublingAllreduce(Collective):
    """log2 P rounds of pairwise exchange with partner i XOR 2^k. For P not a power of
    two, the first 2r ranks (r = P - 2^floor(log2 P)) pair up before and after: even
    ranks hand their data to the next odd rank and get the result back from it."""

    def __init__(self, message_bytes: int = 8):
        self.message_bytes = message_bytes

    @staticmethod
    def split(procs: int) -> tuple[int, int]:
        power = 1 << (procs.bit_length() - 1)
        return power, procs - power

    def slot_ranks(self, procs: int) -> np.ndarray:
        # slots [0, power): the ranks doing the recursive doubling; slot j < extra
        # is odd rank 2j + 1, partner of slot power + j (even rank 2j).
        power, extra = self.split(procs)
        inner = np.arange(power)
        inner = np.where(inner < extra, 2 * inner + 1, inner + extra)
        return np.concatenate([inner, 2 * np.arange(extra)])

    def run(self, machine: SimulatedMachine) -> None:
        power, extra = self.split(machine.procs)
        size = self.message_bytes
        paired, helpers = slice(0, extra), slice(power, machine.procs)
        if extra:
            machine.receive(paired, machine.send(helpers, size), size)
        # Done block by block, so that each block's state is read from memory once
        # per round or less (at millions of processes a round over all of them at
        # once is bound by memory): the rounds whose partners are closer than a block
        # stay inside aligned blocks, each block runs them all in turn; in each wider
        # round a block exchanges with its partner block. The same arithmetic in
        # another order: a process's send comes before its receive in every round.
        block = min(power, ROUND_BLOCK)
        for first in range(0, power, block):
            self._near_rounds(machine, slice(first, first + block), block)
        distance = block
        while distance < power:
            for low in range(0, power, 2 * distance):
                for first in range(low, low + distance, block):
                    self._exchange(machine, slice(first, first + block),
                                   slice(first + distance, first + distance + block))
            distance *= 2
        if extra:
            machine.receive(helpers, machine.send(paired, size), size)

    def _near_rounds(self, machine: SimulatedMachine, procs: slice, stop: int) -> None:
        """The exchanges at distances 1, 2, 4, ... below `stop` among the slots `procs`."""
        count, size = procs.stop - procs.start, self.message_bytes
        distance = 1
        while distance < stop:
            arrival = machine.send(procs, size)
            # partner of slot i is i XOR distance: swap neighbouring blocks of `distance`
            swapped = arrival.reshape(-1, 2, distance)[:, ::-1, :].reshape(count)
            machine.receive(procs, swapped, size)
            distance *= 2

    def _exchange(self, machine: SimulatedMachine, one: slice, other: slice) -> None:
        """Slots `one` and `other`, partners at the same offsets, swap messages."""
        size = self.message_bytes
        from_one, from_other = machine.send(one, size), machine.send(other, size)
        machine.receive(one, from_other, size)
        machine.receive(other, from_one, size)


COLLECTIVES = ("allreduce", "barrier", "none")


def make_collective(name: str, message_bytes: int) -> Collective:
    if name == "allreduce":
        return RecursiveDoublingAllreduce(message_bytes)
    if name == "barrier":
        return DisseminationBarrier()
    if name == "none":
        return Collective()
    raise UsageError(f"unknown collective {name!r}", f"choose from {', '.join(COLLECTIVES)}")
