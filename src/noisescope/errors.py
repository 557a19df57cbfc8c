"""The one exception type users see: a problem with their input or machine.

The CLI prints it as one line (problem, then how to fix it) and exits 2.
Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
import os


class UsageError(Exception):
    """Bad input or an unusable environment, with a hint that says how to fix it."""

    def __init__(self, problem: str, hint: str | None = None):
        super().__init__(problem)
        self.problem = problem
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.problem}; {self.hint}" if self.hint else self.problem


def unwritable(directory: str | os.PathLike[str], error: OSError) -> UsageError:
    """The error for an output `directory` in which creating `error`'s file failed,
    saying why in a user's words (as root, /proc refuses with ENOENT, /sys with EPERM)."""
    why = {
        errno.EROFS: "it is on a read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "this file system takes no new files here (such as /sys)",
        errno.ENOENT: "this file system takes no new files (such as /proc)",
    }.get(error.errno, error.strerror or str(error))
    return UsageError(f"cannot write to {directory}: {why}", "choose a writable -o directory")
