"""rtla results (tools/tracing/rtla in the kernel): the text that `rtla osnoise
top`, `rtla timerlat top`, `rtla timerlat hist` and `rtla osnoise hist` print,
in the formats of rtla 6.1 (its source, and the format strings of Debian's
6.1.192 build).

The first line says which of the four a file is. A `top` without -q redraws
its table every second (each refresh starts with ESC c) and once more at the
end: the last refresh is the final state, and the one imported. Times are whole
microseconds (rtla divides nanoseconds by 1000, truncating) unless the header
says nanoseconds (timerlat's -n/--nano).

- timerlat top and hist -> "timerlat", with the keys of noisescope's timerlat
  probe. That probe measures a user thread's wakeup, so rtla's *thread* latency
  is the latency; the IRQ latency goes into irq_samples, irq_min_ns, irq_avg_ns
  and irq_max_ns. timerlat top prints one COUNT, of IRQ activations (each wakes
  the thread once): it is both `samples` and `irq_samples`. hist: percentiles
  from the Thr columns; the histograms go into the tables timerlat_histogram
  (thread) and timerlat_irq_histogram.
- osnoise top -> "osnoise": per CPU the periods, runtime and noise (noise_pct =
  noise / runtime, what 100 - "% CPU Aval" says, with more digits), the largest
  noise in one period and the largest single noise, and the interference
  counts with their rates per second of runtime.
- osnoise hist -> "detour", as sysjitter: a histogram of single noises (gaps of
  the osnoise loop above its threshold) in the table osnoise_histogram. rtla
  prints neither the threshold nor the time measured, so threshold_ns,
  detours_per_s and noise_pct are None.

rtla prints a histogram's non-empty buckets only (unless --with-zeros) and
not its number of buckets (-E). The bucket width (-b) is therefore the greatest
common divisor of the printed indexes (1 when only bucket 0 is printed), and
the overflow bucket (`over:`) is taken to start where the last printed bucket
ends: every overflowing sample lies at or beyond that limit (the real one,
-E x -b, may be higher).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..probes.summary import QUANTILES, linear_histogram_quantiles, timerlat_summary
from ..probes.timerlat import histogram_table
from ..tables import Table
from .common import Imported, SourceText, thread_cpus

HINT = "is this the text output of rtla osnoise/timerlat top or hist?"
WHOLE = "give the whole, unedited output"
US_NS = 1000

Line = tuple[int, str]  # (line number, stripped text)

# A title whose clear-screen code lost its ESC on the way leaves a bare "c" in front.
_OSNOISE_TITLE = re.compile(r"^c?\s*Operating System Noise$")
_TIMERLAT_TITLE = re.compile(r"^c?\s*Timer Latency$")
_HISTOGRAM_TITLE = re.compile(r"^# RTLA (osnoise|timerlat) histogram$")
_DURATION = r"(?P<days>\d+) (?P<hours>\d\d):(?P<minutes>\d\d):(?P<seconds>\d\d)"
_OSNOISE_HEADER = re.compile(rf"^duration:\s+{_DURATION} \| time is in us$")
_TIMERLAT_HEADER = re.compile(rf"^{_DURATION}\s+\|\s+IRQ Timer Latency \((?P<unit>us|ns)\)\s+\|"
                              r"\s+Thread Timer Latency \((?P=unit)\)$")
_TIMERLAT_COLUMNS = "CPU COUNT | cur min avg max | cur min avg max"
_TOP_ROW = re.compile(r"^(?P<cpu>\d+)\s+#(?P<count>\d+)\s*(?P<rest>.*)$")
_UNIT = re.compile(r"^# Time unit is (?:microseconds \(us\)|nanoseconds \((?P<ns>ns)\))$")
_HISTOGRAM_DURATION = re.compile(rf"^# Duration:\s+{_DURATION}$")
_TIMERLAT_COLUMN = re.compile(r"^(?P<context>IRQ|Thr)-(?P<cpu>\d+)$")
_OSNOISE_COLUMN = re.compile(r"^CPU-(?P<cpu>\d+)$")
# What rtla prints after its results when a stop threshold (-a, -s, -T, ...) ended the run
_NOTE = re.compile(r"^(?:(?:rtla )?(?:osnoise|timerlat) hit stop tracing|Saving trace to \S.*)$")
FOOTER = ("over", "count", "min", "avg", "max")
INTERFERENCE = ("hw", "nmi", "irq", "softirq", "thread")
# osnoise top's columns after the period count -> row keys (None: checked, not kept)
OSNOISE_VALUES = {"Runtime": "runtime", "Noise": "noise", "% CPU Aval": None,
                  "Max Noise": "max_noise", "Max Single": "max_single", "HW": "hw", "NMI": "nmi",
                  "IRQ": "irq", "Softirq": "softirq", "Thread": "thread"}
_OSNOISE_COLUMNS = " ".join(["CPU", "Period", *OSNOISE_VALUES])


def read_rtla(source: SourceText, cpus: tuple[int, ...] | None) -> Imported:
    lines = [(n, line.strip()) for n, line in source.lines() if line.strip()]
    if not lines:
        raise source.error(1, "no text besides terminal codes", HINT)
    n, first = lines[0]
    if _OSNOISE_TITLE.match(first):
        return _osnoise_top(source, _read_top(source, lines, _OSNOISE_TITLE, _OSNOISE_HEADER,
                                              _OSNOISE_COLUMNS, _osnoise_row), cpus)
    if _TIMERLAT_TITLE.match(first):
        return _timerlat_top(source, _read_top(source, lines, _TIMERLAT_TITLE, _TIMERLAT_HEADER,
                                               _TIMERLAT_COLUMNS, _timerlat_row), cpus)
    if match := _HISTOGRAM_TITLE.match(first):
        if match[1] == "timerlat":
            return _timerlat_hist(source, _read_histogram(source, lines, _TIMERLAT_COLUMN), cpus)
        return _osnoise_hist(source, _read_histogram(source, lines, _OSNOISE_COLUMN), cpus)
    raise source.error(n, f"not rtla output: {first[:40]!r} is none of rtla's first lines "
                       "('Operating System Noise', 'Timer Latency', '# RTLA ... histogram')",
                       HINT + " (hist output needs its header: no --no-header)")


def _session_ns(duration: re.Match) -> int:
    """rtla's "D HH:MM:SS" (whole seconds since the start)."""
    days, hours, minutes, seconds = (int(duration[k])
                                     for k in ("days", "hours", "minutes", "seconds"))
    return (((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1_000_000_000


def _details(duration: re.Match, notes: list[str], **more: int) -> dict:
    """What else the file says: the duration as rtla printed it, how many times a
    top redrew its table, and rtla's closing notes."""
    text = f"{duration['days']} {duration['hours']}:{duration['minutes']}:{duration['seconds']}"
    return {"duration": text, **more, **({"notes": notes} if notes else {})}


def _whole(source: SourceText, n: int, value: str, column: str) -> int:
    if not value.isdigit():
        raise source.error(n, f"{column} value {value!r} is not a whole number", HINT)
    return int(value)


def _latency_figures(samples: int, figures: dict | None, unit_ns: int) -> dict:
    """samples, min_ns, avg_ns, max_ns of one context; None where it has no samples."""
    return {"samples": samples if figures else 0,
            **{f"{k}_ns": None if not figures or figures[k] is None else figures[k] * unit_ns
               for k in ("min", "avg", "max")}}


def _timerlat_result(cpu: int, thread: dict, irq: dict | None, histogram: Table | None,
                     limit_ns: int | None) -> dict:
    """The timerlat summary of one CPU: the thread latency, the IRQ latency beside it
    (None where the file has no IRQ figures)."""
    summary = timerlat_summary(
        {"cpu": cpu}, interval_ns=None, samples=thread["samples"], missed=None,
        min_ns=thread["min_ns"], max_ns=thread["max_ns"], sum_ns=None, avg_ns=thread["avg_ns"],
        histogram=histogram, histogram_limit_ns=limit_ns,
        histogram_overflow=thread.get("overflow"))
    return {**summary, **{f"irq_{k}": None if irq is None else irq[k]
                          for k in ("samples", "min_ns", "avg_ns", "max_ns")}}


# -- top: the last of its tables -------------------------------------------------------


@dataclass
class _Refresh:
    title_line: int
    lines: list[Line] = field(default_factory=list)  # after the title

    @property
    def last_line(self) -> int:
        return self.lines[-1][0] if self.lines else self.title_line


@dataclass
class _Top:
    header: re.Match  # the line under the title: duration (and unit)
    rows: list[dict]  # the last table's CPU rows
    refreshes: int
    notes: list[str]


RowParser = Callable[[SourceText, int, re.Match], dict]


def _read_top(source: SourceText, lines: list[Line], title: re.Pattern, header: re.Pattern,
              columns: str, parse_row: RowParser) -> _Top:
    refreshes: list[_Refresh] = []
    notes: list[str] = []
    for n, line in lines:
        if title.match(line):
            refreshes.append(_Refresh(n))
        elif _NOTE.match(line):
            notes.append(line)
        else:
            refreshes[-1].lines.append((n, line))
    tables = [_refresh_rows(source, r, header, columns, parse_row) for r in refreshes]
    last_header, rows = tables[-1]
    end = refreshes[-1].last_line
    if not rows:
        raise source.error(end, "the last table has no CPU rows (cut short, or rtla recorded "
                           "nothing?)", WHOLE)
    most = max(len(r) for _, r in tables)
    if len(rows) < most:
        raise source.error(end, f"truncated: the last table has {len(rows)} of the {most} CPU "
                           "rows of an earlier one", WHOLE)
    return _Top(last_header, rows, len(refreshes), notes)


def _refresh_rows(source: SourceText, refresh: _Refresh, header: re.Pattern, columns: str,
                  parse_row: RowParser) -> tuple[re.Match, list[dict]]:
    if len(refresh.lines) < 2:
        raise source.error(refresh.last_line, "truncated: the table ends before its column "
                           "names", WHOLE)
    (n, text), (m, names) = refresh.lines[:2]
    header_match = header.match(text)
    if header_match is None:
        raise source.error(n, f"unexpected line under the title: {text[:50]!r}", HINT)
    if " ".join(names.split()) != columns:
        raise source.error(m, f"unexpected column names {names[:50]!r}", HINT)
    rows: list[dict] = []
    for n, line in refresh.lines[2:]:
        match = _TOP_ROW.match(line)
        if match is None:
            raise source.error(n, f"unexpected line {line[:40]!r} (not a CPU row)", HINT)
        row = parse_row(source, n, match)
        if any(r["cpu"] == row["cpu"] for r in rows):
            raise source.error(n, f"CPU {row['cpu']} appears twice in one table", WHOLE)
        rows.append(row)
    return header_match, rows


def _top_cpus(source: SourceText, top: _Top, cpus: tuple[int, ...] | None) -> list:
    """Each row's CPU: what the file says, or what --cpus says in its place."""
    known = [r["cpu"] for r in top.rows]
    return thread_cpus(len(known), known, cpus, source)


def _osnoise_row(source: SourceText, n: int, match: re.Match) -> dict:
    values = match["rest"].split()
    if len(values) != len(OSNOISE_VALUES):
        raise source.error(n, f"the CPU {match['cpu']} row has {len(values)} values after its "
                           f"period count for {len(OSNOISE_VALUES)} columns (cut short?)", WHOLE)
    named = dict(zip(OSNOISE_VALUES, values, strict=True))
    row = {"cpu": int(match["cpu"]), "periods": int(match["count"]),
           **{key: _whole(source, n, named[column], column)
              for column, key in OSNOISE_VALUES.items() if key}}
    _check_available(source, n, row, named["% CPU Aval"])
    return row


def _check_available(source: SourceText, n: int, row: dict, aval: str) -> None:
    """'% CPU Aval' is (runtime - noise) / runtime, truncated to 5 decimals: a
    value that disagrees means a damaged or shifted row."""
    if not re.fullmatch(r"\d+\.\d{5}", aval):
        raise source.error(n, f"'% CPU Aval' value {aval!r} is not a percentage", HINT)
    if row["runtime"] == 0 or row["noise"] > row["runtime"]:
        raise source.error(n, f"Noise {row['noise']} does not fit in Runtime {row['runtime']}",
                           WHOLE)
    expected = (row["runtime"] - row["noise"]) * 10_000_000 // row["runtime"]
    if abs(int(aval.replace(".", "")) - expected) > 1:
        raise source.error(n, f"'% CPU Aval' {aval} does not match Runtime {row['runtime']} and "
                           f"Noise {row['noise']}", WHOLE)


def _osnoise_top(source: SourceText, top: _Top, cpus: tuple[int, ...] | None) -> Imported:
    summaries = []
    for row, cpu in zip(top.rows, _top_cpus(source, top, cpus), strict=True):
        seconds = row["runtime"] / 1e6
        summaries.append({
            "cpu": cpu,
            "periods": row["periods"],
            "runtime_ns": row["runtime"] * US_NS,
            "noise_ns": row["noise"] * US_NS,
            "noise_pct": 100.0 * row["noise"] / row["runtime"],
            "max_noise_ns": row["max_noise"] * US_NS,
            "max_single_ns": row["max_single"] * US_NS,
            **{f"{k}_count": row[k] for k in INTERFERENCE},
            **{f"{k}_per_s": row[k] / seconds for k in INTERFERENCE},
        })
    parameters = {"cpus": [s["cpu"] for s in summaries], "session_ns": _session_ns(top.header)}
    return Imported("osnoise top", "osnoise", summaries, {}, parameters,
                    details=_details(top.header, top.notes, refreshes=top.refreshes))


def _timerlat_row(source: SourceText, n: int, match: re.Match) -> dict:
    parts = match["rest"].split("|")
    if len(parts) != 3 or parts[0].strip():
        raise source.error(n, f"cannot read the CPU {match['cpu']} row (cut short?)", WHOLE)
    return {"cpu": int(match["cpu"]), "count": int(match["count"]),
            "irq": _latencies(source, n, parts[1], "IRQ"),
            "thread": _latencies(source, n, parts[2], "thread")}


def _latencies(source: SourceText, n: int, text: str, context: str) -> dict | None:
    """cur, min, avg and max of one context; None where rtla prints dashes (no samples)."""
    values = text.split()
    if len(values) != 4:
        raise source.error(n, f"the {context} latency has {len(values)} values for 4 columns "
                           "(cut short?)", WHOLE)
    if values == ["-"] * 4:
        return None
    return {key: _whole(source, n, value, f"{context} {key}")
            for key, value in zip(("cur", "min", "avg", "max"), values, strict=True)}


def _timerlat_top(source: SourceText, top: _Top, cpus: tuple[int, ...] | None) -> Imported:
    unit_ns = 1 if top.header["unit"] == "ns" else US_NS
    summaries = [_timerlat_result(cpu, _latency_figures(row["count"], row["thread"], unit_ns),
                                  _latency_figures(row["count"], row["irq"], unit_ns), None, None)
                 for row, cpu in zip(top.rows, _top_cpus(source, top, cpus), strict=True)]
    parameters = {"cpus": [s["cpu"] for s in summaries], "session_ns": _session_ns(top.header)}
    return Imported("timerlat top", "timerlat", summaries, {}, parameters,
                    details=_details(top.header, top.notes, refreshes=top.refreshes))


# -- hist -------------------------------------------------------------------------------


@dataclass
class _Histogram:
    unit_ns: int
    duration: re.Match
    columns_line: int
    columns: list[re.Match]  # the column names, matched
    indexes: np.ndarray  # each row's bucket index (in units)
    counts: np.ndarray  # rows x columns
    footer: dict[str, list]  # over, count, min, avg, max: one value per column
    notes: list[str]

    @property
    def width(self) -> int:
        """The bucket width in units (rtla's -b)."""
        return math.gcd(*self.indexes.tolist()) or 1

    @property
    def limit_ns(self) -> int:
        """Where the overflow bucket starts at the earliest."""
        last = int(self.indexes[-1]) + self.width if len(self.indexes) else 0
        return last * self.unit_ns

    def column(self, j: int, cpu: int) -> tuple[dict, Table]:
        """Column j's figures in ns and its histogram."""
        unit, width = self.unit_ns, self.width
        dense = np.zeros(self.limit_ns // unit // width, np.int64)
        dense[self.indexes // width] = self.counts[:, j]
        count, over, top = (self.footer[k][j] for k in ("count", "over", "max"))
        # a maximum of whole units holds latencies up to the next unit
        table = histogram_table(cpu, dense, over, top * unit + unit - 1 if count else None,
                                bucket_ns=width * unit)
        figures = _latency_figures(count, {k: self.footer[k][j] for k in ("min", "avg", "max")}
                                   if count else None, unit)
        return {**figures, "overflow": over}, table

    def parameters(self, cpus: list) -> dict:
        return {"cpus": cpus, "session_ns": _session_ns(self.duration),
                "bucket_ns": self.width * self.unit_ns, "histogram_limit_ns": self.limit_ns}


def _read_histogram(source: SourceText, lines: list[Line], column_name: re.Pattern) -> _Histogram:
    if len(lines) < 4:
        raise source.error(lines[-1][0], "truncated: the histogram ends in its header", WHOLE)
    (n_unit, unit_line), (n_duration, duration_line), (n, names_line) = lines[1:4]
    unit = _UNIT.match(unit_line)
    duration = _HISTOGRAM_DURATION.match(duration_line)
    for line_number, line, match, what in ((n_unit, unit_line, unit, "# Time unit is ..."),
                                           (n_duration, duration_line, duration,
                                            "# Duration: ...")):
        if match is None:
            raise source.error(line_number, f"expected '{what}', got {line[:40]!r}", HINT)
    label, *names = names_line.split()
    if label != "Index":
        raise source.error(n, "the histogram has no Index column (rtla --no-index)",
                           "import rtla's output without --no-index")
    columns = []
    for name in names:
        if (match := column_name.match(name)) is None:
            raise source.error(n, f"unexpected column {name!r}", HINT)
        columns.append(match)
    if not columns:
        raise source.error(n, "the histogram has no CPU columns (rtla recorded nothing?)", WHOLE)
    indexes, rows, footer, notes = _histogram_body(source, lines[4:], [m[0] for m in columns])
    counts = np.array(rows, np.int64).reshape(len(rows), len(columns))
    count_line, count = footer["count"]
    for j, match in enumerate(columns):
        held = int(counts[:, j].sum()) + footer["over"][1][j]
        if held != count[j]:
            raise source.error(count_line, f"column {match[0]}: the rows and 'over:' hold "
                               f"{held} samples but 'count:' says {count[j]}", WHOLE)
    return _Histogram(1 if unit["ns"] else US_NS, duration, n, columns,
                      np.array(indexes, np.int64), counts,
                      {key: values for key, (_, values) in footer.items()}, notes)


def _histogram_body(source: SourceText, lines: list[Line], columns: list[str]):
    """The rows (bucket index, counts), then the footer lines in rtla's order, then
    rtla's notes."""
    indexes: list[int] = []
    rows: list[list[int]] = []
    footer: dict[str, tuple[int, list]] = {}
    notes: list[str] = []
    for n, line in lines:
        if _NOTE.match(line):
            notes.append(line)
            continue
        label, *values = line.split()
        if notes:
            raise source.error(n, f"unexpected line {line[:40]!r} after rtla's notes", HINT)
        if len(values) != len(columns):
            raise source.error(n, f"{label!r} has {len(values)} values for the {len(columns)} "
                               "columns (cut short?)", WHOLE)
        if label.endswith(":"):
            expected = FOOTER[len(footer)] if len(footer) < len(FOOTER) else None
            if label != f"{expected}:":
                raise source.error(n, f"unexpected line {line[:40]!r}"
                                   + (f" where '{expected}:' belongs" if expected else ""), HINT)
            footer[expected] = (n, [_footer_value(source, n, expected, v) for v in values])
            continue
        if footer:
            raise source.error(n, f"a histogram row after the '{list(footer)[-1]}:' line", HINT)
        bucket = _whole(source, n, label, "Index")
        if indexes and bucket <= indexes[-1]:
            raise source.error(n, f"bucket {bucket} after bucket {indexes[-1]}", WHOLE)
        indexes.append(bucket)
        rows.append([_whole(source, n, v, columns[j]) for j, v in enumerate(values)])
    for key in FOOTER:
        if key not in footer:
            raise source.error(lines[-1][0] if lines else 1,
                               f"truncated: the histogram has no '{key}:' line",
                               WHOLE + " of a run without --no-summary")
    return indexes, rows, footer, notes


def _footer_value(source: SourceText, n: int, key: str, value: str) -> float | None:
    """Whole numbers, but the average: a dash where a column has no samples, and
    decimals in later rtla versions."""
    if key == "avg" and value == "-":
        return None
    if key == "avg" and re.fullmatch(r"\d+\.\d+", value):
        return float(value)
    return _whole(source, n, value, f"'{key}:'")


def _timerlat_hist(source: SourceText, h: _Histogram, cpus: tuple[int, ...] | None) -> Imported:
    by_cpu: dict[int, dict[str, int]] = {}  # CPU -> context (IRQ, Thr) -> column
    for j, match in enumerate(h.columns):
        contexts = by_cpu.setdefault(int(match["cpu"]), {})
        if match["context"] in contexts:
            raise source.error(h.columns_line, f"column {match[0]} appears twice", WHOLE)
        contexts[match["context"]] = j
    for cpu, contexts in by_cpu.items():
        if "Thr" not in contexts:
            raise source.error(h.columns_line, f"no thread latency for CPU {cpu} (rtla "
                               "--no-thread?): noisescope's timer latency is the thread's",
                               "import rtla timerlat output without --no-thread")
    known = sorted(by_cpu)
    summaries, thread_tables, irq_tables = [], [], []
    for cpu, label in zip(known, thread_cpus(len(known), known, cpus, source), strict=True):
        thread, table = h.column(by_cpu[cpu]["Thr"], label)
        thread_tables.append(table)
        irq = None
        if "IRQ" in by_cpu[cpu]:
            irq, irq_table = h.column(by_cpu[cpu]["IRQ"], label)
            irq_tables.append(irq_table)
        summaries.append(_timerlat_result(label, thread, irq, table, h.limit_ns))
    tables = {"timerlat_histogram": Table.concat(thread_tables)}
    if irq_tables:
        tables["timerlat_irq_histogram"] = Table.concat(irq_tables)
    return Imported("timerlat hist", "timerlat", summaries, tables,
                    h.parameters([s["cpu"] for s in summaries]),
                    details=_details(h.duration, h.notes))


def _osnoise_hist(source: SourceText, h: _Histogram, cpus: tuple[int, ...] | None) -> Imported:
    known = [int(match["cpu"]) for match in h.columns]
    if len(set(known)) < len(known):
        raise source.error(h.columns_line, "a CPU column appears twice", WHOLE)
    summaries, tables = [], []
    for j, cpu in enumerate(thread_cpus(len(known), known, cpus, source)):
        noise, table = h.column(j, cpu)
        tables.append(table)
        values = linear_histogram_quantiles(table["lower_ns"], table["upper_ns"], table["count"],
                                            list(QUANTILES.values()), h.limit_ns)
        summaries.append({
            "cpu": cpu,
            "threshold_ns": None,
            "detours": noise["samples"],
            "detours_per_s": None,
            "lost_ns": None,
            "noise_pct": None,
            "min_ns": noise["min_ns"],
            "avg_ns": noise["avg_ns"],
            "max_ns": noise["max_ns"],
            **dict(zip(QUANTILES, values, strict=True)),
            "percentiles_from": "histogram",
            "histogram_limit_ns": h.limit_ns,
            "histogram_overflow": noise["overflow"],
        })
    return Imported("osnoise hist", "detour", summaries,
                    {"osnoise_histogram": Table.concat(tables)},
                    h.parameters([s["cpu"] for s in summaries]),
                    details=_details(h.duration, h.notes))
