"""Independent parts of an analysis in worker processes.

A scan of a 256-CPU node leaves hundreds of millions of kernel events to
explain once its measuring is over, CPU by CPU, and the node's CPUs are idle
then. `run_parts` hands the parts (CPUs) to forked worker processes: they
inherit what the parent has read (the decoder, the spooled tables), write
their results to files and return small descriptions of them.

The parent alone decides about stopping signals: a worker ignores them (a
Ctrl-C reaches the whole process group), and when the parent stops the work
(a KeyboardInterrupt inside `interrupts.raising()`, or an error) it kills
the workers before passing it on. A worker's error reaches the parent as the
same exception. Written on os.fork, not multiprocessing's pools: a pool
waits forever for the part of a worker that was killed, and ends its
workers with SIGTERM, which these ignore.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, NoReturn, TypeVar

from . import interrupts
from .memory import reuse_freed_memory

Part = TypeVar("Part")
Result = TypeVar("Result")

MEMORY_PER_WORKER = 1 << 30  # bytes a worker may need, at most (those of the 256-CPU minute:
# about 35 MiB each beside the pages they share with the scan's process)


def worker_count(parts: int, limit: int | None = None) -> int:
    """How many workers for `parts` parts: one per CPU this process may run
    on, as many as the available memory holds, at most `limit` (None: no
    limit besides those) and at most one per part."""
    count = min(parts, len(os.sched_getaffinity(0)), max(1, _available_memory() // MEMORY_PER_WORKER))
    return max(1, min(count, limit) if limit is not None else count)


def run_parts(work: Callable[[Part], Result], parts: Sequence[Part], workers: int,
              forked: Callable[[], None] | None = None) -> list[Result]:
    """work(part) for every part, results in this order; in `workers` forked
    processes when that is more than one, each taking the next part not yet
    taken as it is done with one (parts that take longer, a report's largest
    figures, do not hold up a fixed share), whose work and results must
    then stand alone (results are pickled, changes to this process's objects
    are lost). The parts of a worker that ended without its results (killed:
    the OOM killer) are done here instead.

    No other thread of this process may be busy when it forks: a forked
    process has none of them, and a lock one of them held (an import's, an
    allocator's) stays held there for ever. `forked` is called once the
    workers are forked (before any part is done without them): where a thread
    of this process must take part, it starts there."""
    if workers <= 1 or len(parts) <= 1:
        if forked is not None:
            forked()
        return [work(part) for part in parts]
    children: dict[int, BinaryIO] = {}
    results: dict[int, Any] = {}
    tickets, issuing = os.pipe()  # each part's number, taken by the worker that reads it
    try:
        for _ in range(min(workers, len(parts))):
            out = tempfile.TemporaryFile()
            pid = os.fork()
            if pid == 0:
                os.close(issuing)
                _worker(work, parts, tickets, out)
            children[pid] = out
        os.close(tickets)
        tickets = -1
        if forked is not None:
            forked()
        _issue(issuing, len(parts))
        os.close(issuing)  # the end: a worker's read then finds no more
        issuing = -1
        for pid, out in list(children.items()):
            _, status = os.waitpid(pid, 0)  # a stop raises here (raising()), and ends them below
            del children[pid]
            with out:
                out.seek(0)
                if os.waitstatus_to_exitcode(status) != 0:
                    continue  # its parts are done below
                done, outcome = pickle.load(out)
            if not done:
                raise outcome
            results.update(outcome)
    finally:
        for fd in (tickets, issuing):
            if fd >= 0:
                os.close(fd)
        for pid, out in children.items():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            out.close()
    return [results[i] if i in results else work(part) for i, part in enumerate(parts)]


TICKET = 4  # bytes of a part's number in the pipe


def _issue(issuing: int, count: int) -> None:
    """Every part's number into the pipe: a write of at most
    PIPE_BUF bytes is never split, so a worker always reads whole numbers.
    Blocks while the pipe is full; once no worker is left to read, the rest
    are left to the parent."""
    per_write = select.PIPE_BUF // TICKET
    try:
        for first in range(0, count, per_write):
            os.write(issuing, b"".join(i.to_bytes(TICKET, "little")
                                       for i in range(first, min(first + per_write, count))))
    except BrokenPipeError:
        pass


def _worker(work: Callable[[Any], Any], parts: Sequence[Any], tickets: int,
            out: BinaryIO) -> NoReturn:
    """A forked worker: the parts whose numbers it takes from `tickets` until
    none is left; its results (number, result) or its error pickled to
    `out`, then os._exit (the parent's open files are not flushed twice, its
    exit handlers do not run)."""
    code = 1
    try:
        for signum in interrupts.STOPPING:
            signal.signal(signum, signal.SIG_IGN)
        reuse_freed_memory()
        try:
            results = []
            while ticket := os.read(tickets, TICKET):
                number = int.from_bytes(ticket, "little")
                results.append((number, work(parts[number])))
            outcome: tuple[bool, Any] = (True, results)
        except Exception as error:  # noqa: BLE001 - handed to the parent, which raises it
            outcome = (False, error)
        pickle.dump(outcome, out)
        out.flush()
        code = 0
    finally:
        os._exit(code)


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return MEMORY_PER_WORKER  # unknown: one worker
