"""Checks of a bundle read from disk, before anything uses it.

The manifest is validated against the JSON Schema that ships with the package
(schema/manifest.schema.json, the one definition of its fields); each table
must be a Parquet file inside the bundle whose footer holds the rows and
columns the manifest declares, with the types its readers expect
(TABLE_COLUMNS). A damaged bundle is a UsageError naming the file and the
problem, never a traceback later in `show`, `compare`, `report` or `explain`.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

from .errors import UsageError
from .tables import parquet_parts

DAMAGED = "the bundle is damaged; re-run the measurement"
MESSAGE_LIMIT = 200  # characters of a schema error quoted in the one-line error

INT, FLOAT, STR, BOOL = "int", "float", "str", "bool"
_EVENT_SPANS = {"cpu": INT, "start_ns": INT, "duration_ns": INT}
_CAUSES = {**_EVENT_SPANS, "cause": STR, "detail": STR}
_EXPLAINED = {**_EVENT_SPANS, "cause": STR + "?", "cause_detail": STR + "?",
              "trace_events": INT + "?"}
_HISTOGRAM = {"cpu": INT, "lower_ns": INT, "upper_ns": INT, "count": INT}
# The columns each table's readers rely on, by type; '?' marks a column that
# only some writers add (bsp's detours have no causes), '*' a family of columns.
# Other columns are allowed (a newer writer's additions).
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "detours": {**_EXPLAINED, "rank": INT + "?"},
    "late_wakeups": _EXPLAINED,
    "detour_causes": _CAUSES,
    "late_wakeup_causes": _CAUSES,
    "events": {"cpu": INT, "timestamp_ns": INT, "event": STR, "pid": INT, "number": INT,
               "name": STR},
    "sched_switch": {"cpu": INT, "timestamp_ns": INT, "prev_comm": STR, "prev_pid": INT,
                     "prev_prio": INT, "prev_state": STR, "next_comm": STR, "next_pid": INT,
                     "next_prio": INT},
    "ftq": {"cpu": INT, "start_ns": INT, "work": INT},
    "fwq": _EVENT_SPANS,
    "gap_histogram": {"cpu": INT, "lower_ticks": INT, "upper_ticks": INT, "lower_ns": INT,
                      "upper_ns": INT, "count": INT},
    "injections": {"cpu": INT, "mode": STR, "start_ns": INT, "duration_ns": INT},
    "iterations": {"rank": INT, "part": STR, "iteration": INT, "work_ns": INT,
                   "collective_ns": INT, "iteration_ns": INT},
    "occupancy": {name: INT for name in ("order", "cpu", "sibling", "traced_ns", "tasks",
                                         "workload_ns", "same_ns", "idle_ns", "foreign_ns",
                                         "unknown_ns")},
    "runs": {"order": INT, "workload": STR, "configuration": STR, "warmup": BOOL,
             "repetition": INT, "status": STR, "reason": STR + "?", "wall_ns": INT,
             "user_ns": INT, "sys_ns": INT, "exit_code": INT + "?", "signal": INT + "?",
             "maxrss_kib": INT + "?", "system_context_switches_per_s": FLOAT + "?",
             "system_interrupts_per_s": FLOAT + "?", "injected_ns": INT + "?",
             "metric_*": FLOAT, "sibling_*": FLOAT},
    "spectrum": {"cpu": INT, "series": STR, "frequency_hz": FLOAT, "power": FLOAT},
    "timerlat": {"cpu": INT, "wakeup_ns": INT, "latency_ns": INT},
    "timerlat_histogram": {**_HISTOGRAM, "thread": INT + "?"},
    "oslat_histogram": _HISTOGRAM,
    "osnoise_histogram": _HISTOGRAM,
    "timerlat_irq_histogram": _HISTOGRAM,
    "trace_coverage": {"cpu": INT, "start_ns": INT, "end_ns": INT, "lost_events": INT,
                       "probe": STR},
    # a fleet's rows (bundle.SUMMARY_TABLE, FINDINGS_TABLE)
    "summary_ranks": {"rank": INT, "node": STR, "status": STR, "reason": STR + "?",
                      "bundle": STR + "?"},
    **{f"summary_{probe}": {"rank": INT, "node": STR, "cpu": INT} for probe in
       ("detour", "ftq", "fwq", "timerlat")},
    "system_findings": {"rank": INT, "node": STR, "check": STR, "state": STR, "message": STR,
                        "advice": STR + "?"},
    "windows": {"cpu": INT, "probe": STR, "start_ns": INT, "end_ns": INT, "rank": INT + "?",
                "window": INT + "?"},
    # tune --measure: each round's lost time per cause and detour lengths, per target CPU
    "round_causes": {"round": INT, "trial": STR, "phase": STR, "pair": INT, "cpu": INT,
                     "cause": STR, "lost_ns": INT, "count": INT},
    "round_histogram": {**_HISTOGRAM, "round": INT, "trial": STR, "phase": STR, "pair": INT},
}


@functools.cache
def _schema() -> dict:
    return json.loads(resources.files("noisescope").joinpath(
        "schema/manifest.schema.json").read_text())


@functools.cache
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(_schema())


@functools.cache
def _quick_validator():
    """jsonschema-rs (compiled): 70 times less time than jsonschema for the
    manifest of a 256-CPU scan (0.07 against 4.9 s), whose per-CPU summaries
    are megabytes. It only says whether the manifest is valid; the message of
    an invalid one comes from jsonschema, as always."""
    import jsonschema_rs

    return jsonschema_rs.validator_for(_schema())


def check_manifest(manifest: dict, path: Path) -> None:
    """Raise a UsageError naming the first (most relevant) way `manifest`
    departs from the schema."""
    if _quick_validator().is_valid(manifest):
        return
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator().iter_errors(manifest))
    if error is not None:
        message = error.message if len(error.message) <= MESSAGE_LIMIT \
            else error.message[:MESSAGE_LIMIT] + "..."
        raise UsageError(f"{path} is corrupt ({error.json_path}: {message})", DAMAGED)


def table_path(root: Path, name: str, entry: dict) -> Path:
    """The file of table `name`: a regular file inside the bundle directory,
    or a directory of Parquet parts (`tables.parquet_parts`)."""
    path = root / entry["file"]
    if not path.resolve().is_relative_to(root.resolve()):
        raise UsageError(f"{path}: table {name} lies outside the bundle", DAMAGED)
    if not (path.is_file() or path.is_dir()):
        what = "is missing" if not path.exists() else "is not a file"
        raise UsageError(f"{path}: table {name} {what}", DAMAGED)
    if path.is_dir():
        parts = parquet_parts(path)
        if not parts:
            raise UsageError(f"{path}: table {name} is a directory without Parquet parts", DAMAGED)
        for part in parts:
            if not part.resolve().is_relative_to(root.resolve()) or not part.is_file():
                raise UsageError(f"{part}: a part of table {name} is not a file inside the "
                                 f"bundle", DAMAGED)
    return path


def _columns(schema) -> list[tuple[str, object]]:
    return [(field.name, field.type) for field in schema]


def check_table(path: Path, name: str, entry: dict) -> None:
    """Read `path`'s Parquet footer: the rows and columns the manifest declares,
    of the types TABLE_COLUMNS expects."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, schema = 0, None
    for part in parquet_parts(path):
        try:
            metadata = pq.read_metadata(part)
            found = metadata.schema.to_arrow_schema()
        except (OSError, pa.ArrowException) as error:
            raise UsageError(f"table {part} is unreadable (not Parquet: {_first_line(error)})",
                             DAMAGED) from None
        if schema is not None and _columns(found) != _columns(schema):
            raise UsageError(f"{part}: this part of table {name} has other columns than the "
                             f"first", DAMAGED)
        rows, schema = rows + metadata.num_rows, found
    columns = {field.name: field.type for field in schema}
    if sorted(columns) != sorted(entry["columns"]) or rows != entry["rows"]:
        raise UsageError(f"{path}: table {name} holds {rows} rows of columns "
                         f"{', '.join(columns) or '(none)'}, the manifest says {entry['rows']} rows "
                         f"of {', '.join(entry['columns']) or '(none)'}", DAMAGED)
    if not columns and not rows:
        return  # an empty table written without columns (a scan without injections)
    for column, expected in TABLE_COLUMNS.get(name, {}).items():
        optional = expected.endswith("?") or column.endswith("*")
        kind = expected.rstrip("?")
        present = [c for c in columns if c.startswith(column[:-1])] if column.endswith("*") \
            else [column] if column in columns else []
        if not present and not optional:
            raise UsageError(f"{path}: table {name} has no column {column}", DAMAGED)
        for found in present:
            if not _is(kind, columns[found]):
                raise UsageError(f"{path}: column {found} of table {name} holds {columns[found]}, "
                                 f"not {kind}", DAMAGED)


def _is(kind: str, arrow_type) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_null(arrow_type):  # every value missing
        return True
    return {
        INT: pa.types.is_integer,
        FLOAT: lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
        STR: lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
        BOOL: pa.types.is_boolean,
    }[kind](arrow_type)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
