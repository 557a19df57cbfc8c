"""The protocol both cluster commands follow, and what rank 0 learns from it.

  start-up   collectives, while every rank is known to be alive: placement,
             rank 0's check of the output directory (World.share)
  prepare    each rank on its own (CPUs, options, clock); an error is kept
  HELLO      each rank tells rank 0 it is ready, or why it failed
  START      rank 0 measures each ready rank's clock offset (ping-pong) and
             sends it the common start time in that rank's own CLOCK_MONOTONIC
  measure    every ready rank, aligned
  RESULT     each ready rank sends rank 0 its record (or why it failed)
  close      rank 0 writes the fleet bundle; if a rank never answered, it
             ends the job (MPI_Abort), which would otherwise wait for it

Rank 0 takes part like any other rank (it measures too) and coordinates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UsageError, option
from ..units import format_duration
from .mpi import HELLO, RESULT, START, ClockOffset, RankPlacement, World

START_LEAD_NS = 300_000_000  # from sending START to the first window: thread set-up
DEFAULT_TIMEOUT_NS = 60_000_000_000


def start_up(world: World, requested_cpus: tuple[int, ...] | None,
             prepare: Callable[[], None] | None = None) -> RankPlacement:
    """The collective part: every rank's placement, and rank 0's `prepare` (e.g. the
    check of the output directory), whose error every rank raises alike."""
    placement = world.placement(requested_cpus)
    problem = None
    if world.is_root and prepare is not None:
        try:
            prepare()
        except UsageError as error:
            problem = (error.problem, error.hint)
    problem = world.share(problem)
    if problem:
        raise UsageError(*problem)
    return placement


@dataclass
class RankOutcome:
    """Rank 0's view of one rank."""

    rank: int
    status: str  # "ok", "failed" or "missing"
    reason: str | None = None
    hello: dict | None = None  # what the rank said when ready (node, CPUs)
    record: dict | None = None  # its result record
    offset: ClockOffset | None = None

    def to_dict(self) -> dict:
        hello = self.hello or {}
        return {"rank": self.rank, "node": hello.get("node"), "status": self.status,
                "reason": self.reason,
                "offset_ns": self.offset.offset_ns if self.offset else None,
                "offset_uncertainty_ns": self.offset.uncertainty_ns if self.offset else None}


class Session:
    def __init__(self, world: World, timeout_ns: int = DEFAULT_TIMEOUT_NS,
                 lead_ns: int = START_LEAD_NS):
        self.world = world
        self.timeout_s = timeout_ns / 1e9
        self.lead_ns = lead_ns
        self.start_ns = 0  # this rank's start, its own CLOCK_MONOTONIC
        self.said_hello = False
        self.outcomes: dict[int, RankOutcome] = {}  # rank 0 only
        self.interrupted = False

    def ready(self, hello: dict, failure: str | None = None, *, require_all: bool = False) -> int:
        """This rank is prepared (or failed: `failure` says why). Returns the
        CLOCK_MONOTONIC time at which to start measuring (0 after a failure).
        Rank 0 coordinates here: it waits for every rank's HELLO, measures the
        clock offsets and sends the start times. With `require_all` (a run whose
        ranks synchronize with each other), one rank that is not ready stops
        every rank with the same UsageError."""
        self.said_hello = True
        message = {**hello, "failure": failure}
        if not self.world.is_root:
            self.world.send(message, 0, HELLO)
            if failure:
                return 0
            answer = self.world.receive_from_root(START, time.monotonic() + 2 * self.timeout_s
                                                  + 0.01 * self.world.size)
            if answer is None:
                raise UsageError(f"rank 0 sent no start time within "
                                 f"{format_duration(2 * self.timeout_s * 1e9)}",
                                 f"see rank 0's messages; a longer {option('timeout_ns')} helps "
                                 f"slow start-ups")
            if "refused" in answer:
                raise UsageError(*answer["refused"])
            self.start_ns = answer["start_ns"]
            return self.start_ns
        others = range(1, self.world.size)
        hellos = self.world.collect(HELLO, others, time.monotonic() + self.timeout_s)
        hellos[0] = message
        for rank in range(self.world.size):
            said = hellos.get(rank)
            if said is None:
                self.outcomes[rank] = RankOutcome(
                    rank, "missing", f"not ready within {format_duration(self.timeout_s * 1e9)}")
            elif said["failure"]:
                self.outcomes[rank] = RankOutcome(rank, "failed", said["failure"], said)
            else:
                self.outcomes[rank] = RankOutcome(rank, "ok", None, said)
        self.outcomes[0].offset = ClockOffset(0, 0)
        deadline = time.monotonic() + self.timeout_s
        for rank in [r for r in self.measuring_ranks() if r != 0]:
            offset = self.world.measure_offset(rank, deadline)
            if offset is None:
                self.outcomes[rank].status = "missing"
                self.outcomes[rank].reason = "stopped answering rank 0's clock pings"
            self.outcomes[rank].offset = offset
        absent = [o for o in self.outcomes.values() if o.status != "ok"]
        if require_all and absent:
            refusal = (f"rank {absent[0].rank} {absent[0].status}: {absent[0].reason}",
                       "every rank must take part; fix that rank and start again")
            for rank in self.measuring_ranks():
                if rank != 0:
                    self.world.send({"refused": refusal}, rank, START)
            self.close()
            raise UsageError(*refusal)
        self.start_ns = time.monotonic_ns() + self.lead_ns
        for rank in self.measuring_ranks():
            if rank != 0:
                offset = self.outcomes[rank].offset.offset_ns
                self.world.send({"start_ns": self.start_ns + offset}, rank, START)
        return self.start_ns if not failure else 0

    def measuring_ranks(self) -> list[int]:
        return [r for r, o in sorted(self.outcomes.items()) if o.status == "ok"]

    def report(self, record: dict) -> None:
        """Hand this rank's record (status "ok" or "failed") to rank 0; rank 0
        collects every measuring rank's record, until the timeout."""
        if not self.world.is_root:
            if self.start_ns:  # only ranks that were told to start are waited for
                self.world.send(record, 0, RESULT)
            return
        self._take(0, record)
        waiting = [r for r in self.measuring_ranks() if r != 0]
        try:
            records = self.world.collect(RESULT, waiting, time.monotonic() + self.timeout_s)
        except KeyboardInterrupt:
            self.interrupted, records = True, {}
        for rank in waiting:
            if rank in records:
                self._take(rank, records[rank])
            else:
                self.outcomes[rank].status = "missing"
                self.outcomes[rank].reason = (
                    "interrupted before it reported" if self.interrupted else
                    f"no result within {format_duration(self.timeout_s * 1e9)} of rank 0's end "
                    f"(died or hangs)")

    def _take(self, rank: int, record: dict) -> None:
        outcome = self.outcomes[rank]
        outcome.record = record
        if outcome.status == "ok" and record.get("failure"):
            outcome.status, outcome.reason = "failed", record["failure"]

    @property
    def unanswered(self) -> list[int]:
        """Ranks rank 0 gave up waiting for (they may still be running)."""
        return [r for r, o in sorted(self.outcomes.items()) if o.status == "missing"]

    def close(self) -> None:
        """Complete this rank's sends; rank 0 ends the job if a rank never answered,
        since MPI_Finalize would wait for it."""
        if self.world.is_root and self.unanswered:
            import sys

            print(f"noisescope: ending the MPI job: rank(s) "
                  f"{', '.join(map(str, self.unanswered))} did not answer", file=sys.stderr,
                  flush=True)
            self.world.abort(1)
        self.world.finish()


def rank_findings(records: list[dict]) -> list[dict]:
    """Every rank's `system show` findings for its own CPUs, each with its rank and
    node: the manifest's `system` of fleet and bsp bundles."""
    return [{**finding, "rank": r["rank"], "node": r["node"]}
            for r in records for finding in r.get("system", [])]
