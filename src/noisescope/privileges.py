"""What this process may do: SCHED_FIFO and memory locking."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager

from . import _native


def is_root() -> bool:
    return os.geteuid() == 0


def can_use_fifo(priority: int) -> bool:
    if is_root():
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_RTPRIO)
    return soft == resource.RLIM_INFINITY or soft >= priority


@contextmanager
def memory_locked(permitted: bool) -> Iterator[str]:
    """mlockall() for the duration, yielding what happened ('locked' or why not)."""
    if not permitted:
        yield "skipped: needs root (or CAP_IPC_LOCK)"
        return
    error = _native.mlockall()
    if error:
        yield f"skipped: mlockall failed ({os.strerror(error)})"
        return
    try:
        yield "locked"
    finally:
        _native.munlockall()
