"""The one exception type users see: a problem with their input or machine.

The CLI prints it as one line (problem, then how to fix it) and exits 2.
Everything else is a bug and keeps its traceback.

An error about an option names it with `option(name)`, the library's name for
it (the keyword of ScanOptions, TimerlatOptions, ...). Whoever shows the error
says it in the user's words: the CLI as its flag (`--duration 10s`), an
experiment file as its key (`timeout = "10m"`), the library as the keyword
(`duration_ns=10s`, the default rendering of str()).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable

# An option inside a message: name, and optionally an example value. Control
# characters that no user text holds (the CLI strips them from what it prints).
_START, _VALUE, _END = "\x1e", "\x1d", "\x1f"
_OPTION = re.compile(f"{_START}(\\w+)(?:{_VALUE}([^{_END}]*))?{_END}")

Say = Callable[[str, "str | None"], str]  # (option name, example) -> the user's words


def option(name: str, example: str | None = None) -> str:
    """The option `name` (with an example value) in a UsageError's message."""
    return f"{_START}{name}{_VALUE}{example}{_END}" if example is not None \
        else f"{_START}{name}{_END}"


def unit_free(name: str) -> str:
    """An option's name without its unit (duration_ns -> duration), as users
    mostly write it: the CLI and experiment files take a value with its unit."""
    return re.sub(r"_(ns|us|kb)$", "", name)


def keyword(name: str, example: str | None) -> str:
    """How the library says an option: its keyword."""
    return name if example is None else f"{name}={example}"


class UsageError(Exception):
    """Bad input or an unusable environment, with a hint that says how to fix it."""

    def __init__(self, problem: str, hint: str | None = None):
        super().__init__(problem)
        self.problem = problem
        self.hint = hint

    @property
    def options(self) -> tuple[str, ...]:
        """The options the error is about, first named first."""
        text = f"{self.problem} {self.hint or ''}"
        return tuple(dict.fromkeys(m.group(1) for m in _OPTION.finditer(text)))

    def render(self, say: Say = keyword) -> str:
        """The message with each option said by `say(name, example)`."""
        said = self.said_as(say)
        return f"{said.problem}; {said.hint}" if said.hint else said.problem

    def said_as(self, say: Say) -> UsageError:
        """The same error with its options said by `say` (no options left in it)."""
        return UsageError(_said(self.problem, say), _said(self.hint, say) if self.hint else None)

    def __str__(self) -> str:
        return self.render()


def _said(text: str, say: Say) -> str:
    return _OPTION.sub(lambda m: say(m.group(1), m.group(2)), text)


def unwritable(directory: str | os.PathLike[str], error: OSError) -> UsageError:
    """The error for an output `directory` in which creating `error`'s file failed,
    saying why in a user's words (as root, /proc refuses with ENOENT, /sys with EPERM)."""
    why = {
        errno.EROFS: "it is on a read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "this file system takes no new files here (such as /sys)",
        errno.ENOENT: "this file system takes no new files (such as /proc)",
    }.get(error.errno, error.strerror or str(error))
    return UsageError(f"cannot write to {directory}: {why}",
                      f"choose a writable {option('output')} directory")
