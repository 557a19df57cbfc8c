"""Memory: the process's own, and what the machine has available."""

from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path


def release_free_memory() -> None:
    """Hand freed heap memory back to the system (glibc keeps large freed
    arrays in the heap otherwise, and the scan's peak memory grows), and
    what pyarrow's allocator keeps for reuse, if pyarrow is loaded (it is
    not imported for this)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols, libc's among them
    except (OSError, AttributeError):  # not glibc
        pass
    pool = getattr(sys.modules.get("pyarrow"), "default_memory_pool", None)
    if pool is not None:  # (None too while another thread is still importing pyarrow)
        pool().release_unused()


# glibc's mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MAPPED_ALLOCATION_BYTES = 256 << 10  # larger allocations are mapped and unmapped (see below)
KEPT_ALLOCATION_BYTES = 64 << 20  # in workers, arrays up to this size come from the heap
KEPT_FREE_BYTES = 256 << 20  # freed memory at the heap's top kept for reuse (until trimmed)


def hand_back_large_allocations() -> None:
    """Map every allocation above MAPPED_ALLOCATION_BYTES on its own (glibc),
    so that freeing it gives it back at once. By default glibc raises that
    threshold to the largest block freed so far (up to 32 MB), and from then
    on such blocks (numpy arrays, and Arrow's buffers: the CLI gives pyarrow
    the system allocator) come from the heap, where the holes they leave
    between longer-lived blocks stay in the process's memory and grow with
    the number of batches a long scan writes: a 10-minute traced scan's
    process held 19 MB of freed heap at its peak (108 MiB), 3 MB with this
    (92 MiB; docs/benchmarks.md). Worker processes trade this for speed
    (`reuse_freed_memory`)."""
    try:
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, MAPPED_ALLOCATION_BYTES)
    except (OSError, AttributeError):  # not glibc
        pass


def reuse_freed_memory() -> None:
    """Keep freed arrays in the heap for the next ones (glibc): by default
    each array of more than a few MB is mapped afresh and unmapped when
    freed, and every page of the next one faults in again. A worker
    explaining a CPU allocates and frees such arrays for every second of
    trace: 636,000 page faults for 16 CPU-minutes, 158,000 with this, and
    about a tenth less time in the first pass (docs/benchmarks.md).
    release_free_memory() still hands the kept memory back."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, KEPT_ALLOCATION_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, KEPT_FREE_BYTES)
    except (OSError, AttributeError):  # not glibc
        pass


def available_kib(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable: what can be allocated without swapping; None where unknown."""
    try:
        match = re.search(r"^MemAvailable:\s+(\d+)", Path(meminfo).read_text(), re.M)
    except OSError:
        return None
    return int(match.group(1)) if match else None
