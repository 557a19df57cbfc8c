"""The process's own memory."""

from __future__ import annotations

import ctypes
import ctypes.util


def release_free_memory() -> None:
    """Hand freed heap memory back to the system (glibc keeps large freed
    arrays in the heap otherwise, and the scan's peak memory grows)."""
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
