"""sysjitter results (the summary it prints; Solarflare/OpenOnload's tool).

sysjitter spins on each CPU and records every interruption of at least its
threshold: the detour probe's measurement. Its figures therefore go under
"detour" with the detour probe's keys (detours, detours_per_s, noise_pct,
p50_ns, p99_ns, p999_ns, max_ns, lost_ns, threshold_ns, measured_ns), plus
the ones only sysjitter reports (min_ns, avg_ns, p90_ns, p9999_ns, p99999_ns).
Its percentiles come from the sorted interruptions, like the detour probe's.
"""

from __future__ import annotations

from .common import Imported, SourceText, thread_cpus
from .rows import read_rows, row_numbers

HINT = "is this sysjitter's summary output?"

# sysjitter row -> summary key (all nanoseconds unless said otherwise)
ROWS = {
    "threshold(ns)": "threshold_ns",
    "runtime(ns)": "measured_ns",
    "int_n": "detours",
    "int_n_per_sec": "detours_per_s",
    "int_min(ns)": "min_ns",
    "int_median(ns)": "p50_ns",
    "int_mean(ns)": "avg_ns",
    "int_99(ns)": "p99_ns",
    "int_999(ns)": "p999_ns",
    "int_max(ns)": "max_ns",
    "int_total(ns)": "lost_ns",
    "int_total(%)": "noise_pct",
}
OPTIONAL_ROWS = {
    "cpu_mhz": "cpu_mhz",
    "int_90(ns)": "p90_ns",
    "int_9999(ns)": "p9999_ns",
    "int_99999(ns)": "p99999_ns",
}
FLOAT_KEYS = {"detours_per_s", "noise_pct", "avg_ns"}


def read_sysjitter(source: SourceText, cpus: tuple[int, ...] | None) -> Imported:
    table = read_rows(source, "core_i", HINT)
    cores = [int(c) for c in row_numbers(source, table, "core_i", HINT)]
    columns = {key: row_numbers(source, table, row, HINT) for row, key in ROWS.items()}
    for row, key in OPTIONAL_ROWS.items():
        values = row_numbers(source, table, row, HINT, required=False)
        if values is not None:
            columns[key] = values
    where = thread_cpus(len(cores), list(cores), cpus, source)
    summaries = []
    for i, cpu in enumerate(where):
        summary = {"cpu": cpu}
        for key, values in columns.items():
            summary[key] = float(values[i]) if key in FLOAT_KEYS else int(values[i])
        summary["percentiles_from"] = "detours"
        summaries.append(summary)
    thresholds = sorted({s["threshold_ns"] for s in summaries})
    parameters = {"cpus": where, "threshold_ns": thresholds[0] if len(thresholds) == 1 else None}
    return Imported("summary text", "detour", summaries, {}, parameters,
                    details={"preamble": table.preamble} if table.preamble else {})
