"""The measurement clock: which counter, its rate, and where time zero is.

On x86 the native core reads the TSC; its rate comes from the kernel when
the kernel knows it exactly (`tsc_known_freq`: it read it from CPUID or the
hypervisor rather than measuring it) and from a calibration against
CLOCK_MONOTONIC_RAW otherwise. Elsewhere the core reads CLOCK_MONOTONIC_RAW
itself and one tick is one nanosecond.

Bundles store nanoseconds since the clock's origin; the origin is also
recorded as raw ticks, CLOCK_MONOTONIC_RAW and wall-clock time so that other
timelines (trace events, other nodes) can be mapped onto it.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass

import numpy as np

from . import _native

CALIBRATION_NS = 200_000_000
# The kernel's own number is preferred, but not when it disagrees with what
# we measure by more than this (a misreported frequency would skew every
# duration).
AGREEMENT = 0.005

_KERNEL_TSC = re.compile(
    r"tsc: (?:Refined TSC clocksource calibration: |Detected )([0-9.]+) MHz")


def kernel_stated_tsc_hz(kernel_log: str) -> float | None:
    """The last TSC frequency the kernel log states, in Hz."""
    found = _KERNEL_TSC.findall(kernel_log)
    return float(found[-1]) * 1e6 if found else None


def read_kernel_log() -> str:
    """The kernel ring buffer via /dev/kmsg (needs CAP_SYSLOG or dmesg_restrict=0)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    records = []
    try:
        while True:
            try:
                records.append(os.read(fd, 8192).decode(errors="replace"))
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record was overwritten while reading
                continue
    finally:
        os.close(fd)
    return "".join(records)


@dataclass(frozen=True)
class MeasurementClock:
    counter: str  # "tsc" or "monotonic_raw"
    ticks_per_second: float
    frequency_source: str  # "kernel", "calibrated" or "exact"
    calibrated_ticks_per_second: float | None
    origin_ticks: int
    origin_monotonic_raw_ns: int
    origin_realtime_ns: int

    @property
    def ticks_per_ns(self) -> float:
        return self.ticks_per_second / 1e9

    def timestamp_ns(self, ticks: np.ndarray | int) -> np.ndarray:
        """Absolute tick counts -> integer nanoseconds since the origin."""
        delta = np.asarray(ticks, dtype=np.uint64).astype(np.int64) - np.int64(self.origin_ticks)
        return np.rint(delta / self.ticks_per_ns).astype(np.int64)

    def duration_ns(self, ticks: np.ndarray | int | float) -> np.ndarray:
        """Tick counts of a duration -> integer nanoseconds."""
        return np.rint(np.asarray(ticks, dtype=np.float64) / self.ticks_per_ns).astype(np.int64)

    def ticks(self, ns: float) -> int:
        return int(round(ns * self.ticks_per_ns))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> MeasurementClock:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def _origin() -> tuple[int, int, int]:
    ticks = _native.ticks()
    mono = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
    wall = time.time_ns()
    return ticks, mono, wall


def measurement_clock(tsc_flags: list[str], kernel_log: str | None = None) -> MeasurementClock:
    """Determine the clock of this machine now (takes about 0.2 s)."""
    if not _native.HAS_TSC:
        return MeasurementClock("monotonic_raw", 1e9, "exact", None, *_origin())
    calibrated = _native.calibrate_ticks_per_ns(CALIBRATION_NS) * 1e9
    stated = None
    if "tsc_known_freq" in tsc_flags:
        stated = kernel_stated_tsc_hz(read_kernel_log() if kernel_log is None else kernel_log)
    if stated and abs(stated - calibrated) <= AGREEMENT * calibrated:
        return MeasurementClock("tsc", stated, "kernel", calibrated, *_origin())
    return MeasurementClock("tsc", calibrated, "calibrated", calibrated, *_origin())
