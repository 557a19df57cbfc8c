"""The process's own memory."""

from __future__ import annotations

import ctypes


def release_free_memory() -> None:
    """Hand freed heap memory back to the system (glibc keeps large freed
    arrays in the heap otherwise, and the scan's peak memory grows)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols, libc's among them
    except (OSError, AttributeError):  # not glibc
        pass
