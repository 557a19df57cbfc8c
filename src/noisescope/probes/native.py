"""Running the native core from Python: Ctrl-C, SIGTERM and progress.

The native run blocks in C with the GIL released, on a helper thread; the
calling thread waits for it, shows progress, and on KeyboardInterrupt (or
SIGTERM, which the CLI turns into one) sets the stop flag so that every
sampler ends at its next check and hands back what it measured.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import _native
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


def run_native(probe: str, threads: list[dict], injectors: list[dict], schedule: WindowSchedule,
               ticks_per_ns: float, *, start_mono_ns: int = 0,
               progress: ProgressCallback | None = None) -> NativeRun:
    control = np.zeros(1 + len(threads), np.int64)
    native_schedule = schedule.native(start_mono_ns, ticks_per_ns)
    outcome: dict[str, object] = {}
    # An Event rather than Thread.join(): a join interrupted by Ctrl-C can
    # leave the thread looking finished while it still runs.
    finished = threading.Event()

    def body() -> None:
        try:
            outcome["result"] = _native.run(probe, threads, injectors, native_schedule, control)
        except BaseException as error:  # handed to the waiting thread below
            outcome["error"] = error
        finally:
            finished.set()

    worker = threading.Thread(target=body, name=f"noisescope-{probe}", daemon=True)
    worker.start()
    interrupted = False
    try:
        while not finished.wait(PROGRESS_INTERVAL_S if progress else None):
            if progress and threads:
                progress(float(control[1:].min()) / schedule.windows)
    except KeyboardInterrupt:
        interrupted = True
        control[0] = 1
        while not finished.is_set():  # samplers stop within one window; keep their data
            try:
                finished.wait()
            except KeyboardInterrupt:
                pass
    worker.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    samplers, injected = outcome["result"]  # type: ignore[misc]
    return NativeRun(samplers, injected, interrupted)
