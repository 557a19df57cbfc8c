"""Work directories of a run, and what a killed run (SIGKILL) leaves of them.

While it works, a run keeps hidden directories beside its output:
`.NAME.partial-PID/` (a bundle being written), `.NAME.samples-PID/` (the
probes' samples, spooled as they are measured), `.NAME.trace-PID/` (copies of
the trace buffers; `noisescope-trace-PID-*` in the temporary directory for a
scan without a bundle) and, inside a fleet directory, `.partial-PID/`. Each
holds a marker (`MARKER`) naming the process that made it: its PID, its
start time, the machine's boot and PID namespace. A directory is a leftover
only when its name and its marker agree and that process is provably gone; a
directory of a live run, or of a run on another machine (a shared file
system) or in another container, is never touched.

What a leftover holds decides what becomes of it (`sweep`):
- a partial bundle whose manifest was written (the manifest comes first)
  holds the measurement: it is salvaged into a bundle marked incomplete
  (`bundle.salvage_partial`, which takes the tables of samples the run had
  already made whole in its samples directory), never deleted. `noisescope
  cleanup` does that; the next run in the same directory only says so
  (salvaging loads pyarrow and writes tables, which a run that is about to
  measure should not do).
- everything else (trace copies, which cannot be read without the run that
  recorded them; samples spooled by a run, of which a salvaged bundle has
  taken what it needs, and which without a manifest nothing describes; a
  partial bundle killed before its manifest existed, which holds nothing
  measured; a fleet summary cut short, whose ranks' bundles hold the
  measurement) is removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MARKER = ".noisescope-run"
TEMPORARY_TRACE_PREFIX = "noisescope-trace-"
_NAMES = (  # (name, what it holds)
    (re.compile(r"^\..+\.partial-(\d+)$"), "partial"),
    (re.compile(r"^\.partial-(\d+)$"), "fleet"),
    (re.compile(r"^\..+\.trace-(\d+)$"), "trace"),
    (re.compile(r"^\..+\.samples-(\d+)$"), "samples"),
    (re.compile(rf"^{TEMPORARY_TRACE_PREFIX}(\d+)-\w+$"), "trace"),
)
_WHAT = {"partial": "the start of a bundle, with nothing measured in it yet",
         "fleet": "the start of a fleet summary (its ranks' bundles hold the measurement)",
         "trace": "copies of trace buffers, which nothing reads without the run",
         "samples": "samples spooled by the run (what a salvaged bundle needs of them "
                    "it has taken)"}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """When `pid` started (clock ticks after boot), None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split()[19])


def process_alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, killed but not yet
    reaped by its parent, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


def samples_workdir(destination: Path, pid: int) -> Path:
    """Where the scan (process `pid`) that writes `destination` spools its samples
    while it measures (a salvaged bundle takes the tables it finds whole there)."""
    return destination.parent / f".{destination.name}.samples-{pid}"


def make_workdir(path: Path) -> Path:
    """Create a work directory of this process, with its marker."""
    path.mkdir()
    return mark_workdir(path)


def mark_workdir(path: Path) -> Path:
    """Mark a new directory as this process's work directory."""
    (path / MARKER).write_text(json.dumps(identity()) + "\n")
    return path


def identity() -> dict:
    """What tells this process apart from any other, on any machine, boot and
    PID namespace (a container's PIDs are not those of the host)."""
    pid = os.getpid()
    return {"pid": pid, "start": process_start(pid), "boot_id": _boot_id(),
            "pid_namespace": _pid_namespace(), "host": socket.gethostname()}


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@dataclass(frozen=True)
class Leftover:
    path: Path
    kind: str  # a key of _WHAT
    pid: int


def _named(name: str) -> tuple[str, int] | None:
    """(what it holds, PID) if `name` is the name of a work directory."""
    for pattern, kind in _NAMES:
        match = pattern.match(name)
        if match:
            return kind, int(match.group(1))
    return None


def owner_gone(marker: dict) -> bool | None:
    """True if the process that wrote `marker` (identity()) is gone, False if it
    runs, None if this process cannot tell (another machine or PID namespace)."""
    pid = marker.get("pid")
    if not isinstance(pid, int):
        return None
    if marker.get("boot_id") and marker.get("boot_id") == _boot_id():
        if marker.get("pid_namespace") != _pid_namespace():
            return None  # another container's PID means nothing here
        return not (process_alive(pid) and process_start(pid) == marker.get("start"))
    if marker.get("host") == socket.gethostname():
        return True  # this machine, an earlier boot
    return None


def find(directory: Path) -> tuple[list[Leftover], list[str]]:
    """The leftovers of gone processes in `directory`, and notes on work
    directories left alone because it cannot be told whether their process runs."""
    found, unsure = [], []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return [], []
    for entry in entries:
        named = _named(entry.name)
        if named is None or not entry.is_dir(follow_symlinks=False):
            continue
        kind, pid = named
        try:
            marker = json.loads((Path(entry.path) / MARKER).read_text())
        except (OSError, ValueError):
            continue  # not provably ours
        if not isinstance(marker, dict) or marker.get("pid") != pid:
            continue
        gone = owner_gone(marker)
        if gone is None:
            unsure.append(f"left {entry.path}: its process ({pid} on {marker.get('host')}) "
                          f"cannot be checked from here (another machine or container)")
        elif gone:
            found.append(Leftover(Path(entry.path), kind, pid))
    return found, unsure


def sweep(directory: Path, *, salvage: bool, reserved: Path | None = None,
          say: Callable[[str], None]) -> bool:
    """Deal with the leftovers in `directory` (see the module docstring);
    `say` gets one line per leftover. With `salvage` False (a run about to
    measure), partial bundles are only reported. `reserved` is a name not to
    salvage into (the output of the run that sweeps). Returns False if
    something could not be dealt with."""
    from .bundle import MANIFEST, salvage_partial

    found, unsure = find(directory)
    if salvage:
        for note in unsure:
            say(note)
    ok = True
    for leftover in found:
        holds_measurement = leftover.kind == "partial" and (leftover.path / MANIFEST).is_file()
        try:
            if holds_measurement and salvage:
                target, missing = salvage_partial(leftover.path, reserved)
                say(f"salvaged {leftover.path} (a bundle killed run {leftover.pid} was writing) "
                    f"as {target}, marked incomplete"
                    + (f"; tables it had not written: {', '.join(missing)}" if missing else ""))
            elif holds_measurement:
                say(f"{leftover.path} holds the measurement of killed run {leftover.pid}: "
                    f"'noisescope cleanup {directory}' makes it a bundle")
            else:
                shutil.rmtree(leftover.path)
                say(f"removed {leftover.path}: {_WHAT[leftover.kind]}, left by killed run "
                    f"{leftover.pid}")
        except (OSError, ValueError, KeyError) as error:  # KeyError, ValueError: an odd manifest
            ok = False
            say(f"could not clean up {leftover.path}: {getattr(error, 'strerror', None) or error}")
    return ok

