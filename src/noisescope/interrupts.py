"""Stopping signals, and how a measurement survives every one of them but SIGKILL.

A stopping signal (`STOPPING`: Ctrl-C, `kill`, a closed terminal, Ctrl-\\, a
batch system's warning) means "end soon", never "throw away what was
measured". Python runs signal handlers in the main thread, whichever thread
the kernel delivered the signal to (the native samplers block every signal;
helper threads and libraries' threads, OpenBLAS's among them, do not: blocking
signals in the main thread alone did not hold them off). So one handler
decides for the whole process:

- Outside `keeping()` a stopping signal raises KeyboardInterrupt, as SIGINT
  does in any Python program: the command ends. The CLI has it so for
  SIGTERM, SIGHUP, ... too (`handled()`).
- Inside `keeping()` (measured data is in memory and not yet safely on disk)
  it is counted and announced on stderr with what it gives up, and not
  raised. The code opens `raising()` around waits and computations that an
  exception ends cleanly (a native run, a step of the analysis: `Stage`) and
  asks `take()` where it can stop early. From the second signal on, each
  signal leaves out what the regions call optional at that moment (the rest
  of the analysis; the tables a bundle still has to make, its kernel events):
  the announcement and what is left out are decided in the same instant.
  What is left is written, so the bundle is on disk before the command ends.

Library callers get the same: `keeping()` puts the handler in place for its
duration (main thread only; for the signals that have Python's default
handling, another program's handler is left be) and, once the data is kept,
passes on a signal whose disposition was the default action (the process
then ends as it would have, after the data is on disk). A Ctrl-C there has
ended the measurement early, which returns what it has.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

# Every signal whose default action ends the process, except SIGKILL (cannot
# be caught), the faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS, SIGTRAP,
# SIGABRT: the process is broken), SIGPIPE and SIGXFSZ (Python ignores them:
# the write fails instead, and is handled where it fails) and the real-time
# signals (the injector's timer uses one; nothing sends them to end a process).
STOPPING = tuple(getattr(signal, name) for name in (
    "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGUSR1", "SIGUSR2", "SIGXCPU",
    "SIGVTALRM", "SIGPROF", "SIGPWR", "SIGIO", "SIGSTKFLT") if hasattr(signal, name))


@dataclass
class Frame:
    """One `keeping()` region: where its data goes and what a signal does to it.
    The code updates `stopping` and `optional` as it moves on."""

    destination: str | None = None
    stopping: str | None = None  # what a first signal ends now, e.g. "stopping the probes"
    measured: bool = True  # whether there is a measurement to keep yet
    # what a further signal leaves out (read when it comes), and a call that
    # makes it so (made in the same instant: what is announced is what goes)
    optional: list[str] | Callable[[], list[str]] = field(default_factory=list)
    give_up: Callable[[], None] | None = None

    def optional_now(self) -> list[str]:
        return self.optional() if callable(self.optional) else list(self.optional)


@dataclass
class _State:
    frames: list[Frame] = field(default_factory=list)
    raising: int = 0  # depth of raising() regions
    received: int = 0  # stopping signals since the outermost keeping() began
    signals: set[int] = field(default_factory=set)  # which ones
    pending: int = 0  # of those, not yet acted upon (take(), raising())
    installed: bool = False  # handled(): the handler is in place for the whole command


_state = _State()


@contextmanager
def handled() -> Iterator[None]:
    """Route every stopping signal through this module while a command runs
    (the CLI); the handlers before are back afterwards. A signal that is
    ignored (nohup's SIGHUP, SIGINT of a background job) stays ignored."""
    previous = {signum: signal.getsignal(signum) for signum in STOPPING}
    _state.received = _state.pending = 0
    _state.signals.clear()
    for signum, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(signum, _on_signal)
    _state.installed = True
    try:
        yield
    finally:
        _state.installed = False
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


def _on_signal(signum: int, frame) -> None:
    if not _state.frames:
        raise KeyboardInterrupt
    _state.received += 1
    _state.signals.add(signum)
    optional = [item for f in _state.frames for item in f.optional_now()]
    if _state.received > 1 and optional:
        for region in _state.frames:
            if region.give_up is not None:
                region.give_up()
    _announce(signum, optional)
    if _state.raising:
        raise KeyboardInterrupt
    _state.pending += 1


def _announce(signum: int, optional: list[str]) -> None:
    """One line on stderr: what this signal stops or leaves out, and where the
    measurement goes (the innermost region says what is going on). Written
    with os.write: the signal may have come while the main thread was itself
    writing to sys.stderr."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    current = _state.frames[-1]
    destination = next((f.destination for f in reversed(_state.frames) if f.destination), None)
    kept = f"kept at {destination}" if destination else "kept"
    count = _state.received
    if count == 1 and current.stopping:
        text = f"interrupted ({name}): {current.stopping}" + (
            f"; the measurement is {kept}" if current.measured else "")
    elif count == 1:
        text = (f"interrupted ({name}): saving the measurement first; it will be {kept}"
                + (f" (interrupt again to leave out {_and(optional)})" if optional else ""))
    elif optional:
        ordinal = "second interrupt" if count == 2 else f"interrupt {count}"
        text = f"{ordinal} ({name}): leaving out {_and(optional)}; the measurement is {kept}"
    else:
        text = (f"interrupt {count} ({name}): still saving the measurement; it will be {kept} "
                f"(SIGKILL would lose it)")
    try:
        os.write(2, f"noisescope: {text}\n".encode())
    except OSError:  # the terminal is gone (SIGHUP); the measurement is kept all the same
        pass


def _and(items: list[str]) -> str:
    items = list(dict.fromkeys(items))
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


@contextmanager
def keeping(destination: object = None, *, stopping: str | None = None) -> Iterator[Frame]:
    """A region holding measured data until it is stored (at `destination`, if
    given): stopping signals are counted and announced, not raised. Off the
    main thread it holds nothing: signals never interrupt another thread's code."""
    frame = Frame(str(destination) if destination is not None else None, stopping)
    if not _in_main_thread():
        yield frame
        return
    previous: dict[int, object] = {}
    if not _state.frames:  # the outermost region
        _state.received = _state.pending = 0
        _state.signals.clear()
        if not _state.installed:
            for signum in STOPPING:  # those with Python's defaults; another handler is left be
                handler = signal.getsignal(signum)
                if handler in (signal.SIG_DFL, signal.default_int_handler):
                    previous[signum] = handler
                    signal.signal(signum, _on_signal)
    _state.frames.append(frame)
    try:
        yield frame
    finally:
        _state.frames.remove(frame)
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        ending = [n for n in sorted(_state.signals) if previous.get(n) is signal.SIG_DFL]
        if ending:
            signal.raise_signal(ending[0])  # the data is kept: now end as the signal asked


@contextmanager
def raising() -> Iterator[None]:
    """Inside a keeping() region: here a stopping signal raises KeyboardInterrupt
    (the code around catches it and keeps what it has), and one that came
    just before is raised on entry. Outside one, signals raise anyway."""
    if not _state.frames or not _in_main_thread():
        yield
        return
    _state.raising += 1
    try:
        if _state.pending:
            _state.pending -= 1
            raise KeyboardInterrupt
        yield
    finally:
        _state.raising -= 1


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def take() -> bool:
    """Whether a stopping signal came that nothing has acted on yet (it counts
    as acted on now): code that can end early asks this."""
    if _state.pending:
        _state.pending -= 1
        return True
    return False


def interrupted() -> bool:
    """Whether a stopping signal came since the (last) outermost keeping() began."""
    return _state.received > 0


def wait_through(event: threading.Event) -> BaseException | None:
    """Wait until `event` is set, whatever signals come meanwhile; returns the
    first exception one raised (None: none came), for the caller to raise or
    note. To wait for a thread's end, wait for an Event it sets as it ends,
    never Thread.join(): Python 3.11 takes a thread whose join() a signal
    interrupted for ended, and a second join() returns at once."""
    stop = None
    while True:
        try:  # (the test too: a signal may come between the wait and the test)
            while not event.is_set():
                event.wait()
            return stop
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            stop = stop or error


class GaveUp(Exception):
    """Optional work stopped because a signal gave it up (its partial result is discarded)."""


class Stage:
    """Steps that a stop cuts short (each returns None then): once one is,
    the steps after it are skipped too. `cut_short` names the first; a
    region's further interrupt skips the rest (`give_up`, a Frame's give_up)."""

    def __init__(self) -> None:
        self.cut_short: str | None = None
        self.given_up = False

    def give_up(self) -> None:
        self.given_up = True

    def cut(self, what: str) -> None:
        """A step stopped inside another that went on: the steps after it are
        skipped, as if `what` had been cut short (unless one was before)."""
        self.cut_short = self.cut_short or what

    def run(self, what: str, compute: Callable[[], T]) -> T | None:
        if self.cut_short is not None or self.given_up:
            return None
        try:
            with raising():
                return compute()
        except KeyboardInterrupt:
            self.cut_short = what
            return None
