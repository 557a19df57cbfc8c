"""Column-per-CPU summaries ("label: value value ... (unit)"), the format of
oslat's text output and of sysjitter."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .common import SourceText

_ROW = re.compile(r"^\s*(?P<label>[^:]+?)\s*:\s*(?P<rest>.*?)\s*$")
_TRAILING_NOTE = re.compile(r"\s*\([^)]*\)\s*$")


@dataclass
class RowTable:
    rows: dict[str, tuple[int, list[str]]]  # label -> (line number, one value per CPU)
    columns: int
    preamble: list[str]  # the lines before the table
    last_line: int


def read_rows(source: SourceText, first_label: str, hint: str) -> RowTable:
    """The table that starts at the row `first_label`; every later non-blank line
    must be a row with one value per column (a trailing '(unit)' is dropped)."""
    rows: dict[str, tuple[int, list[str]]] = {}
    preamble: list[str] = []
    columns = 0
    last_line = 1
    for n, line in source.lines():
        if not line.strip():
            continue
        last_line = n
        if line.lstrip().startswith("#"):
            continue
        match = _ROW.match(line)
        label = match["label"] if match else None
        if not rows and label != first_label:
            preamble.append(line.strip())
            continue
        if match is None:
            raise source.error(n, f"expected 'label: values', got {line.strip()[:40]!r}", hint)
        rest = match["rest"]
        while _TRAILING_NOTE.search(rest):
            rest = _TRAILING_NOTE.sub("", rest)
        values = rest.split()
        if not rows:
            columns = len(values)
            if columns == 0:
                raise source.error(n, f"'{first_label}' names no CPUs", hint)
        elif len(values) != columns:
            raise source.error(n, f"'{label}' has {len(values)} values for {columns} CPUs "
                                  f"(cut short?)", "give the whole, unedited output")
        if label in rows:
            raise source.error(n, f"'{label}' appears twice", "import one run per file")
        rows[label] = (n, values)
    if not rows:
        raise source.error(last_line, f"no '{first_label}:' row found", hint)
    return RowTable(rows, columns, preamble, last_line)


def row_numbers(source: SourceText, table: RowTable, label: str, hint: str, *,
                required: bool = True) -> list[float] | None:
    """The row's values as numbers; a missing required row means a truncated file."""
    if label not in table.rows:
        if required:
            raise source.error(table.last_line, f"truncated: no '{label}:' row",
                               "give the whole output of the run")
        return None
    line, values = table.rows[label]
    numbers = []
    for value in values:
        try:
            numbers.append(float(value))
        except ValueError:
            raise source.error(line, f"'{label}' value {value!r} is not a number", hint) from None
    return numbers
