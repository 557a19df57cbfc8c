"""Application runs: spawn a workload, wait for it, measure what it cost.

One run spawns the command as argv (through /bin/sh -c only when asked) in a
session (process group) of its own, stdin from /dev/null and stdout/stderr
into files that are read after it exits: nothing in the harness wakes up
while the workload runs. The workload is started by `noisescope-launch`, a
small C program that wait4()s it and reports the child's own resource usage
(with that of the descendants it waited for, as `time` reports it; spawned
straight from Python its max RSS would include the harness's). /proc/stat
before and after gives system-wide context switches and interrupts. A
timeout or Ctrl-C ends the whole process group (SIGTERM, then SIGKILL after
a grace period). Metrics (figures of merit) are read from the output with
a regular expression.
"""

from __future__ import annotations

import errno
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import _native
from .errors import UsageError, option
from .placement import ResolvedPlacement

BETTER = ("higher", "lower")
STATUSES = ("ok", "failed", "timeout", "interrupted")
OUTPUT_TAIL_BYTES = 8 << 20  # metrics are searched in the last 8 MiB of each stream
KILL_GRACE_NS = 1_000_000_000
LAUNCHER_EXIT_S = 5.0
LAUNCHER = Path(__file__).parent / "libexec" / "noisescope-launch"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Metric:
    """A figure of merit read from the workload's output: the first group of
    the last match of `pattern` in stdout, else in stderr."""

    name: str
    pattern: str
    better: str = "higher"

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise UsageError(f"metric name {self.name!r} is not a plain identifier",
                             "use letters, digits and _ (e.g. tps, gflops)")
        if self.better not in BETTER:
            raise UsageError(f"metric {self.name}: better must be higher or lower, not "
                             f"{self.better!r}", "e.g. tps:higher=REGEX or latency:lower=REGEX")
        try:
            compiled = re.compile(self.pattern, re.MULTILINE)
        except re.error as error:
            raise UsageError(f"metric {self.name}: bad regular expression {self.pattern!r} "
                             f"({error})", "e.g. 'tps: ([0-9.]+)'") from None
        object.__setattr__(self, "_regex", compiled)

    @classmethod
    def parse(cls, text: str) -> Metric:
        """'NAME=REGEX' or 'NAME:higher=REGEX' / 'NAME:lower=REGEX' (default: higher)."""
        head, sep, pattern = text.partition("=")
        name, _, better = head.partition(":")
        if not sep or not name.strip() or not pattern:
            raise UsageError(f"cannot read metric {text!r}",
                             "write NAME[:higher|lower]=REGEX, e.g. tps='tps: ([0-9.]+)'")
        return cls(name.strip(), pattern, better.strip() or "higher")

    @property
    def column(self) -> str:
        return f"metric_{self.name}"

    def extract(self, *outputs: str) -> float | None:
        for text in outputs:
            found = deque(self._regex.finditer(text), maxlen=1)  # type: ignore[attr-defined]
            if found:
                last = found[0]
                value = last.group(1) if last.re.groups else last.group(0)
                try:
                    return float(value.replace(",", ""))
                except (TypeError, ValueError):
                    return None
        return None

    def to_dict(self) -> dict:
        return {"name": self.name, "pattern": self.pattern, "better": self.better}


@dataclass(frozen=True)
class Workload:
    name: str
    argv: tuple[str, ...]
    shell: bool = False  # argv is one shell command line for /bin/sh -c
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # added to the inherited environment
    metrics: tuple[Metric, ...] = ()

    def __post_init__(self) -> None:
        if not self.argv or not self.argv[0].strip():
            raise UsageError(f"workload {self.name!r} has no command", "e.g. -- make -j2")
        if self.shell and len(self.argv) != 1:
            raise UsageError(f"with {option('shell')} give the command as one string",
                             f"e.g. {option('shell')} -- 'make -j2 && ./a.out'")
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise UsageError(f"workload {self.name!r} declares a metric twice", "rename one")

    @property
    def command(self) -> list[str]:
        return ["/bin/sh", "-c", self.argv[0]] if self.shell else list(self.argv)

    def environment(self) -> dict[str, str]:
        return {**os.environ, **dict(self.env)}

    def executable(self, env: Mapping[str, str] | None = None) -> str | None:
        """The program's absolute path (found in env's PATH), None if not runnable."""
        program = self.command[0]
        if "/" in program:
            path = os.path.abspath(os.path.join(self.cwd or ".", program))
            return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
        env = self.environment() if env is None else env
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        return os.path.abspath(found) if found else None

    def check(self) -> None:
        """Fail before any run when the program cannot be started."""
        if not os.access(LAUNCHER, os.X_OK):
            raise UsageError(f"{LAUNCHER} is missing from this installation",
                             "reinstall noisescope (pip install .) where a C compiler is available")
        if self.cwd is not None and not os.path.isdir(self.cwd):
            raise UsageError(f"workload {self.name!r}: directory {self.cwd} does not exist",
                             "fix its cwd")
        if self.executable() is None:
            program = self.command[0]
            if "/" in program:
                raise UsageError(f"command {program!r} does not exist or is not executable",
                                 "check the path (relative paths start at the workload's cwd)")
            raise UsageError(f"command {program!r} not found in PATH",
                             "check the spelling, install it, or give its full path")

    def to_dict(self) -> dict:
        return {"name": self.name, "argv": list(self.argv), "shell": self.shell, "cwd": self.cwd,
                "env": dict(self.env), "metrics": [m.to_dict() for m in self.metrics]}


@dataclass
class RunResult:
    """One run. Times are integer nanoseconds; `metrics` holds None where the
    pattern did not match."""

    status: str
    reason: str
    exit_code: int  # -1 when killed by a signal
    signal: int
    wall_ns: int
    user_ns: int
    sys_ns: int
    maxrss_kib: int
    voluntary_switches: int
    involuntary_switches: int
    minor_faults: int
    major_faults: int
    system_context_switches: int
    system_interrupts: int
    start_ticks: int
    end_ticks: int
    metrics: dict[str, float | None] = field(default_factory=dict)
    pid: int = 0  # the process started (0: none), as traces name it


def read_proc_stat(path: str = "/proc/stat") -> tuple[int, int]:
    """System-wide (context switches, interrupts) since boot."""
    ctxt = intr = 0
    with open(path, "rb") as stat:
        for line in stat:
            if line.startswith(b"ctxt "):
                ctxt = int(line.split()[1])
            elif line.startswith(b"intr "):
                intr = int(line.split(maxsplit=2)[1])
    return ctxt, intr


class Runner:
    """Runs workloads one at a time through a noisescope-launch per placement,
    reusing its two output files. Close it (or use `with`) to end the launchers."""

    def __init__(self) -> None:
        self._stdout = tempfile.TemporaryFile(prefix="noisescope-stdout-")
        self._stderr = tempfile.TemporaryFile(prefix="noisescope-stderr-")
        self._launchers: dict[ResolvedPlacement, _Launcher] = {}

    def close(self) -> None:
        for launcher in self._launchers.values():
            launcher.close()
        self._launchers.clear()
        self._stdout.close()
        self._stderr.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _launcher(self, placement: ResolvedPlacement) -> _Launcher:
        launcher = self._launchers.get(placement)
        if launcher is None or not launcher.alive:
            launcher = _Launcher(placement, self._stdout, self._stderr)
            self._launchers[placement] = launcher
        return launcher

    def run(self, workload: Workload, placement: ResolvedPlacement, timeout_ns: int,
            env: Mapping[str, str] | None = None) -> RunResult:
        environment = dict(env) if env is not None else workload.environment()
        path = workload.executable(environment)
        launcher = self._launcher(placement)
        for output in (self._stdout, self._stderr):
            output.seek(0)
            output.truncate()
        ctxt_before, intr_before = read_proc_stat()
        start_ticks = _native.ticks()
        if path is None:
            report, ended, interrupted, pid = LaunchReport(True, errno.ENOENT), "exit", False, 0
        else:
            report, ended, interrupted, pid = launcher.run(path, workload.command, environment,
                                                           workload.cwd, timeout_ns)
        end_ticks = _native.ticks()
        ctxt_after, intr_after = read_proc_stat()

        stdout, stderr = self._tail(self._stdout), self._tail(self._stderr)
        code = os.waitstatus_to_exitcode(report.status)
        outcome, reason = "ok", ""
        if interrupted:
            outcome, reason = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
        elif ended == "timeout":
            outcome, reason = "timeout", f"timed out after {timeout_ns / 1e9:g} s"
        elif report.spawn_errno:
            outcome = "failed"
            reason = f"cannot run {workload.command[0]}: {os.strerror(report.spawn_errno)}"
        elif not report.reported:
            outcome, reason = "failed", "noisescope-launch ended without a report"
        elif code < 0:
            outcome, reason = "failed", f"killed by {signal.Signals(-code).name}"
        elif code > 0:
            outcome = "failed"
            reason = f"exit status {code}" + _last_line(stderr or stdout)
        return RunResult(
            status=outcome, reason=reason, exit_code=code if code >= 0 else -1,
            signal=-code if code < 0 else 0, wall_ns=report.wall_ns,
            user_ns=report.user_us * 1000, sys_ns=report.sys_us * 1000,
            maxrss_kib=report.maxrss_kib, voluntary_switches=report.voluntary_switches,
            involuntary_switches=report.involuntary_switches, minor_faults=report.minor_faults,
            major_faults=report.major_faults, system_context_switches=ctxt_after - ctxt_before,
            system_interrupts=intr_after - intr_before, start_ticks=start_ticks,
            end_ticks=end_ticks,
            metrics={m.name: m.extract(stdout, stderr) for m in workload.metrics}, pid=pid)

    @staticmethod
    def _tail(output) -> str:
        size = output.seek(0, os.SEEK_END)
        output.seek(max(0, size - OUTPUT_TAIL_BYTES))
        return output.read().decode(errors="replace")


@dataclass(frozen=True)
class LaunchReport:
    """What noisescope-launch wrote about one run (all zero when it wrote nothing)."""

    reported: bool = False
    spawn_errno: int = 0
    status: int = 0  # wait status
    wall_ns: int = 0
    user_us: int = 0
    sys_us: int = 0
    maxrss_kib: int = 0
    voluntary_switches: int = 0
    involuntary_switches: int = 0
    minor_faults: int = 0
    major_faults: int = 0


class _Launcher:
    """One noisescope-launch process, started with a placement its workloads inherit."""

    def __init__(self, placement: ResolvedPlacement, stdout, stderr):
        request_end, self._requests = os.pipe()
        self._results, result_end = os.pipe()
        self._pending = b""

        def start() -> int:
            process = subprocess.Popen(
                [str(LAUNCHER), str(request_end), str(result_end)], stdin=subprocess.DEVNULL,
                stdout=stdout, stderr=stderr, pass_fds=(request_end, result_end),
                start_new_session=True)
            process.returncode = 0  # reaped in close() with waitpid(); stops Popen waiting
            return process.pid

        try:
            self.pid = placement.spawn(start)
        finally:
            os.close(request_end)
            os.close(result_end)
        self.alive = True

    def run(self, path: str, argv: list[str], env: Mapping[str, str], cwd: str | None,
            timeout_ns: int) -> tuple[LaunchReport, str, bool, int]:
        """One run; returns (report, 'exit' or 'timeout', interrupted, the
        started process's pid or 0)."""
        fields = [path, str(len(argv)), *argv, str(len(env)),
                  *(f"{k}={v}" for k, v in env.items()), cwd or ""]
        payload = b"".join(os.fsencode(f) + b"\0" for f in fields)
        try:
            os.write(self._requests, struct.pack("=I", len(payload)) + payload)
        except BrokenPipeError:
            self.alive = False
            return LaunchReport(), "exit", False, 0
        interrupted = False
        try:
            first = self._line(None)
        except KeyboardInterrupt:
            interrupted = True
            first = self._uninterrupted_line()
        if not first.startswith("P "):
            return self._report(first), "exit", interrupted, 0
        group = int(first.split()[1])
        ended = "exit"
        try:
            line = None if interrupted else self._line(timeout_ns)
            if line is None:
                ended = "exit" if interrupted else "timeout"
                line = self._end(group)
        except KeyboardInterrupt:
            interrupted = True
            line = self._end(group)
        if ended == "timeout" or interrupted:
            _signal_group(group, signal.SIGKILL)  # what is left of the group
        return self._report(line), ended, interrupted, group

    def _line(self, timeout_ns: int | None) -> str | None:
        """The next line from the launcher ('' at its end; None on timeout)."""
        deadline = None if timeout_ns is None else time.monotonic_ns() + timeout_ns
        while b"\n" not in self._pending:
            if deadline is not None:
                left = deadline - time.monotonic_ns()
                ready, _, _ = select.select([self._results], [], [], max(0, left) / 1e9)
                if not ready:
                    return None
            chunk = os.read(self._results, 4096)
            if not chunk:
                self.alive = False
                return ""
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode()

    def _end(self, group: int) -> str:
        """End a run's process group: SIGTERM, then SIGKILL after a grace period."""
        _signal_group(group, signal.SIGTERM)
        try:
            line = self._line(KILL_GRACE_NS)
        except KeyboardInterrupt:
            line = None
        if line is None:
            _signal_group(group, signal.SIGKILL)
            line = self._uninterrupted_line()
        return line

    def _uninterrupted_line(self) -> str:
        while True:
            try:
                return self._line(None)
            except KeyboardInterrupt:
                continue

    @staticmethod
    def _report(line: str) -> LaunchReport:
        fields = line.split()
        if len(fields) != 11 or fields[0] != "R":
            return LaunchReport()
        return LaunchReport(True, *(int(f) for f in fields[1:]))

    def close(self) -> None:
        os.close(self._requests)  # the launcher exits at the end of its requests
        os.close(self._results)
        pidfd = os.pidfd_open(self.pid)
        try:
            if not select.select([pidfd], [], [], LAUNCHER_EXIT_S)[0]:
                os.kill(self.pid, signal.SIGKILL)
        finally:
            os.close(pidfd)
        os.waitpid(self.pid, 0)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f": {lines[-1][:200]}" if lines else ""


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass
