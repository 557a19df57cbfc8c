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

A task's CPU affinity is journalled the same way (`change_affinity`), with
the task's start time: a restore after the run died puts it back only on
that task, never on a later one that got its id. A directory the run creates
(a cgroup) is journalled before it is made and removed by the restore
(`create_directory`). A setting that lasts only while a file stays open
(/dev/cpu_dma_latency) is held by the journal in memory (`hold`) and let go
by the restore: the kernel drops it when the process dies, so it needs
nothing on disk.

Changes a user asked to keep (`noisescope tune --apply`) are handed over with
`keep()`: the journal becomes kept-PURPOSE-PID.json, which `restore_leftovers`
leaves alone; `restore_kept()` (`noisescope tune --restore`) puts them back.
"""

from __future__ import annotations

import errno
import json
import os
import re
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path

from .leftovers import identity, owner_gone, process_start
from .units import format_cpu_list, parse_cpu_list

JOURNAL_DIR = Path(os.environ.get("NOISESCOPE_JOURNAL_DIR", "/run/noisescope"))
# What a Change changes: a knob's file, a task's affinity, a directory it creates.
FILE, AFFINITY, DIRECTORY = "file", "affinity", "directory"
CREATED, ABSENT = "created", "absent"  # a DIRECTORY change's value and restore
_JOURNAL_NAME = re.compile(r"^journal-(?P<purpose>[a-z0-9_-]+)-(?P<pid>\d+)\.json$")
_KEPT_NAME = re.compile(r"^kept-(?P<purpose>[a-z0-9_-]+)-(?P<pid>\d+)\.json$")


@dataclass(frozen=True)
class Change:
    path: str  # the knob's file; for an affinity, /proc/TID of the task
    value: str  # what was written (an affinity: a CPU list)
    restore: str  # what puts the original back
    kind: str = FILE
    start: int | None = None  # an affinity's task: when it started (leftovers.process_start)

    @property
    def what(self) -> str:
        """How messages name it."""
        if self.kind == AFFINITY:
            return f"CPU affinity of task {self.tid}"
        return f"directory {self.path}" if self.kind == DIRECTORY else self.path

    @property
    def tid(self) -> int:
        return int(self.path.rpartition("/")[2])

    def write(self, value: str) -> None:
        """Set the knob (or the task's affinity) to `value`; OSError if it cannot be."""
        if self.kind == AFFINITY:
            os.sched_setaffinity(self.tid, parse_cpu_list(value))
        elif self.kind == DIRECTORY and value == CREATED:
            os.mkdir(self.path, 0o755)
        elif self.kind == DIRECTORY:
            _remove_directory(self.path)
        else:
            write_knob(self.path, value)

    def put_back(self) -> bool:
        """Write the original back; False (nothing done) for a task that has ended
        (or whose id a later task holds): there is nothing left to restore."""
        if self.kind == AFFINITY and process_start(self.tid) != self.start:
            return False
        self.write(self.restore)
        return True


def _remove_directory(path: str) -> None:
    """rmdir, also of a cgroup (whose files are not in the way); gone already is done."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass


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
        self.held: dict[str, ExitStack] = {}  # name -> what lets it go (hold)
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
        self._make(Change(path, value, read_knob(path) if restore is None else restore))

    def change_affinity(self, tid: int, cpus: tuple[int, ...]) -> None:
        """Set the CPU affinity of task (thread) `tid` to `cpus`, journalled like a
        knob. Raises OSError when the task is gone or refuses (a per-CPU kernel
        thread: EINVAL), and nothing is journalled then."""
        start = process_start(tid)
        try:
            original = os.sched_getaffinity(tid)
        except OSError:
            start = None
        if start is None:
            raise ProcessLookupError(errno.ESRCH, f"no task {tid}")
        self._make(Change(f"/proc/{tid}", format_cpu_list(cpus), format_cpu_list(original),
                          AFFINITY, start))

    def keep_affinities(self, tids: list[int]) -> list[str]:
        """Journal the CPU affinity of each task in `tids` as it is, without changing
        it, so that the restore puts it back after something else rewrote it (a
        cpuset partition rewrites those of every task in its parent); their paths
        (/proc/TID). Tasks gone meanwhile are left out; one write of the journal
        for them all."""
        known = {c.path for c in self.changes}
        kept = []
        for tid in tids:
            start = process_start(tid)
            try:
                now = format_cpu_list(os.sched_getaffinity(tid))
            except OSError:
                continue
            if start is not None and f"/proc/{tid}" not in known:
                self.changes.append(Change(f"/proc/{tid}", now, now, AFFINITY, start))
                kept.append(f"/proc/{tid}")
        self._save()
        return kept

    def create_directory(self, path: str | os.PathLike[str]) -> None:
        """Make the directory `path` (a cgroup), journalled first; the restore
        removes it. OSError if it cannot be made (it exists already: someone
        else's), and nothing is journalled then."""
        self._make(Change(str(path), CREATED, ABSENT, DIRECTORY))

    def hold(self, name: str, resource: AbstractContextManager) -> object:
        """Enter `resource` and keep it until the restore (or `revert(name)`);
        what it gives. For what lasts while its file is open and dies with the
        process, so it is not written to the journal on disk."""
        stack = ExitStack()
        value = stack.enter_context(resource)
        self.held[name] = stack
        return value

    def revert(self, *paths: str | os.PathLike[str]) -> None:
        """Put changes (or held resources) back now, in the order given, and forget
        them; one write of the journal for them all (OSError, and what is left
        stays journalled, if one fails)."""
        try:
            for path in map(str, paths):
                if path in self.held:
                    self.held.pop(path).close()
                    continue
                change = next(c for c in self.changes if c.path == path)
                change.put_back()
                self.changes.remove(change)
        finally:
            self._save()

    def _make(self, change: Change) -> None:
        known = any(c.path == change.path for c in self.changes)
        if not known:
            self.changes.append(change)
            try:
                self._save()
            except OSError:  # the journal cannot be written (not root): nothing changes
                self.changes.pop()
                raise
        try:
            change.write(change.value)
        except OSError:
            if not known:
                self.changes.pop()
                self._save()
            raise

    def restore(self) -> list[str]:
        """Let go of what it holds, then put every knob back (latest first); returns
        what could not be restored."""
        while self.held:
            self.held.popitem()[1].close()
        failed, _ = _restore(self.changes)
        self.changes = [c for c in self.changes if any(f.startswith(f"{c.what}:") for f in failed)]
        self._save()
        return failed

    def keep(self) -> Path | None:
        """Hand every change over to a later `restore_kept()`: the journal is renamed
        kept-PURPOSE-PID.json (never restored merely because this process is gone)
        and this journal forgets it. Returns the kept journal (None: nothing changed)."""
        if not self.changes:
            return None
        kept = self.directory / ("kept-" + self.path.name.removeprefix("journal-"))
        os.replace(self.path, kept)
        self.changes, self._on_disk = [], False
        return kept

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


def _restore(changes: list[Change]) -> tuple[list[str], list[Change]]:
    """Put `changes` back, latest first: (failures, the changes of tasks that ended)."""
    failed, ended = [], []
    for change in reversed(changes):
        try:
            if not change.put_back():
                ended.append(change)
        except OSError as error:
            failed.append(f"{change.what}: {error.strerror or error}")
    return failed, ended


def restore_leftovers(directory: Path | None = None) -> tuple[list[str], list[str]]:
    """Restore the knobs of runs that died without doing it themselves (their
    journal's owner is provably gone: leftovers.owner_gone); (restored 'path =
    value' lines, failures)."""
    # another machine's, or a run still going, is not ours to undo
    return _restore_journals(directory, _JOURNAL_NAME,
                             lambda saved: owner_gone(saved.get("owner") or {}) is True)


def restore_kept(directory: Path | None = None) -> tuple[list[str], list[str]]:
    """Put back the changes kept on purpose (KnobJournal.keep: `tune --apply`);
    (restored 'path = value' lines, failures)."""
    return _restore_journals(directory, _KEPT_NAME, lambda saved: True)


def kept_journals(directory: Path | None = None) -> list[Path]:
    """The journals of kept changes not restored yet."""
    folder = directory or JOURNAL_DIR
    try:
        return [folder / n for n in sorted(os.listdir(folder)) if _KEPT_NAME.match(n)]
    except OSError:
        return []


def _restore_journals(directory: Path | None, names: re.Pattern,
                      wanted) -> tuple[list[str], list[str]]:
    """Restore the journals in `directory` whose names match `names` and whose
    content `wanted` accepts; a journal fully restored is removed."""
    folder = directory or JOURNAL_DIR
    restored: list[str] = []
    failed: list[str] = []
    try:
        found = sorted(os.listdir(folder))
    except OSError:
        return restored, failed
    for name in found:
        if not names.match(name):
            continue
        journal = folder / name
        try:
            saved = json.loads(journal.read_text())
            changes = [Change(**entry) for entry in saved["changes"]]
        except (OSError, ValueError, TypeError, KeyError) as error:
            failed.append(f"{journal}: unreadable journal ({error})")
            continue
        if not wanted(saved):
            continue
        problems, ended = _restore(changes)
        failed += problems
        restored += [f"{c.what} = {c.restore}" for c in changes if c not in ended
                     and not any(p.startswith(f"{c.what}:") for p in problems)]
        if not problems:
            journal.unlink(missing_ok=True)
    return restored, failed
