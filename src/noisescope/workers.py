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
    processes when that is more than one, each taking every workers-th part
    (work and its results must then stand alone: results are pickled, changes
    to this process's objects are lost). The parts of a worker that ended
    without its results (killed: the OOM killer) are done here instead.

    No other thread of this process may be busy when it forks: a forked
    process has none of them, and a lock one of them held (an import's, an
    allocator's) stays held there for ever. `forked` is called once the
    workers are forked (before any part is done without them): where a thread
    of this process must take part, it starts there."""
    if workers <= 1 or len(parts) <= 1:
        if forked is not None:
            forked()
        return [work(part) for part in parts]
    shares = [range(k, len(parts), workers) for k in range(min(workers, len(parts)))]
    children: dict[int, tuple[range, BinaryIO]] = {}
    results: list[Any] = [None] * len(parts)
    try:
        for share in shares:
            out = tempfile.TemporaryFile()
            pid = os.fork()
            if pid == 0:
                _worker(work, [parts[i] for i in share], out)
            children[pid] = (share, out)
        if forked is not None:
            forked()
        for pid, (share, out) in list(children.items()):
            _, status = os.waitpid(pid, 0)  # a stop raises here (raising()), and ends them below
            del children[pid]
            with out:
                out.seek(0)
                done, outcome = (pickle.load(out) if os.waitstatus_to_exitcode(status) == 0
                                 else (True, [work(parts[i]) for i in share]))
            if not done:
                raise outcome
            for i, result in zip(share, outcome, strict=True):
                results[i] = result
    finally:
        for pid, (_, out) in children.items():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            out.close()
    return results


def _worker(work: Callable[[Any], Any], parts: list[Any], out: BinaryIO) -> NoReturn:
    """A forked worker: its results (or its error) pickled to `out`, then
    os._exit (the parent's open files are not flushed twice, its exit
    handlers do not run)."""
    code = 1
    try:
        for signum in interrupts.STOPPING:
            signal.signal(signum, signal.SIG_IGN)
        reuse_freed_memory()
        try:
            outcome: tuple[bool, Any] = (True, [work(part) for part in parts])
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
