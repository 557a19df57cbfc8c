"""oslat results: the `--json` file and the text summary.

oslat spins on each CPU reading the TSC and puts every gap between two reads
into buckets of 1 us: the bucket labelled k holds gaps in [k-1, k) us, and
the last one also every longer gap. Its minimum and maximum are whole
microseconds rounded up. Summaries go under "oslat" with the keys the other
latency summaries use (min_ns, avg_ns, max_ns, p50_ns, ...); max_ns means
what the detour probe's max_ns means: the longest time the loop lost the CPU.
"""

from __future__ import annotations

import re

import numpy as np

from ..probes.summary import QUANTILES, linear_histogram_quantiles
from ..tables import Table
from .common import Imported, SourceText, number, thread_cpus
from .rows import read_rows, row_numbers

HINT = "is this oslat output (its text summary or --json)?"
_BUCKET_LABEL = re.compile(r"^(\d+) \(us\)$")
_VERSION = re.compile(r"^oslat V (\S+)")


def read_oslat(source: SourceText, cpus: tuple[int, ...] | None) -> Imported:
    if source.text.lstrip().startswith("{"):
        return _read_json(source, cpus)
    return _read_text(source, cpus)


def _read_json(source: SourceText, cpus: tuple[int, ...] | None) -> Imported:
    data = source.json(HINT)
    threads = data.get("thread")
    if not isinstance(threads, dict) or not threads:
        raise source.error(source.line_of('"thread"'), "no 'thread' results in the JSON", HINT)
    start = source.line_of('"thread"')
    results = []
    for key in sorted(threads, key=lambda k: int(k) if str(k).isdigit() else -1):
        line = source.line_of(f'"{key}"', start)
        entry = threads[key]
        if not isinstance(entry, dict):
            raise source.error(line, f"thread {key!r} is not a thread result", HINT)
        for field in ("min", "avg", "max", "duration", "histogram"):
            if field not in entry:
                raise source.error(line, f"thread {key} has no '{field}'", HINT)
        if not isinstance(entry["histogram"], dict) or not entry["histogram"]:
            raise source.error(line, f"thread {key} has an empty histogram", HINT)
        buckets = {int(number(k, source, line, f"thread {key} bucket", HINT)):
                   int(number(v, source, line, f"thread {key} count", HINT))
                   for k, v in entry["histogram"].items()}
        figures = {f: number(entry[f], source, line, f"thread {key} '{f}'", HINT)
                   for f in ("min", "avg", "max", "duration")}
        figures["counter_mhz"] = entry.get("freq")
        results.append((entry.get("cpu") if isinstance(entry.get("cpu"), int) else None,
                        buckets, figures))
    where = thread_cpus(len(results), [r[0] for r in results], cpus, source)
    summaries, tables = _results(where, [r[1] for r in results], [r[2] for r in results])
    command = data.get("cmdline:", data.get("cmdline"))
    version = data.get("rt_test_version:", data.get("rt_test_version"))
    details = {k: data[k] for k in ("start_time", "end_time", "return_code", "sysinfo")
               if k in data}
    return Imported("json", "oslat", summaries, tables, {"cpus": where},
                    version=str(version) if version is not None else None,
                    command=command if isinstance(command, str) else None, details=details)


def _read_text(source: SourceText, cpus: tuple[int, ...] | None) -> Imported:
    table = read_rows(source, "Core", HINT)
    cores = [int(c) for c in row_numbers(source, table, "Core", HINT)]
    label_buckets = {int(m[1]): label for label in table.rows
                     if (m := _BUCKET_LABEL.match(label))}
    if not label_buckets:
        raise source.error(table.last_line, "truncated: no histogram buckets", HINT)
    freq = row_numbers(source, table, "Counter Freq", HINT, required=False) or \
        row_numbers(source, table, "CPU Freq", HINT, required=False)
    rows = {name: row_numbers(source, table, name, HINT)
            for name in ("Minimum", "Average", "Maximum", "Duration")}
    counts = {k: row_numbers(source, table, label, HINT) for k, label in label_buckets.items()}
    buckets = [{k: int(values[i]) for k, values in counts.items()} for i in range(len(cores))]
    figures = [{"min": rows["Minimum"][i], "avg": rows["Average"][i], "max": rows["Maximum"][i],
                "duration": rows["Duration"][i], "counter_mhz": freq[i] if freq else None}
               for i in range(len(cores))]
    where = thread_cpus(len(cores), list(cores), cpus, source)
    summaries, tables = _results(where, buckets, figures)
    version = next((m[1] for line in table.preamble if (m := _VERSION.match(line))), None)
    return Imported("text", "oslat", summaries, tables, {"cpus": where}, version=version,
                    details={"preamble": table.preamble} if table.preamble else {})


def _results(cpus: list[int | None], buckets: list[dict[int, int]],
             figures: list[dict]) -> tuple[list[dict], dict[str, Table]]:
    summaries, tables = [], []
    for cpu, counts, f in zip(cpus, buckets, figures, strict=True):
        labels = np.array(sorted(counts), dtype=np.int64)
        count = np.array([counts[k] for k in labels], dtype=np.int64)
        top = int(labels.max())
        lower = (labels - 1) * 1000
        upper = labels * 1000
        lower[0] = 0  # with --bias the first bucket holds everything below its label
        # the last bucket also holds every longer gap, up to the maximum
        upper[-1] = max(int(upper[-1]), int(f["max"] * 1000))
        limit_ns = (top - 1) * 1000
        table = Table({"cpu": np.full(len(labels), -1 if cpu is None else cpu, np.int32),
                       "lower_ns": lower, "upper_ns": upper, "count": count})
        tables.append(table)
        values = linear_histogram_quantiles(lower, upper, count, list(QUANTILES.values()),
                                            limit_ns)
        summaries.append({
            "cpu": cpu,
            "samples": int(count.sum()),
            "measured_ns": int(round(f["duration"] * 1e9)),
            "min_ns": int(round(f["min"] * 1000)),
            "avg_ns": f["avg"] * 1000,
            "max_ns": int(round(f["max"] * 1000)),
            **dict(zip(QUANTILES, values, strict=True)),
            "percentiles_from": "histogram",
            "histogram_limit_ns": limit_ns,
            "counter_mhz": f["counter_mhz"],
        })
    return summaries, {"oslat_histogram": Table.concat(tables)}
