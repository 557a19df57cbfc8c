"""Running the native core from Python: Ctrl-C, SIGTERM, progress and the
samples handed over while the run goes on.

The native run blocks in C with the GIL released, on a helper thread; the
calling thread waits for it, shows progress, and on KeyboardInterrupt (a
stopping signal: `interrupts`, which lets one raise while the wait lasts)
sets the stop flag so that every sampler ends at its next check and hands
back what it measured. A third thread drains each sampler's ring of samples
(`struct ns_ring`) every DRAIN_INTERVAL_S, so that a run's length is not
bounded by a buffer sized in advance; a sampler never waits for it, and what
found its ring full is counted (`overflow`). A NativeHandle can also run in
the background (injectors beside a workload) until the caller stops it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import _native, interrupts
from .schedule import WindowSchedule
from .spool import SampleSpool

ProgressCallback = Callable[[float], None]  # fraction of the schedule done, 0..1
PROGRESS_INTERVAL_S = 1.0
DRAIN_INTERVAL_S = 0.1
# A ring holds this long a stretch of samples at the run's expected rate: the
# drainer runs every DRAIN_INTERVAL_S, but beside SCHED_FIFO samplers on every
# CPU it gets one only between their windows (about a second apart).
RING_SECONDS = 10
MIN_RING = 10_000
RING_BUDGET = 4_000_000  # ring slots over all CPUs (64 MB), MIN_RING per CPU at least


def ring_size(expected: int, measured_ns: int, ncpus: int, most: int | None) -> int:
    """Slots of a sampler's ring for a run expected to store `expected` samples
    per CPU in `measured_ns` of measuring, and never more than `most` (None:
    no bound; detours come at whatever rate the machine makes them, so a
    short run's ring still holds MIN_RING of them)."""
    stretch = math.ceil(expected * RING_SECONDS * 1e9 / max(measured_ns, 1))
    slots = max(MIN_RING, min(stretch, RING_BUDGET // max(ncpus, 1)))
    return max(0, min(slots, most) if most is not None else slots)


def control_array(nthreads: int) -> np.ndarray:
    """The array a native run shares with its caller (see _native.run)."""
    return np.zeros((1 + nthreads) * _native.CONTROL_STRIDE, np.int64)


@dataclass(frozen=True)
class Ring:
    """Which two buffers of each sampler spec make its ring, and how many
    samples to keep at most per CPU (None: all of them)."""

    first: str
    second: str
    limit: int | None = None


@dataclass
class _Drain:
    """Copies what each sampler published out of its ring and tells it how far
    it got (the ring's slot is free again): into memory, or appended to a
    `spool` (files) when there is one."""

    ring: Ring
    specs: list[dict]
    slots: np.ndarray  # (threads, CONTROL_STRIDE) view of the control array
    spool: SampleSpool | None = None
    parts: list[list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.parts = [[] for _ in self.specs]
        self.kept = [0] * len(self.specs)

    def take(self) -> None:
        for i, spec in enumerate(self.specs):
            first, second = spec[self.ring.first], spec[self.ring.second]
            taken = int(self.slots[i, _native.SLOT_TAKEN])
            count = int(self.slots[i, _native.SLOT_PUBLISHED]) - taken
            if self.ring.limit is not None:
                count = min(count, self.ring.limit - self.kept[i])
            if count <= 0:
                continue
            begin = taken % len(first)
            wrapped = max(0, begin + count - len(first))
            pieces = [(ring[begin:begin + count - wrapped], ring[:wrapped])
                      for ring in (first, second)]
            if self.spool is not None:  # up to the ring's end, then from its start; a full
                # disk stores none of them (the spool says so), nor any later ones
                self.kept[i] += sum(self.spool.append(i, pieces[0][index], pieces[1][index])
                                    for index in (0, 1))
            else:
                self.parts[i].append(tuple(  # type: ignore[arg-type]
                    np.concatenate(piece) for piece in pieces))
                self.kept[i] += count
            self.slots[i, _native.SLOT_TAKEN] = taken + count  # after the copy: the slots are free

    def hand_back(self, samplers: list[dict]) -> None:
        """Put every CPU's samples, in order, where its spec's ring was (or, with a
        spool, leave them there: the ring buffers are dropped), and count what
        was published but not kept (over the limit, or not spooled: the disk
        filled) as not stored; the samples before the first one lost are those
        with no gap among them."""
        if self.spool is not None:
            self.spool.close()
        for spec, result, parts, kept in zip(self.specs, samplers, self.parts, self.kept,
                                             strict=True):
            for index, name in enumerate((self.ring.first, self.ring.second)):
                if self.spool is not None:
                    spec[name] = None  # the ring's memory goes back before the analysis
                else:
                    spec[name] = (np.concatenate([part[index] for part in parts]) if parts
                                  else spec[name][:0].copy())
            result["overflow"] += result["stored"] - kept
            result["stored"] = kept
            result["stored_before_loss"] = min(result["stored_before_loss"], kept)


@dataclass
class NativeRun:
    samplers: list[dict]
    injectors: list[dict]
    interrupted: bool
    spool: SampleSpool | None = None  # where the samples are, if not in the specs


def window_buffers(schedule: WindowSchedule) -> dict[str, np.ndarray]:
    return {"window_start": np.empty(schedule.windows, np.uint64),
            "window_end": np.empty(schedule.windows, np.uint64)}


class NativeHandle:
    """A native run going on in a helper thread (GIL released) until it ends
    by its schedule or is stopped through the control array's stop flag."""

    def __init__(self, probe: str, threads: list[dict], injectors: list[dict],
                 schedule: WindowSchedule, ticks_per_ns: float, *, start_mono_ns: int = 0,
                 ring: Ring | None = None, spool: SampleSpool | None = None):
        self.threads = threads
        self.schedule = schedule
        self.control = control_array(len(threads))
        self._slots = self.control[_native.CONTROL_STRIDE:].reshape(len(threads),
                                                                     _native.CONTROL_STRIDE)
        native_schedule = schedule.native(start_mono_ns, ticks_per_ns)
        self._outcome: dict[str, object] = {}
        # Events rather than Thread.join() (see interrupts.wait_through)
        self._finished = threading.Event()  # the run's outcome is in _outcome
        self._drained = threading.Event()  # the drainer has ended
        self._drain = _Drain(ring, threads, self._slots, spool) if ring is not None else None

        def body() -> None:
            try:
                self._outcome["result"] = _native.run(probe, threads, injectors, native_schedule,
                                                      self.control)
            except BaseException as error:  # handed to the waiting thread below
                self._outcome["error"] = error
            finally:
                self._finished.set()

        threading.Thread(target=body, name=f"noisescope-{probe}", daemon=True).start()
        if self._drain is not None:
            threading.Thread(target=self._drain_while_running, name=f"noisescope-{probe}-drain",
                             daemon=True).start()

    def _drain_while_running(self) -> None:
        try:
            while not self._finished.wait(DRAIN_INTERVAL_S):
                self._drain.take()  # type: ignore[union-attr]
        except BaseException as error:  # handed to the caller by _collect
            self._outcome["drain error"] = error
        finally:
            self._drained.set()

    def wait(self, progress: ProgressCallback | None = None) -> NativeRun:
        """Until the schedule ends; Ctrl-C (or SIGTERM) stops the run and keeps its data."""
        interrupted = False
        try:
            with interrupts.raising():
                while not self._finished.wait(PROGRESS_INTERVAL_S if progress else None):
                    if progress and self.threads:
                        done = self._slots[:, _native.SLOT_PROGRESS].min()
                        progress(float(done) / self.schedule.windows)
        except KeyboardInterrupt:
            interrupted = True
            self.control[0] = 1
        return self._collect(interrupted)

    def stop(self) -> NativeRun:
        """End the run now (samplers stop within one window, injectors at their next wake-up)."""
        self.control[0] = 1
        return self._collect(False)

    def _collect(self, interrupted: bool) -> NativeRun:
        # the threads stop soon (a Ctrl-C meanwhile counts as an interrupt): keep their data
        for ended in [self._finished] + ([self._drained] if self._drain is not None else []):
            stop = interrupts.wait_through(ended)
            if stop is not None and not isinstance(stop, KeyboardInterrupt):
                raise stop  # (another handler's exception: a library caller's own)
            interrupted = interrupted or stop is not None
        for failure in ("error", "drain error"):
            if failure in self._outcome:
                raise self._outcome[failure]  # type: ignore[misc]
        samplers, injected = self._outcome["result"]  # type: ignore[misc]
        if self._drain is not None:
            self._drain.take()  # what came after the drainer's last look
            self._drain.hand_back(samplers)
        return NativeRun(samplers, injected, interrupted,
                         self._drain.spool if self._drain is not None else None)


def run_native(probe: str, threads: list[dict], injectors: list[dict], schedule: WindowSchedule,
               ticks_per_ns: float, *, start_mono_ns: int = 0,
               progress: ProgressCallback | None = None, ring: Ring | None = None,
               spool: SampleSpool | None = None) -> NativeRun:
    handle = NativeHandle(probe, threads, injectors, schedule, ticks_per_ns,
                          start_mono_ns=start_mono_ns, ring=ring, spool=spool)
    return handle.wait(progress)
