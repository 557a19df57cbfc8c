"""Machine settings noisescope changes, and the journal that puts them back.

Every knob (a file under /sys, /proc or tracefs) is written through a
`KnobJournal`: the value that restores it is saved to a journal file on disk
*before* the knob is changed, so a run that dies (even by SIGKILL) leaves
enough behind for the next run or `noisescope cleanup` to restore it.
`restore()` writes the saved values back in reverse order and removes the
journal; callers do that in `finally` (the CLI turns SIGTERM into
KeyboardInterrupt). Journals live in a tmpfs (/run): a reboot resets the
knobs and forgets the journals alike.

    with KnobJournal("smt") as journal:
        journal.change("/sys/devices/system/cpu/smt/control", "off")
        ...measure...
    # restored here, also on errors and Ctrl-C
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .leftovers import identity, owner_gone

JOURNAL_DIR = Path(os.environ.get("NOISESCOPE_JOURNAL_DIR", "/run/noisescope"))
_JOURNAL_NAME = re.compile(r"^journal-(?P<purpose>[a-z0-9_-]+)-(?P<pid>\d+)\.json$")


@dataclass(frozen=True)
class Change:
    path: str
    value: str  # what was written
    restore: str  # what puts the original back


def write_knob(path: str | os.PathLike[str], value: str) -> None:
    """One write() of the whole value, as sysfs, procfs and tracefs expect."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def read_knob(path: str | os.PathLike[str]) -> str:
    return Path(path).read_text().strip()


class KnobJournal:
    """The knobs one run changed, journalled under JOURNAL_DIR."""

    def __init__(self, purpose: str, directory: Path | None = None):
        self.directory = directory or JOURNAL_DIR
        self.path = self.directory / f"journal-{purpose}-{os.getpid()}.json"
        self.changes: list[Change] = []
        self._on_disk = False  # a run that changed nothing never touches the directory

    def __enter__(self) -> KnobJournal:
        return self

    def __exit__(self, *exc) -> None:
        self.restore()

    def change(self, path: str | os.PathLike[str], value: str, restore: str | None = None) -> None:
        """Write `value` to the knob at `path`; `restore` is what puts it back
        (default: its current content). The first change of a path keeps its
        original restore value. Raises OSError when the knob cannot be written
        (nothing is journalled then)."""
        path = str(path)
        original = read_knob(path) if restore is None else restore
        change = Change(path, value, original)
        known = any(c.path == path for c in self.changes)
        if not known:
            self.changes.append(change)
            self._save()
        try:
            write_knob(path, value)
        except OSError:
            if not known:
                self.changes.pop()
                self._save()
            raise

    def restore(self) -> list[str]:
        """Put every knob back (latest first); returns what could not be restored."""
        failed = _restore(self.changes)
        self.changes = [c for c in self.changes if any(f.startswith(c.path) for f in failed)]
        self._save()
        return failed

    def _save(self) -> None:
        if not self.changes:
            if self._on_disk:
                self.path.unlink(missing_ok=True)
                self._on_disk = False
            return
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = self.path.with_suffix(".new")
        partial.write_text(json.dumps({"owner": identity(),
                                       "changes": [c.__dict__ for c in self.changes]}))
        os.replace(partial, self.path)
        self._on_disk = True


def _restore(changes: list[Change]) -> list[str]:
    failed = []
    for change in reversed(changes):
        try:
            write_knob(change.path, change.restore)
        except OSError as error:
            failed.append(f"{change.path}: {error.strerror or error}")
    return failed


def restore_leftovers(directory: Path | None = None) -> tuple[list[str], list[str]]:
    """Restore the knobs of runs that died without doing it themselves (their
    journal's owner is provably gone: leftovers.owner_gone); (restored 'path =
    value' lines, failures)."""
    folder = directory or JOURNAL_DIR
    restored: list[str] = []
    failed: list[str] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return restored, failed
    for name in names:
        if not _JOURNAL_NAME.match(name):
            continue
        journal = folder / name
        try:
            saved = json.loads(journal.read_text())
            changes = [Change(**entry) for entry in saved["changes"]]
        except (OSError, ValueError, TypeError, KeyError) as error:
            failed.append(f"{journal}: unreadable journal ({error})")
            continue
        if owner_gone(saved.get("owner") or {}) is not True:
            continue  # its run is still going (or it is another machine's: not ours to undo)
        problems = _restore(changes)
        failed += problems
        restored += [f"{c.path} = {c.restore}" for c in changes
                     if not any(p.startswith(c.path) for p in problems)]
        if not problems:
            journal.unlink(missing_ok=True)
    return restored, failed
