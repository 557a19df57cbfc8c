"""Running the native core from Python: Ctrl-C, SIGTERM and progress.

The native run blocks in C with the GIL released, on a helper thread; the
calling thread waits for it, shows progress, and on KeyboardInterrupt (a
stopping signal: `interrupts`, which lets one raise while the wait lasts)
sets the stop flag so that every sampler ends at its next check and hands
back what it measured. A NativeHandle can also run in the background
(injectors beside a workload) until the caller stops it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import _native, interrupts
from .schedule import WindowSchedule

ProgressCallback = Callable[[float], None]  # fraction of the schedule done, 0..1
PROGRESS_INTERVAL_S = 1.0


@dataclass
class NativeRun:
    samplers: list[dict]
    injectors: list[dict]
    interrupted: bool


def window_buffers(schedule: WindowSchedule) -> dict[str, np.ndarray]:
    return {"window_start": np.empty(schedule.windows, np.uint64),
            "window_end": np.empty(schedule.windows, np.uint64)}


class NativeHandle:
    """A native run going on in a helper thread (GIL released) until it ends
    by its schedule or is stopped through the control array's stop flag."""

    def __init__(self, probe: str, threads: list[dict], injectors: list[dict],
                 schedule: WindowSchedule, ticks_per_ns: float, *, start_mono_ns: int = 0):
        self.threads = threads
        self.schedule = schedule
        self.control = np.zeros(1 + len(threads), np.int64)
        native_schedule = schedule.native(start_mono_ns, ticks_per_ns)
        self._outcome: dict[str, object] = {}
        # An Event rather than Thread.join(): a join interrupted by Ctrl-C can
        # leave the thread looking finished while it still runs.
        self._finished = threading.Event()

        def body() -> None:
            try:
                self._outcome["result"] = _native.run(probe, threads, injectors, native_schedule,
                                                      self.control)
            except BaseException as error:  # handed to the waiting thread below
                self._outcome["error"] = error
            finally:
                self._finished.set()

        self._worker = threading.Thread(target=body, name=f"noisescope-{probe}", daemon=True)
        self._worker.start()

    def wait(self, progress: ProgressCallback | None = None) -> NativeRun:
        """Until the schedule ends; Ctrl-C (or SIGTERM) stops the run and keeps its data."""
        interrupted = False
        try:
            with interrupts.raising():
                while not self._finished.wait(PROGRESS_INTERVAL_S if progress else None):
                    if progress and self.threads:
                        progress(float(self.control[1:].min()) / self.schedule.windows)
        except KeyboardInterrupt:
            interrupted = True
            self.control[0] = 1
        return self._collect(interrupted)

    def stop(self) -> NativeRun:
        """End the run now (samplers stop within one window, injectors at their next wake-up)."""
        self.control[0] = 1
        return self._collect(False)

    def _collect(self, interrupted: bool) -> NativeRun:
        while not self._finished.is_set():  # the threads stop soon; keep their data
            try:
                self._finished.wait()
            except KeyboardInterrupt:
                interrupted = True
        self._worker.join()
        if "error" in self._outcome:
            raise self._outcome["error"]  # type: ignore[misc]
        samplers, injected = self._outcome["result"]  # type: ignore[misc]
        return NativeRun(samplers, injected, interrupted)


def run_native(probe: str, threads: list[dict], injectors: list[dict], schedule: WindowSchedule,
               ticks_per_ns: float, *, start_mono_ns: int = 0,
               progress: ProgressCallback | None = None) -> NativeRun:
    handle = NativeHandle(probe, threads, injectors, schedule, ticks_per_ns,
                          start_mono_ns=start_mono_ns)
    return handle.wait(progress)
