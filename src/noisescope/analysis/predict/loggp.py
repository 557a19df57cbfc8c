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
round works on contiguous slices. The compute phase and the allreduce's rounds
run in the native core (`_native/predict.c`: one pass per round, block by block
in the CPU cache, on every CPU this process may use); the few other rounds are
numpy passes.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import numpy as np

from ... import _native
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


# The allreduce's rounds in the native core go block by block so that the clocks they
# touch stay in the CPU cache (ready and next_start, 16 B per process, more for the
# exact noise lookups and the gap clocks): the rounds closer than ROUND_BLOCK slots
# within a block (256 kB: the L2 cache), those closer than ROUND_GROUP by pairs of
# blocks in a group (4-6 MB: the L3 cache), the wider ones on tiles of ROUND_GROUP
# slots that hold every partner (runs of ROUND_GROUP^2 / P slots, one per group).
ROUND_BLOCK = 1 << 14
ROUND_GROUP = 1 << 18


class SimulatedMachine:
    """P processes under LogGP; noise (if any) is charged to every busy window."""

    def __init__(self, procs: int, loggp: LogGP, noise: NoiseReplay | None = None,
                 threads: int | None = None):
        self.procs = procs
        self.loggp = loggp
        self.noise = noise
        # threads change the speed, never the result (processes run concurrently
        # only where they share nothing)
        self.threads = threads or len(os.sched_getaffinity(0))
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

    def _native(self, message_bytes: int = 1) -> tuple:
        """The clocks and costs the native core reads (predict.h: struct ns_machine)."""
        p = self.loggp
        gaps = (self.next_send, self.next_receive) if self.gaps else (None, None)
        return (self.ready, *gaps, p.latency_ns, p.overhead_ns, p.gap_ns,
                p.transfer_ns(message_bytes))

    def _native_noise(self) -> tuple | None:
        return None if self.noise is None else self.noise.native()

    def compute(self, busy_ns: int) -> None:
        _native.predict_compute(self._native(), self._native_noise(), busy_ns, self.threads)

    def exchange_rounds(self, power: int, message_bytes: int) -> None:
        """Recursive doubling among slots [0, power) (a power of two): log2(power) rounds,
        in round k slot i sends to and receives from slot i XOR 2^k."""
        _native.predict_allreduce(self._native(message_bytes), self._native_noise(), power,
                                  ROUND_BLOCK, ROUND_GROUP, self.threads)

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
        machine.exchange_rounds(power, size)
        if extra:
            machine.receive(helpers, machine.send(paired, size), size)


COLLECTIVES = ("allreduce", "barrier", "none")


def make_collective(name: str, message_bytes: int) -> Collective:
    if name == "allreduce":
        return RecursiveDoublingAllreduce(message_bytes)
    if name == "barrier":
        return DisseminationBarrier()
    if name == "none":
        return Collective()
    raise UsageError(f"unknown collective {name!r}", f"choose from {', '.join(COLLECTIVES)}")
