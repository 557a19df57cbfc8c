"""Helpers for tests that measure on a shared, noisy machine."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from noisescope.privileges import can_use_fifo

T = TypeVar("T")

# Measure at SCHED_FIFO where permitted (root in CI): other processes on a
# shared machine then cannot take a sampler's CPU inside a window, only in the
# gaps between windows, which are not measured.
RT = can_use_fifo(95)

ATTEMPTS = 4
BUSY_FRACTION = 0.02


def run_delay_fraction(bundle) -> float:
    """Largest share of measured time any sampler spent waiting for its CPU."""
    worst = 0.0
    for rows in bundle.summaries.values():
        for s in rows:
            if s.get("measured_ns"):
                worst = max(worst, s["run_delay_ns"] / s["measured_ns"])
    return worst


def host_fraction(bundle) -> float:
    """Share of the detour probe's measured time that its trace explains by
    nothing the guest did (the hypervisor's doing, on a VM); 0 untraced."""
    if not bundle.has_table("detour_causes"):
        return 0.0
    causes = bundle.detour_causes.where(cause="unexplained")
    measured = sum(s["measured_ns"] for s in bundle.summaries.get("detour", []))
    return int(causes.duration_ns.sum()) / measured if measured else 0.0


def measure_quietly(measure: Callable[[], T], good: Callable[[T], bool],
                    busy: Callable[[T], float], busy_fraction: float = BUSY_FRACTION) -> T:
    """Run `measure` until `good` holds, retrying (a bounded number of times)
    only when another task, or the host, took the sampler's CPU during the
    attempt (`busy` at least `busy_fraction`)."""
    result = measure()
    for _ in range(ATTEMPTS - 1):
        if good(result) or busy(result) < busy_fraction:
            break
        result = measure()
    return result


def interrupted_run(command: list[str], after_s: float, sig: int = 2, *,
                    sampler: str | None = None):
    """Start `command`, send it `sig` (SIGINT by default) after `after_s`
    seconds and wait for it: the way a user stops a measurement. With
    `sampler` (a native thread's name, e.g. "ns-detour/"), the seconds count
    from when such a thread runs: on a loaded machine the set-up before can
    take seconds of its own."""
    import subprocess
    import time

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while sampler and not thread_names(proc.pid, sampler) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(after_s)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    return proc


def thread_names(pid: int, prefix: str) -> list[str]:
    """Names of the threads of process `pid` that start with `prefix`."""
    from pathlib import Path

    names = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return [n for n in names if n.startswith(prefix)]


def dead_pid() -> int:
    """The PID of a process that has ended (and was reaped)."""
    import subprocess

    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def assert_usage_error(done, words: str, directory) -> None:
    """A bad-input run: exit 2, one line naming the problem, nothing written."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert os.listdir(directory) == []  # nothing half-written


def cpuset_cgroup_root() -> tuple[str, str] | None:
    """Where a child cpuset cgroup can be made here: (directory, 'v1' or 'v2'),
    or None (not root, or no cpuset controller mounted)."""
    import os

    if os.geteuid() != 0:
        return None
    v2 = "/sys/fs/cgroup"
    try:
        if "cpuset" in open(f"{v2}/cgroup.controllers").read().split():
            return v2, "v2"
    except OSError:
        pass
    return ("/sys/fs/cgroup/cpuset", "v1") if os.path.isdir("/sys/fs/cgroup/cpuset") else None


class RestrictedCpuset:
    """A cpuset cgroup that allows only `cpus`; `wrap(argv)` runs a command
    inside it (it moves itself in, then execs). Removed on exit."""

    def __init__(self, cpus: str):
        import os

        found = cpuset_cgroup_root()
        if found is None:
            raise RuntimeError("no cpuset cgroup can be made here")
        root, self.version = found
        self.path = f"{root}/noisescope-test-{os.getpid()}"
        self.cpus = cpus

    def __enter__(self) -> RestrictedCpuset:
        import os

        root = os.path.dirname(self.path)
        if self.version == "v2":
            with open(f"{root}/cgroup.subtree_control", "w") as control:
                control.write("+cpuset")
        os.mkdir(self.path)
        if self.version == "v1":  # a v1 cpuset needs its memory nodes too
            with open(f"{root}/cpuset.mems") as parent, open(f"{self.path}/cpuset.mems", "w") as mine:
                mine.write(parent.read().strip())
        with open(f"{self.path}/cpuset.cpus", "w") as allowed:
            allowed.write(self.cpus)
        return self

    def wrap(self, argv: list[str]) -> list[str]:
        return ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh", *argv]

    def __exit__(self, *exc) -> None:
        import os
        import time

        for _ in range(50):  # the last task may take a moment to leave
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


NOBODY = 65534


@contextmanager
def as_nobody(needed: list[Path]) -> Iterator[tuple[list[str], Path]]:
    """A command prefix that runs as the unprivileged user `nobody` (root
    only), and an empty directory it may write to (removed afterwards).

    The paths in `needed` (and this Python) may sit below directories other
    users cannot enter, such as /root (mode 0700) where pyenv keeps its
    Pythons. The command runs in a private mount namespace where each such
    directory is overlaid by an empty directory of mode 0755: `nobody` can
    pass through it, the files inside keep their own modes, and nothing
    changes outside the namespace."""
    import shutil
    import stat
    import sys
    import tempfile

    for tool in ("unshare", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} (util-linux) is needed to run as another user")
    blocked: set[Path] = set()
    for path in [Path(sys.executable).resolve(), Path(sys.prefix), Path(sys.base_prefix), *needed]:
        for directory in (path, *path.parents):
            if directory.is_dir() and not directory.stat().st_mode & stat.S_IXOTH:
                blocked.add(directory)
    scratch = Path(tempfile.mkdtemp(prefix="noisescope-nobody-"))
    try:
        mounts = []
        for i, directory in enumerate(sorted(blocked, key=lambda p: len(p.parts))):
            upper, work = scratch / f"upper{i}", scratch / f"work{i}"
            upper.mkdir(mode=0o755)
            work.mkdir()
            os.chmod(upper, 0o755)
            mounts.append(f"mount -t overlay overlay -o lowerdir={directory},upperdir={upper},"
                          f"workdir={work} {directory}")
        output = scratch / "output"
        output.mkdir()
        os.chmod(scratch, 0o755)
        os.chmod(output, 0o777)
        script = " && ".join([*mounts, 'exec "$@"'])
        yield ["unshare", "--mount", "--", "sh", "-ec", script, "sh", "setpriv",
               f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"], output
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
