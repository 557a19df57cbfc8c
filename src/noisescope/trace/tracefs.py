"""tracefs: find or mount it, and own one private instance at a time.

noisescope never touches the global trace buffer. It records into
`instances/noisescope-<pid>`, whose settings (clock, buffer size, CPU mask,
events) live and die with the instance. tracefs is mounted only when no
mount exists, and unmounted again only by the run that mounted it (and only
when no other instance is left in it, which another tool may be using).

A run killed with SIGKILL leaves its instance behind; the next run (or
`noisescope cleanup`) removes instances named noisescope-<pid> whose process
is gone. Instances of other tools are never touched. A run that mounts
tracefs records it (`MOUNT_RECORDS`), and keeps the record while the mount
stays (another run's instance in it, or a SIGKILL): the next run, or
`noisescope cleanup`, takes over a record whose process is gone and
unmounts tracefs when nobody uses it. A mount without such a record (the
system's) is never unmounted.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..host import mount_points
from ..leftovers import identity, owner_gone, process_alive

DEFAULT_MOUNTPOINT = Path("/sys/kernel/tracing")
MOUNT_RECORDS = Path("/run/noisescope")  # tracefs-PID.json: where process PID mounted tracefs
INSTANCE_PREFIX = "noisescope-"
_OUR_INSTANCE = re.compile(rf"^{INSTANCE_PREFIX}(\d+)$")
# rmdir of an instance fails with EBUSY while a reader still has one of its
# files open; such readers finish quickly.
REMOVE_ATTEMPTS = 20
REMOVE_PAUSE_S = 0.05


class TracingUnavailable(Exception):
    """Tracing cannot be used here; str() says why in one line."""


def tracefs_mounts(mounts_text: str) -> list[Path]:
    """Mount points of tracefs listed in /proc/self/mounts text."""
    return mount_points(mounts_text, "tracefs")


def _read_mounts() -> str:
    try:
        return Path("/proc/self/mounts").read_text()
    except OSError:
        return ""


@dataclass
class Mount:
    path: Path
    mounted_by_us: bool  # mounted by this run, or taken over from a run that is gone
    taken_over_from: int | None = None  # that run's PID


def find_or_mount(mountpoint: Path = DEFAULT_MOUNTPOINT) -> Mount:
    """Use an existing tracefs mount (preferring `mountpoint`), else mount one there."""
    mounts = tracefs_mounts(_read_mounts())
    if mountpoint in mounts or (mounts and mountpoint == DEFAULT_MOUNTPOINT):
        path = mountpoint if mountpoint in mounts else mounts[0]
        gone = _take_over_record(path, mounts)
        return Mount(path, gone is not None, gone)
    if not mountpoint.is_dir():
        raise TracingUnavailable(f"this kernel has no tracefs ({mountpoint} does not exist)")
    done = subprocess.run(["mount", "-t", "tracefs", "nodev", str(mountpoint)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
        raise TracingUnavailable(f"tracefs is not mounted and mounting it failed ({reason})")
    _write_record(mountpoint)
    return Mount(mountpoint, True)


def release_mount(mount: Mount) -> str | None:
    """Unmount tracefs if this run mounted it (or took it over) and nobody else
    has an instance in it. Returns why it stayed mounted, or None."""
    if not mount.mounted_by_us:
        return None
    try:
        others = os.listdir(mount.path / "instances")
    except OSError:
        others = []
    if others:
        return f"left mounted: instances {', '.join(sorted(others))} are in use"
    done = subprocess.run(["umount", str(mount.path)], capture_output=True, text=True)
    if done.returncode != 0:
        return f"left mounted: umount failed ({done.stderr.strip()})"
    _record_path(os.getpid()).unlink(missing_ok=True)
    return None


def _record_path(pid: int) -> Path:
    return MOUNT_RECORDS / f"tracefs-{pid}.json"


def _write_record(mountpoint: Path) -> None:
    """Note that this process mounted tracefs at `mountpoint` (best effort: without
    the note a mount left behind is only never unmounted)."""
    try:
        MOUNT_RECORDS.mkdir(mode=0o700, exist_ok=True)
        temporary = _record_path(os.getpid()).with_suffix(".tmp")
        temporary.write_text(json.dumps({**identity(), "mountpoint": str(mountpoint)}) + "\n")
        temporary.rename(_record_path(os.getpid()))
    except OSError:
        pass


def _take_over_record(mountpoint: Path, mounts: list[Path]) -> int | None:
    """If a noisescope run that is gone mounted tracefs at `mountpoint`, make its
    record this run's; returns that run's PID. Records of gone runs whose mount
    is gone too (unmounted by hand) are dropped on the way."""
    try:
        records = sorted(MOUNT_RECORDS.glob("tracefs-*.json"))
    except OSError:
        return None
    taken_from = None
    for record in records:
        try:
            noted = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(noted, dict) or noted.get("pid") == os.getpid() or not owner_gone(noted):
            continue
        if Path(str(noted.get("mountpoint"))) not in mounts:
            record.unlink(missing_ok=True)
        elif noted.get("mountpoint") == str(mountpoint) and taken_from is None:
            _write_record(mountpoint)
            record.unlink(missing_ok=True)
            taken_from = noted["pid"]
    return taken_from


def leftover_instances(tracefs: Path) -> list[str]:
    """Names of noisescope instances whose process no longer exists."""
    try:
        names = os.listdir(tracefs / "instances")
    except FileNotFoundError:  # a kernel without instances
        return []
    stale = []
    for name in sorted(names):
        match = _OUR_INSTANCE.match(name)
        if match and int(match.group(1)) != os.getpid() and not process_alive(int(match.group(1))):
            stale.append(name)
    return stale


def remove_leftovers(tracefs: Path) -> tuple[list[str], list[str]]:
    """Remove stale noisescope instances: (removed names, 'name: reason' failures)."""
    removed, failed = [], []
    for name in leftover_instances(tracefs):
        try:
            Instance(tracefs, name).remove()
            removed.append(name)
        except OSError as error:
            failed.append(f"{name}: {error.strerror or error}")
    return removed, failed


class Instance:
    """One tracefs instance directory; paths are relative to it."""

    def __init__(self, tracefs: Path, name: str):
        self.tracefs = tracefs
        self.name = name
        self.path = tracefs / "instances" / name

    @classmethod
    def create(cls, tracefs: Path, name: str) -> Instance:
        instance = cls(tracefs, name)
        try:
            instance.path.mkdir()
        except FileExistsError:
            raise TracingUnavailable(f"tracefs instance {name} already exists") from None
        except PermissionError:
            raise TracingUnavailable("creating a tracefs instance was denied (needs root)") from None
        except OSError as error:
            raise TracingUnavailable(f"creating a tracefs instance failed ({error.strerror})") from None
        # A new instance starts with tracing on; nothing is enabled yet, but
        # switch it off before configuring anything.
        instance.write("tracing_on", "0")
        return instance

    def file(self, relative: str) -> Path:
        return self.path / relative

    def exists(self, relative: str) -> bool:
        return self.file(relative).exists()

    def read(self, relative: str) -> str:
        return self.file(relative).read_text()

    def write(self, relative: str, value: str) -> None:
        # One write() per value: tracefs parses each write on its own.
        fd = os.open(self.file(relative), os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def remove(self) -> None:
        """Stop recording and delete the instance (its buffers and settings go with it)."""
        if not self.path.exists():
            return
        for relative, value in (("tracing_on", "0"), ("current_tracer", "nop")):
            try:
                self.write(relative, value)
            except OSError:
                pass
        for attempt in range(REMOVE_ATTEMPTS):
            try:
                self.path.rmdir()
                return
            except OSError as error:
                if error.errno != errno.EBUSY or attempt == REMOVE_ATTEMPTS - 1:
                    raise
                time.sleep(REMOVE_PAUSE_S)


def instance_name(pid: int | None = None) -> str:
    return f"{INSTANCE_PREFIX}{os.getpid() if pid is None else pid}"


def cleanup(mountpoint: Path = DEFAULT_MOUNTPOINT) -> tuple[list[str], list[str]]:
    """Remove what killed noisescope runs left in tracefs: their instances, and
    the mount of one that mounted it. Returns (what was done, what failed),
    one line each.

    Instances outlive an unmount, so tracefs is mounted for this if needed
    (and unmounted again)."""
    mount = find_or_mount(mountpoint)
    try:
        removed, failed = remove_leftovers(mount.path)
    finally:
        stays = release_mount(mount)
    done = [f"removed tracefs instance {name} (its process is gone)" for name in removed]
    failed = [f"could not remove tracefs instance {failure}" for failure in failed]
    if mount.taken_over_from is not None:
        if stays is None:
            done.append(f"unmounted tracefs at {mount.path} (mounted by noisescope process "
                        f"{mount.taken_over_from}, which is gone)")
        else:
            failed.append(f"tracefs at {mount.path} (mounted by noisescope process "
                          f"{mount.taken_over_from}, which is gone) {stays}")
    return done, failed
