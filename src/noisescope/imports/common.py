"""What the readers share: the source text with line numbers, parse errors,
JSON with line numbers, and the Imported result."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import UsageError, option
from ..tables import Table

MAX_FILE_BYTES = 256 * 1024 * 1024


@dataclass
class Imported:
    """One file's results, ready to become a bundle."""

    format: str  # e.g. "histogram text", "json"
    probe: str  # the summary kind: timerlat, oslat, detour
    summaries: list[dict]
    tables: dict[str, Table] = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    version: str | None = None
    command: str | None = None
    details: dict = field(default_factory=dict)  # anything else the file says (sysinfo, times)


@dataclass(frozen=True)
class SourceText:
    path: Path
    text: str

    @classmethod
    def read(cls, path: Path) -> SourceText:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                raise UsageError(f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB",
                                 "give the tool's summary or histogram output")
            data = path.read_bytes()
        except FileNotFoundError:
            raise UsageError(f"{path} does not exist", "give the output file to import") from None
        except IsADirectoryError:
            raise UsageError(f"{path} is a directory", "give the output file to import") from None
        except OSError as error:
            raise UsageError(f"cannot read {path} ({error.strerror})",
                             "check the path and its permissions") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data[:error.start].count(b"\n") + 1
            raise UsageError(f"{path}:{line}: not text (byte {error.start} is not UTF-8)",
                             "give the tool's text or JSON output") from None
        if not text.strip():
            raise UsageError(f"{path}:1: the file is empty", "give the tool's output file")
        return cls(path, text)

    def lines(self) -> list[tuple[int, str]]:
        """(line number, line) pairs, without terminal codes (cyclictest's live
        display moves the cursor up before each refresh, rtla's top clears the
        screen with ESC c and colours its headers)."""
        return [(n, _ANSI.sub("", line).rstrip("\r"))
                for n, line in enumerate(self.text.split("\n"), start=1)]

    def error(self, line: int, problem: str, hint: str) -> UsageError:
        return UsageError(f"{self.path}:{line}: {problem}", hint)

    def json(self, hint: str) -> dict:
        try:
            data = json.loads(self.text)
        except json.JSONDecodeError as error:
            if error.pos >= len(self.text.rstrip()):
                raise self.error(error.lineno, "truncated: the JSON ends early",
                                 "give the whole file") from None
            raise self.error(error.lineno, f"not valid JSON ({error.msg})", hint) from None
        if not isinstance(data, dict):
            raise self.error(1, "the JSON is not an object", hint)
        return data

    def line_of(self, needle: str, after: int = 1) -> int:
        """First line at or after `after` that contains `needle` (for errors in JSON)."""
        for number, line in enumerate(self.text.split("\n"), start=1):
            if number >= after and needle in line:
                return number
        return after


_ANSI = re.compile(r"\x1b(?:\[[0-9;]*[A-Za-z]|c)")  # CSI sequences and ESC c (reset)


def number(value: object, source: SourceText, line: int, what: str, hint: str) -> float:
    """A finite, non-negative number from a JSON value or a text field."""
    try:
        result = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise source.error(line, f"{what} is not a number ({value!r})", hint) from None
    if not np.isfinite(result) or result < 0:
        raise source.error(line, f"{what} is not a non-negative number ({value!r})", hint)
    return result


def thread_cpus(count: int, known: list[int | None], cpus: tuple[int, ...] | None,
                source: SourceText) -> list[int | None]:
    """The CPU of each thread: what the file says, else what the user said (--cpus)."""
    if cpus is None:
        return known
    if len(cpus) != count:
        raise UsageError(f"{option('cpus')} names {len(cpus)} CPUs but {source.path} has {count} "
                         f"threads",
                         "list one CPU per thread, in thread order")
    return list(cpus)
