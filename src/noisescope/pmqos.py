"""CPU wakeup-latency requests (PM QoS), as cyclictest and rtla make them.

Writing a latency bound to /dev/cpu_dma_latency keeps the CPUs out of idle
states slower to leave than the bound for as long as the file stays open.
The kernel drops the request when the file is closed, also when the process
is killed, so nothing can be left behind.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

DEVICE = "/dev/cpu_dma_latency"
# The kernel's default request (PM_QOS_CPU_LATENCY_DEFAULT_VALUE, 2000 s): no bound at all.
MAX_US = 2_000_000_000
NOT_HELD = "not held"


@contextmanager
def cpu_latency_request(max_us: int | None, device: str = DEVICE) -> Iterator[str]:
    """Hold a request for idle-state exit latency <= max_us; yields what happened:
    NOT_HELD (max_us None), "N us while measuring" or "skipped: WHY"."""
    if max_us is None:
        yield NOT_HELD
        return
    try:
        fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as error:
        yield f"skipped: cannot open {device} ({error.strerror}; needs root)"
        return
    try:
        os.write(fd, struct.pack("i", max_us))
    except OSError as error:
        os.close(fd)
        yield f"skipped: writing {device} failed ({error.strerror})"
        return
    try:
        yield f"{max_us} us while measuring"
    finally:
        os.close(fd)
