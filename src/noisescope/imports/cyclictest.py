"""cyclictest results: the text output (the live/summary `T:` lines and the
`-h` histogram, with or without `-q`) and the `--json` file.

cyclictest reports whole microseconds (truncated; `-N` switches to
nanoseconds), so imported latencies are multiples of 1000 ns. It does not
count missed periods: `missed` is None. Percentiles come from the histogram
(1 us buckets) when there is one.
"""

from __future__ import annotations

import re
import shlex

import numpy as np

from ..probes.summary import timerlat_summary
from ..probes.timerlat import histogram_table
from ..tables import Table
from .common import Imported, SourceText, number, thread_cpus

HINT = "is this cyclictest output (text with -h/-q, or --json)?"
DEFAULT_INTERVAL_US = 1000
DEFAULT_DISTANCE_US = 500

_T_LINE = re.compile(
    r"^T:\s*(?P<thread>\d+)\s*\(\s*(?P<tid>\d+)\)\s*P:\s*(?P<priority>-?\d+)\s*"
    r"I:\s*(?P<interval>\d+)\s*C:\s*(?P<cycles>\d+)\s*Min:\s*(?P<min>\d+)\s*"
    r"Act:\s*(?P<act>\d+)\s*Avg:\s*(?P<avg>\d+)\s*Max:\s*(?P<max>\d+)\s*$")
_HISTOGRAM_ROW = re.compile(r"^(\d+)((?:\s+\d+)+)\s*$")
_FOOTER = re.compile(r"^# (Total|Min Latencies|Avg Latencies|Max Latencies|Histogram Overflows):"
                     r"((?:\s+\d+)*)\s*$")


def read_cyclictest(source: SourceText, cpus: tuple[int, ...] | None) -> Imported:
    if source.text.lstrip().startswith("{"):
        return _read_json(source, cpus)
    return _read_text(source, cpus)


# -- text ----------------------------------------------------------------------


def _read_text(source: SourceText, cpus: tuple[int, ...] | None) -> Imported:
    last_t: dict[int, re.Match] = {}
    rows: list[tuple[int, list[int]]] = []  # (line, counts)
    footer: dict[str, tuple[int, list[int]]] = {}
    in_histogram = False
    last_line = 1
    for n, line in source.lines():
        stripped = line.strip()
        if not stripped:
            continue
        last_line = n
        if stripped == "# Histogram":
            in_histogram = True
        elif stripped.startswith("T:"):
            match = _T_LINE.match(stripped)
            if not match:
                raise source.error(n, "cannot read this T: line (cut short?)", HINT)
            last_t[int(match["thread"])] = match
        elif (row := _HISTOGRAM_ROW.match(stripped)) and in_histogram and not footer:
            bucket, counts = int(row[1]), [int(v) for v in row[2].split()]
            if bucket != len(rows):
                raise source.error(n, f"histogram bucket {bucket} where {len(rows)} was expected",
                                   HINT)
            if rows and len(counts) != len(rows[0][1]):
                raise source.error(n, f"histogram row has {len(counts)} counts, the rows above "
                                   f"{len(rows[0][1])} (cut short?)",
                                   "give the whole, unedited output")
            rows.append((n, counts))
        elif stripped.startswith("# ") and (match := _FOOTER.match(stripped)):
            footer[match[1]] = (n, [int(v) for v in match[2].split()])
        elif stripped.startswith("#") or stripped.startswith("policy:"):
            continue  # comments (dma latency, overflow cycle numbers) and live status
        else:
            raise source.error(n, f"unexpected line {stripped[:40]!r}", HINT)

    if not last_t and not in_histogram:
        raise source.error(last_line, "no cyclictest results (no T: lines, no histogram)", HINT)
    histogram = _text_histogram(source, rows, footer, last_line) if in_histogram else None
    threads = sorted(last_t) if last_t else list(range(len(histogram["total"])))
    if histogram and len(histogram["total"]) != len(threads):
        raise source.error(footer["Total"][0], f"the histogram has {len(histogram['total'])} "
                           f"threads but the T: lines {len(threads)}", HINT)
    where = thread_cpus(len(threads), [None] * len(threads), cpus, source)
    summaries, tables = [], []
    for index, (thread, cpu) in enumerate(zip(threads, where, strict=True)):
        t = last_t.get(thread)
        figures = _text_figures(t, histogram, index)
        counts = histogram["counts"][:, index] if histogram else None
        summary, table = _thread_result(thread, cpu, figures, counts,
                                        histogram["overflow"][index] if histogram else None)
        summaries.append(summary)
        tables.append(table)
    first = last_t.get(threads[0]) if last_t else None
    parameters = {
        "threads": len(threads),
        "cpus": where,
        "interval_ns": int(first["interval"]) * 1000 if first else None,
        "priority": int(first["priority"]) if first else None,
        "histogram_limit_ns": len(rows) * 1000 if histogram else None,
    }
    return Imported("histogram text" if histogram else "text", "timerlat", summaries,
                    _tables(tables), parameters)


def _text_histogram(source: SourceText, rows: list, footer: dict, last_line: int) -> dict:
    for key in ("Total", "Min Latencies", "Avg Latencies", "Max Latencies"):
        if key not in footer:
            raise source.error(last_line, f"truncated: the histogram has no '# {key}:' line",
                               "give the whole output of the run")
    total_line, total = footer["Total"]
    if not rows:
        raise source.error(total_line, "the histogram has no buckets", HINT)
    threads = len(total)
    matrix = []
    for n, counts in rows:
        # -H (histofall) adds a column that sums the threads
        if len(counts) not in (threads, threads + 1):
            raise source.error(n, f"histogram row has {len(counts)} counts for {threads} threads",
                               "give the whole, unedited output")
        matrix.append(counts[:threads])
    counts = np.array(matrix, dtype=np.int64)
    for key in ("Min Latencies", "Avg Latencies", "Max Latencies", "Histogram Overflows"):
        if key in footer and len(footer[key][1]) != threads:
            raise source.error(footer[key][0], f"'# {key}' has {len(footer[key][1])} values for "
                               f"{threads} threads", "give the whole, unedited output")
    if not np.array_equal(counts.sum(axis=0), total):
        raise source.error(total_line, f"the histogram rows add up to "
                           f"{counts.sum(axis=0).tolist()} but '# Total' says {total}",
                           "give the whole, unedited output")
    return {"counts": counts, "total": total,
            "overflow": footer.get("Histogram Overflows", (0, [0] * threads))[1],
            "min": footer["Min Latencies"][1], "avg": footer["Avg Latencies"][1],
            "max": footer["Max Latencies"][1]}


def _text_figures(t: re.Match | None, histogram: dict | None, index: int) -> dict:
    """Per-thread figures in us: the final T: line where there is one (it
    counts every cycle), else the histogram footer."""
    if t is not None:
        return {"interval_us": int(t["interval"]), "samples": int(t["cycles"]),
                "min": int(t["min"]), "avg": float(t["avg"]), "max": int(t["max"])}
    assert histogram is not None
    return {"interval_us": None,
            "samples": int(histogram["total"][index] + histogram["overflow"][index]),
            "min": histogram["min"][index], "avg": float(histogram["avg"][index]),
            "max": histogram["max"][index]}


# -- JSON ----------------------------------------------------------------------


def _read_json(source: SourceText, cpus: tuple[int, ...] | None) -> Imported:
    data = source.json(HINT)
    threads = data.get("thread")
    if not isinstance(threads, dict) or not threads:
        raise source.error(source.line_of('"thread"'), "no 'thread' results in the JSON", HINT)
    command = data.get("cmdline:", data.get("cmdline"))  # rt-tests spells it with a colon
    options = _command_options(command)
    scale = 1 if options["nsecs"] else 1000
    start = source.line_of('"thread"')
    keys = sorted(threads, key=lambda k: int(k) if str(k).isdigit() else -1)
    known = []
    figures_by_thread = []
    for key in keys:
        line = source.line_of(f'"{key}"', start)
        entry = threads[key]
        if not str(key).isdigit() or not isinstance(entry, dict):
            raise source.error(line, f"thread {key!r} is not a thread result", HINT)
        for field in ("cycles", "min", "max", "avg"):
            if field not in entry:
                raise source.error(line, f"thread {key} has no '{field}'", HINT)
        thread = int(key)
        interval = options["interval_us"] + thread * options["distance_us"]
        figures = {f: number(entry[f], source, line, f"thread {key} '{f}'", HINT)
                   for f in ("cycles", "min", "max", "avg")}
        histogram = entry.get("histogram") or {}
        if not isinstance(histogram, dict):
            raise source.error(line, f"thread {key} 'histogram' is not an object", HINT)
        known.append(entry.get("cpu") if isinstance(entry.get("cpu"), int) else None)
        figures_by_thread.append((thread, line, interval, figures, histogram))
    where = thread_cpus(len(keys), known, cpus, source)
    summaries, tables = [], []
    limit_us = options["histogram_us"]
    for (thread, line, interval, f, histogram), cpu in zip(figures_by_thread, where, strict=True):
        counts = None
        overflow = None
        if histogram:
            buckets = {int(number(k, source, line, f"thread {thread} bucket", HINT)):
                       int(number(v, source, line, f"thread {thread} count", HINT))
                       for k, v in histogram.items()}
            size = limit_us or max(buckets) + 1
            counts = np.zeros(size, np.int64)
            for bucket, count in buckets.items():
                if bucket >= size:
                    raise source.error(line, f"thread {thread} bucket {bucket} is beyond the "
                                       f"histogram limit {size} us", HINT)
                counts[bucket] = count
            overflow = int(f["cycles"]) - int(counts.sum())
            if overflow < 0:
                raise source.error(line, f"thread {thread} histogram holds more samples "
                                   f"({int(counts.sum())}) than its cycles ({int(f['cycles'])})",
                                   HINT)
        figures = {"interval_us": interval, "samples": int(f["cycles"]),
                   "min": f["min"] * scale / 1000, "avg": f["avg"] * scale / 1000,
                   "max": f["max"] * scale / 1000}
        summary, table = _thread_result(thread, cpu, figures, counts, overflow)
        summaries.append(summary)
        tables.append(table)
    parameters = {
        "threads": len(keys),
        "cpus": where,
        "interval_ns": options["interval_us"] * 1000,
        "priority": options["priority"],
        "histogram_limit_ns": limit_us * 1000 if limit_us else None,
        "loops": options["loops"],
    }
    details = {k: data[k] for k in ("start_time", "end_time", "return_code", "sysinfo")
               if k in data}
    version = data.get("rt_test_version:", data.get("rt_test_version"))
    return Imported("json", "timerlat", summaries, _tables(tables), parameters,
                    version=str(version) if version is not None else None,
                    command=command if isinstance(command, str) else None, details=details)


def _command_options(command: object) -> dict:
    """The options of a cyclictest command line that change what its JSON means."""
    try:
        tokens = shlex.split(command) if isinstance(command, str) else []
    except ValueError:
        tokens = str(command).split()

    def value(short: str, long: str) -> str | None:
        for i, token in enumerate(tokens):
            if token in (short, long) and i + 1 < len(tokens):
                return tokens[i + 1]
            if token.startswith(long + "="):
                return token.split("=", 1)[1]
            if token.startswith(short) and len(token) > 2 and not token.startswith("--"):
                return token[2:]
        return None

    def integer(text: str | None, default: int | None) -> int | None:
        return int(text) if text is not None and text.isdigit() else default

    def flag(short: str, long: str) -> bool:
        return any(t == long or (t.startswith("-") and not t.startswith("--") and short in t[1:])
                   for t in tokens)

    histogram = integer(value("-h", "--histogram"), None) or integer(value("-H", "--histofall"),
                                                                     None)
    # -h and -S run every thread at the same interval; otherwise thread N
    # wakes every interval + N * distance.
    same_interval = histogram is not None or flag("S", "--smp")
    return {
        "interval_us": integer(value("-i", "--interval"), DEFAULT_INTERVAL_US),
        "distance_us": 0 if same_interval else integer(value("-d", "--distance"),
                                                       DEFAULT_DISTANCE_US),
        "priority": integer(value("-p", "--priority"), 0),
        "histogram_us": histogram,
        "loops": integer(value("-l", "--loops"), None),
        "nsecs": flag("N", "--nsecs"),
    }


# -- both -------------------------------------------------------------------------


def _thread_result(thread: int, cpu: int | None, f: dict, counts: np.ndarray | None,
                   overflow: int | None) -> tuple[dict, Table]:
    histogram = None
    if counts is not None:
        # cyclictest truncates to whole us: the largest latency is below max + 1 us
        histogram = histogram_table(-1 if cpu is None else cpu, counts, overflow or 0,
                                    int(f["max"] * 1000) + 999)
        histogram = Table({**histogram, "thread": np.full(histogram.rows, thread, np.int32)})
    summary = timerlat_summary(
        {"cpu": cpu, "thread": thread}, interval_ns=_ns(f["interval_us"]), samples=f["samples"],
        missed=None, min_ns=f["min"] * 1000, max_ns=f["max"] * 1000, sum_ns=None,
        avg_ns=f["avg"] * 1000, histogram=histogram,
        histogram_limit_ns=len(counts) * 1000 if counts is not None else None,
        histogram_overflow=overflow)
    return summary, histogram if histogram is not None else Table()


def _ns(us: float | None) -> int | None:
    return None if us is None else int(round(us * 1000))


def _tables(histograms: list[Table]) -> dict[str, Table]:
    table = Table.concat(histograms)
    return {"timerlat_histogram": table} if table.rows else {}
