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


def available_kib(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable: what can be allocated without swapping; None where unknown."""
    try:
        match = re.search(r"^MemAvailable:\s+(\d+)", Path(meminfo).read_text(), re.M)
    except OSError:
        return None
    return int(match.group(1)) if match else None
