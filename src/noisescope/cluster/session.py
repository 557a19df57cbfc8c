"""The protocol both cluster commands follow, and what rank 0 learns from it.

  start-up   collectives, while every rank is known to be alive: placement,
             rank 0's check of the output directory (World.share)
  prepare    each rank on its own (CPUs, options, clock); an error is kept
  HELLO      up the tree (tree.py): each rank gathers its children's answers,
             measures the clock offset of each child that will wait for START
             against its own (ping-pong), and sends its parent its subtree's
             answer (Subtree: who is ready, who failed and why, who never
             answered; the offsets relative to itself)
  START      down the tree: rank 0 picks the common start time, each parent
             sends each child that time in the child's own CLOCK_MONOTONIC
             (or the refusal of a run that needs every rank)
  measure    every ready rank, aligned
  RESULT     up the tree: each rank sends its parent its own record and its
             subtree's, merged into one message (Results), so rank 0 receives
             from its children only
  close      rank 0 writes the fleet bundle; if a rank never answered, it
             ends the job (MPI_Abort), which would otherwise wait for it

Deadlines at every level. When a rank with children gets to HELLO (or RESULT)
it first tells its parent so (READY, ENDED), then gathers its subtree's answers
(a leaf answers at once). A parent waits for that notice (or a leaf's answer)
from each child for the timeout after it got there itself, then for the
child's answer as long as the child may wait for its own children, plus a
margin per level (`Session.answer_wait_s`). A child that does not
answer is reported missing by its parent, with the ranks below it whose
messages go through it; a rank that is merely later than its parent by less
than the timeout delays the answer, it is not lost. Ranks below a missing one
are not re-parented: they are reported missing with it (they may still write
their own bundles), and rank 0 ends the job.

Rank 0 takes part like any other rank (it measures too) and coordinates.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import UsageError, option
from ..units import format_duration
from .mpi import ENDED, HELLO, POLL_S, READY, RESULT, START, ClockOffset, RankPlacement, World
from .tree import Tree

START_LEAD_NS = 300_000_000  # from sending START to the first window: thread set-up
DEFAULT_TIMEOUT_NS = 60_000_000_000
# Per level of the tree, what a rank may need beyond its children's deadlines before
# its own answer reaches its parent: measuring its children's clocks (at most half
# of it each), merging, sending.
LEVEL_MARGIN_S = 1.0


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
    offset: ClockOffset | None = None  # its clock against rank 0's

    def to_dict(self) -> dict:
        hello = self.hello or {}
        return {"rank": self.rank, "node": hello.get("node"), "status": self.status,
                "reason": self.reason,
                "offset_ns": self.offset.offset_ns if self.offset else None,
                "offset_uncertainty_ns": self.offset.uncertainty_ns if self.offset else None}


@dataclass
class Subtree:
    """A subtree's answer at HELLO (the message its root sends its parent)."""

    said: dict[int, dict]  # rank -> its hello, with "failure" (None when ready)
    # The ranks that wait for START (ready, or relaying it to ranks below that are):
    # their CLOCK_MONOTONIC against the subtree root's.
    offsets: dict[int, ClockOffset] = field(default_factory=dict)
    missing: dict[int, str] = field(default_factory=dict)  # rank -> why it never answered

    def measuring(self, ranks) -> list[int]:
        """Those of `ranks` that are ready (started, they measure and report)."""
        return [r for r in ranks if r in self.offsets and not self.said[r]["failure"]]

    def add(self, below: Subtree, offset: ClockOffset | None) -> None:
        """A child's subtree; `offset`: the child's clock against this rank's."""
        self.said.update(below.said)
        self.missing.update(below.missing)
        if offset is not None:
            self.offsets.update({r: offset + o for r, o in below.offsets.items()})


@dataclass
class Results:
    """A subtree's answer at RESULT."""

    # The records of its ranks that measured, in rank order, each pickled by its own
    # rank and unpickled by rank 0 only: the ranks between pass bytes on (a relay of
    # 4,096 records 0.02 s, against 1.0 s to unpickle and pickle them again).
    records: list[bytes]
    missing: dict[int, str]  # started ranks whose record did not come, and why
    interrupted: bool = False


def lose(missing: dict[int, str], child: int, ranks, reason: str, parent: int) -> None:
    """`child` did not answer `parent` (why: `reason`), and with it `ranks` below it."""
    for rank in ranks:
        missing[rank] = reason if rank == child else (
            f"below rank {child}, which did not answer rank {parent}")


class Session:
    def __init__(self, world: World, timeout_ns: int = DEFAULT_TIMEOUT_NS,
                 lead_ns: int = START_LEAD_NS, tree: Tree | None = None):
        self.world = world
        self.tree = tree or Tree(world.size)
        self.timeout_s = timeout_ns / 1e9
        self.lead_ns = lead_ns
        self.start_ns = 0  # this rank's start, its own CLOCK_MONOTONIC
        self.said_hello = False
        self.started = False  # START came: this rank measures, or relays START and RESULT
        self.below: Subtree | None = None  # its subtree's answer at HELLO
        self.outcomes: dict[int, RankOutcome] = {}  # rank 0 only
        self.interrupted = False

    def answer_wait_s(self, child: int) -> float:
        """How long after its notice (READY, ENDED) `child`'s answer may take: the
        timeout for each level below it (for their notices), and a margin per level."""
        levels = self.tree.height(child)
        return levels * (self.timeout_s + LEVEL_MARGIN_S) + LEVEL_MARGIN_S

    def ready(self, hello: dict, failure: str | None = None, *, require_all: bool = False) -> int:
        """This rank is prepared (or failed: `failure` says why). Returns the
        CLOCK_MONOTONIC time at which to start measuring (0 after a failure).
        Every rank gathers its subtree's answers here and passes the start time
        down; rank 0 decides it. With `require_all` (a run whose ranks
        synchronize with each other), one rank that is not ready stops every
        rank with the same UsageError."""
        self.said_hello = True
        began = time.monotonic()
        me, parent = self.world.rank, self.tree.parent(self.world.rank)
        children = self.tree.children(me)
        self._notify(parent, children, READY)
        self.below = below = Subtree({me: {**hello, "failure": failure}})
        answers, silent = self._gather(READY, HELLO, children, began, self._clock_of)
        timeout = format_duration(self.timeout_s * 1e9)
        for child in children:
            if child not in answers:
                lose(below.missing, child, self.tree.subtree(child),
                     f"not ready within {timeout} of rank {me}" if silent[child] == "notice"
                     else f"ready, but its subtree's answer did not reach rank {me} in time", me)
                continue
            subtree, offset = answers[child]
            below.add(subtree, offset)
            if child in subtree.offsets and offset is None:  # START could not go through it
                lose(below.missing, child, subtree.offsets,
                     f"stopped answering rank {me}'s clock pings", me)
        if failure is None or below.offsets:  # it measures, or relays START to ranks that do
            below.offsets[me] = ClockOffset(0, 0)
        if parent is None:
            return self._decide(failure, require_all)
        self.world.send(below, parent, HELLO)
        if me not in below.offsets:
            return 0
        wait_s = 2 * self.timeout_s + self.answer_wait_s(0)
        answer = self.world.receive_from_parent(parent, START, time.monotonic() + wait_s)
        if answer is None:
            raise UsageError(f"rank {parent} passed on no start time within "
                             f"{format_duration(wait_s * 1e9)}",
                             f"see rank 0's messages; a longer {option('timeout_ns')} helps "
                             f"slow start-ups")
        self._pass_on(answer)
        if "refused" in answer and failure is None:
            raise UsageError(*answer["refused"])
        return self.start_ns if failure is None else 0

    def _clock_of(self, child: int, below: Subtree) -> tuple[Subtree, ClockOffset | None]:
        """A child's HELLO as it arrives: its clock measured if it waits for START."""
        if child not in below.offsets:
            return below, None
        return below, self.world.measure_offset(child, time.monotonic() + LEVEL_MARGIN_S / 2)

    def _decide(self, failure: str | None, require_all: bool) -> int:
        """Rank 0, with every rank's answer: the outcomes, then START (or the refusal)."""
        below = self.below
        for rank in range(self.world.size):
            said = below.said.get(rank)
            if rank in below.missing:
                self.outcomes[rank] = RankOutcome(rank, "missing", below.missing[rank], said)
            elif said["failure"]:
                self.outcomes[rank] = RankOutcome(rank, "failed", said["failure"], said)
            else:
                self.outcomes[rank] = RankOutcome(rank, "ok", None, said, offset=below.offsets[rank])
        absent = [o for o in self.outcomes.values() if o.status != "ok"]
        if require_all and absent:
            refusal = (f"rank {absent[0].rank} {absent[0].status}: {absent[0].reason}",
                       "every rank must take part; fix that rank and start again")
            self._pass_on({"refused": refusal})
            self.close()
            raise UsageError(*refusal)
        self._pass_on({"start_ns": time.monotonic_ns() + self.lead_ns})
        return self.start_ns if not failure else 0

    def _pass_on(self, answer: dict) -> None:
        """START (or the refusal) to each child that waits for it, in its own clock."""
        self.started = True
        refused = "refused" in answer
        self.start_ns = 0 if refused else answer["start_ns"]
        for child in self.tree.children(self.world.rank):
            if child in self.below.offsets:
                self.world.send(answer if refused else
                                {"start_ns": self.start_ns + self.below.offsets[child].offset_ns},
                                child, START)

    def report(self, record: dict) -> None:
        """Hand this rank's record (status "ok" or "failed") up the tree, with its
        subtree's; rank 0 ends with every measuring rank's record, or why not."""
        if not self.started:  # failed, and nothing below it measures: its HELLO said why
            return
        began = time.monotonic()
        me, parent = self.world.rank, self.tree.parent(self.world.rank)
        children = [c for c in self.tree.children(me) if c in self.below.offsets]
        self._notify(parent, children, ENDED)
        answers, silent = self._gather(ENDED, RESULT, children, began, interruptible=True)
        merged = Results([pickle.dumps(record)] if self.below.measuring([me]) else [], {})
        timeout = format_duration(self.timeout_s * 1e9)
        for child in children:
            if child in answers:
                merged.records += answers[child].records
                merged.missing.update(answers[child].missing)
                merged.interrupted |= answers[child].interrupted
                continue
            reason = {"notice": f"no result within {timeout} of rank {me}'s end (died or hangs)",
                      "answer": f"ended, but its subtree's results did not reach rank {me} in "
                                f"time",
                      "interrupted": "interrupted before it reported"}[silent[child]]
            lose(merged.missing, child, self.below.measuring(self.tree.subtree(child)), reason, me)
        merged.interrupted |= self.interrupted
        if parent is not None:
            self.world.send(merged, parent, RESULT)
            return
        self.interrupted = merged.interrupted
        for pickled in merged.records:
            rank_record = pickle.loads(pickled)
            self._take(rank_record["rank"], rank_record)
        for rank, reason in merged.missing.items():
            self.outcomes[rank].status, self.outcomes[rank].reason = "missing", reason

    def _notify(self, parent: int | None, children: list[int], notice: int) -> None:
        """Tell the parent this rank got to READY or ENDED, before it waits for its
        children (a rank without children answers at once: its answer says it)."""
        if parent is not None and children:
            self.world.send(None, parent, notice)

    def _gather(self, notice: int, tag: int, children: list[int], began: float,
                on_answer: Callable | None = None, *, interruptible: bool = False):
        """From each of `children`: its notice (or a leaf's answer), within the
        timeout of `began` (this rank's own moment), then its answer `tag`, within
        answer_wait_s of the notice. Returns the answers by child (through
        `on_answer(child, answer)` as they arrive) and, for the others, what did
        not come: "notice", "answer", or "interrupted" (Ctrl-C, with
        `interruptible`)."""
        deadlines = dict.fromkeys(children, began + self.timeout_s)
        noticed: set[int] = set()
        answers, silent = {}, {}
        try:
            while deadlines:
                while (message := self.world.poll(notice)) is not None:
                    child = message[0]
                    if child in deadlines and child not in noticed:
                        noticed.add(child)
                        deadlines[child] = time.monotonic() + self.answer_wait_s(child)
                while (message := self.world.poll(tag)) is not None:
                    child, answer = message
                    if child in deadlines:  # not given up on
                        answers[child] = on_answer(child, answer) if on_answer else answer
                        del deadlines[child]
                now = time.monotonic()
                for child in [c for c, deadline in deadlines.items() if now >= deadline]:
                    silent[child] = "answer" if child in noticed else "notice"
                    del deadlines[child]
                if deadlines:
                    time.sleep(POLL_S)
        except KeyboardInterrupt:
            if not interruptible:
                raise
            self.interrupted = True
            silent.update(dict.fromkeys(deadlines, "interrupted"))
        return answers, silent

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
