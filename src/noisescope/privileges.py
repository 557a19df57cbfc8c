"""What this process may do: SCHED_FIFO and memory locking.

Both are probed by trying, not inferred from the user id: root in a
container often lacks CAP_SYS_NICE or CAP_IPC_LOCK, and an unprivileged user
may have an RLIMIT_RTPRIO that allows real-time priority.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from . import _native


def is_root() -> bool:
    return os.geteuid() == 0


@functools.cache
def can_use_fifo(priority: int) -> bool:
    """Whether a thread of this process may switch to SCHED_FIFO `priority`
    (tried on a short-lived thread, so the caller keeps its own policy)."""
    allowed: list[bool] = []

    def attempt() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
            allowed.append(True)
        except (OSError, ValueError):
            allowed.append(False)

    trial = threading.Thread(target=attempt, name="noisescope-fifo-check")
    trial.start()
    trial.join()
    return allowed[0]


@contextmanager
def memory_locked() -> Iterator[str]:
    """mlockall() for the duration, yielding what happened ('locked' or why not)."""
    error = _native.mlockall()
    if error:
        yield f"skipped: mlockall failed ({os.strerror(error)}; needs root or CAP_IPC_LOCK)"
        return
    try:
        yield "locked"
    finally:
        _native.munlockall()
