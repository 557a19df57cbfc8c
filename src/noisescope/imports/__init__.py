"""Import results of the classic tools into bundles: cyclictest, oslat, sysjitter, rtla.

Each reader turns one output file into an `Imported` result whose per-CPU
summaries use the same keys as noisescope's own probes where the meaning is
the same: cyclictest and rtla timerlat -> "timerlat" (as the timerlat probe),
sysjitter and rtla osnoise hist -> "detour" (interruptions above a threshold,
as the detour probe), oslat -> "oslat" (every loop gap, with the same
min/avg/max/percentile keys), rtla osnoise top -> "osnoise" (noise per CPU
and what interfered).
Malformed or truncated files raise UsageError naming the file and line.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from ..bundle import Bundle, check_destination
from ..errors import UsageError
from ..manifest import ImportSource, new_manifest, utc_now
from .common import Imported, SourceText
from .cyclictest import read_cyclictest
from .oslat import read_oslat
from .rtla import read_rtla
from .sysjitter import read_sysjitter

READERS: dict[str, Callable[[SourceText, tuple[int, ...] | None], Imported]] = {
    "cyclictest": read_cyclictest,
    "oslat": read_oslat,
    "sysjitter": read_sysjitter,
    "rtla": read_rtla,
}
TOOLS = tuple(READERS)


def read_source(tool: str, path: str | os.PathLike[str],
                cpus: tuple[int, ...] | None = None) -> Imported:
    """Parse one output file of `tool`; `cpus` names the CPUs of its threads in
    order where the file does not say (cyclictest's text output)."""
    if tool not in READERS:
        raise UsageError(f"cannot import {tool!r} results", f"choose from {', '.join(TOOLS)}")
    source = SourceText.read(Path(path))
    return READERS[tool](source, cpus)


def import_file(tool: str, path: str | os.PathLike[str], *, label: str | None = None,
                cpus: tuple[int, ...] | None = None, argv: list[str] | None = None,
                destination: str | os.PathLike[str] | None = None) -> Bundle:
    """Read `path` and build (and write, if `destination` is given) an import bundle."""
    if destination is not None:
        check_destination(Path(destination))
    imported = read_source(tool, path, cpus)
    raw = Path(path).read_bytes()
    now = utc_now()
    source: ImportSource = {
        "tool": tool, "version": imported.version, "command": imported.command,
        "file": os.path.basename(path), "sha256": hashlib.sha256(raw).hexdigest(),
        "format": imported.format}
    if imported.details:
        source["details"] = imported.details
    manifest = new_manifest("import", label=label, started_utc=now, finished_utc=now,
                            argv=argv, complete=True, source=source,
                            parameters=imported.parameters,
                            summaries={imported.probe: imported.summaries}, warnings=[])
    bundle = Bundle(manifest, imported.tables)
    if destination is not None:
        bundle.write(destination)
    return bundle


__all__ = ["TOOLS", "Imported", "import_file", "read_source"]
