"""The manifest: the JSON head of every bundle, typed.

`Manifest` mirrors the top level of the shipped JSON Schema
(schema/manifest.schema.json; tests/unit/test_manifest_types.py holds the two
to each other) and `new_manifest` is the one place a manifest is made: scan,
bench/run, import, predict and the cluster commands all call it, so the head
fields, their order and the schema version cannot drift apart. At run time a
Manifest is a plain dict (what json reads and writes); the types are for the
reader and the type checker. The per-kind contents of `parameters` and
`summaries` stay the schema's business (its `allOf` per kind).
"""

# No `from __future__ import annotations` here: TypedDict finds NotRequired
# keys only in evaluated annotations (before Python 3.12).
import sys
from datetime import datetime, timezone
from typing import Any, TypedDict

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:
    from typing_extensions import NotRequired

from . import __version__

SCHEMA_VERSION = 4


class Tool(TypedDict):
    name: str
    version: str


class WarningEntry(TypedDict):
    """A Diagnostic as the manifest keeps it (Diagnostic.to_dict)."""

    code: str
    message: str
    hint: str


class ImportSource(TypedDict):
    """Where an imported measurement came from (kind 'import')."""

    tool: str
    version: str | None
    command: str | None
    file: str
    sha256: str
    format: str
    details: NotRequired[dict[str, Any]]


class Manifest(TypedDict):
    schema_version: int
    kind: str  # scan, timerlat, bench, import, prediction, fleet, bsp
    tool: Tool
    argv: list[str]
    label: NotRequired[str | None]
    started_utc: str
    finished_utc: NotRequired[str]
    complete: bool  # False: interrupted, or something was left out (see warnings)
    host: NotRequired[dict[str, Any]]  # HostFacts.to_dict()
    clock: NotRequired[dict[str, Any]]  # MeasurementClock.to_dict()
    parameters: dict[str, Any]
    privileges: NotRequired[dict[str, Any]]
    source: NotRequired[ImportSource]
    cluster: NotRequired[dict[str, Any]]
    occupancy: NotRequired[dict[str, Any]]  # bench: SMT sibling occupancy, traced or why not
    summaries: dict[str, Any]
    warnings: list[WarningEntry]
    trace: NotRequired[dict[str, Any]]
    system: NotRequired[list[dict[str, Any]]]  # findings of `noisescope system show`
    tables: dict[str, dict[str, Any]]  # filled in when the bundle is written


def tool_info() -> Tool:
    return {"name": "noisescope", "version": __version__}


def utc_now() -> str:
    """Manifest timestamps: UTC, microseconds, 'Z'."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_manifest(kind: str, *, label: str | None, started_utc: str, complete: bool,
                 parameters: dict[str, Any], summaries: dict[str, Any],
                 warnings: list[WarningEntry], argv: list[str] | None = None,
                 finished_utc: str | None = None, **sections: Any) -> Manifest:
    """A manifest finished now (or at `finished_utc`), its keys in the schema's
    order; `sections` are the optional ones (host, clock, trace, ...), and
    `argv` defaults to this process's command line."""
    unknown = set(sections) - set(Manifest.__optional_keys__)
    if unknown:
        raise TypeError(f"not a manifest section: {', '.join(sorted(unknown))}")
    fields = {"schema_version": SCHEMA_VERSION, "kind": kind, "tool": tool_info(),
              "argv": list(argv if argv is not None else sys.argv), "label": label,
              "started_utc": started_utc, "finished_utc": finished_utc or utc_now(),
              "complete": complete, "parameters": parameters, "summaries": summaries,
              "warnings": warnings, "tables": {}, **sections}
    return Manifest(**{key: fields[key] for key in Manifest.__annotations__ if key in fields})
