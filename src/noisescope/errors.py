"""The one exception type users see: a problem with their input or machine.

The CLI prints it as one line (problem, then how to fix it) and exits 2.
Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input or an unusable environment, with a hint that says how to fix it."""

    def __init__(self, problem: str, hint: str | None = None):
        super().__init__(problem)
        self.problem = problem
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.problem}; {self.hint}" if self.hint else self.problem
