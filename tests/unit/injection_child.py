"""Signal-mode injection runs in a process of their own, for test_native_safety.py:
what goes wrong there (an unhandled real-time signal, a bad pointer in the
handler) kills the process, which must not take the test runner with it.

    python injection_child.py forged CPU PRIORITY      one run; stray signals sent to its thread
    python injection_child.py concurrent CPU PRIORITY  two overlapping runs from two threads

Prints one JSON object: per run what the core reported, the injections'
spacing, and what was checked along the way.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
import threading
import time

import numpy as np

from noisescope import _native
from noisescope.probes.native import control_array

SI_QUEUE, SI_TIMER = -1, -2  # <asm-generic/siginfo.h>
SYS_TGKILL, SYS_RT_TGSIGQUEUEINFO = 234, 297  # x86_64
SIGNAL = _native.injection_signal()
BOGUS_VALUE = 0xDEAD0000BEEF0  # what a stray sigqueue may carry: no injection lives there
LENGTH_NS = 20_000

libc = ctypes.CDLL(None, use_errno=True)
TICKS_PER_NS = _native.calibrate_ticks_per_ns(20_000_000)


class InjectedRun:
    """A native run of the idle target with signal-mode injection, on a thread."""

    def __init__(self, cpu: int, priority: int, duration_ns: int, period_ns: int):
        self.duration_ns, self.period_ns = duration_ns, period_ns
        capacity = 4 * duration_ns // period_ns + 16
        self.spec = {"cpu": cpu, "priority": priority,
                     "window_start": np.zeros(1, np.uint64), "window_end": np.zeros(1, np.uint64),
                     "inject": {"period_ns": period_ns, "length_ticks": int(LENGTH_NS * TICKS_PER_NS),
                                "start": np.zeros(capacity, np.uint64),
                                "end": np.zeros(capacity, np.uint64)}}
        schedule = {"start_mono_ns": 0, "runtime_ns": duration_ns, "period_ns": duration_ns,
                    "last_runtime_ns": duration_ns, "windows": 1, "ticks_per_ns": TICKS_PER_NS}
        self.samplers: list[dict] = []
        self.thread = threading.Thread(target=self._run, args=(schedule,))
        self.thread.start()

    def _run(self, schedule: dict) -> None:
        self.samplers, _ = _native.run("idle", [self.spec], [], schedule, control_array(1))

    def report(self) -> dict:
        self.thread.join()
        [sampler] = self.samplers
        stored = sampler["injection"]["stored"]
        begin = int(self.spec["window_start"][0])
        starts = (self.spec["inject"]["start"][:stored].astype(np.int64) - begin) / TICKS_PER_NS
        return {"error": sampler["error"], "error_stage": sampler["error_stage"],
                "stored": stored, "coalesced": sampler["injection"]["coalesced"],
                "duration_ns": self.duration_ns, "period_ns": self.period_ns,
                "run_delay_ns": sampler["run_delay_ns"],
                "first_start_ns": float(starts.min()) if stored else None,
                "last_start_ns": float(starts.max()) if stored else None,
                "median_spacing_ns": float(np.median(np.diff(starts))) if stored > 1 else None}


def target_tids(cpu: int) -> list[int]:
    """Thread ids of the idle targets on `cpu` in this process."""
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                if comm.read().strip() == f"ns-target/{cpu}":
                    found.append(int(task))
        except OSError:
            pass  # the thread ended meanwhile
    return found


def wait_for_targets(cpu: int, count: int) -> list[int]:
    deadline = time.monotonic() + 10
    while len(tids := target_tids(cpu)) < count:
        if time.monotonic() > deadline:
            raise RuntimeError("no injection target thread appeared")
        time.sleep(0.005)
    return tids


def handler_installed() -> bool:
    """Whether the process catches the injection signal (SigCgt in /proc)."""
    with open("/proc/self/status") as status:
        caught = next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt:"))
    return bool(caught >> (SIGNAL - 1) & 1)


def queue_signal(tid: int, code: int, value: int) -> int:
    """rt_tgsigqueueinfo with a siginfo of our making; returns 0 or errno."""
    info = ctypes.create_string_buffer(128)
    struct.pack_into("iii", info, 0, SIGNAL, 0, code)
    struct.pack_into("iiQ", info, 16, os.getpid(), os.getuid(), value)  # sigval at offset 24
    done = libc.syscall(SYS_RT_TGSIGQUEUEINFO, os.getpid(), tid, SIGNAL, info)
    return 0 if done == 0 else ctypes.get_errno()


def forged(cpu: int, priority: int) -> dict:
    run = InjectedRun(cpu, priority, 1_000_000_000, 100_000_000)
    [tid] = wait_for_targets(cpu, 1)
    time.sleep(0.1)
    sent = {"tgkill": [], "sigqueue": [], "forged_timer": []}
    for _ in range(20):
        done = libc.syscall(SYS_TGKILL, os.getpid(), tid, SIGNAL)
        sent["tgkill"].append(0 if done == 0 else ctypes.get_errno())
        sent["sigqueue"].append(queue_signal(tid, SI_QUEUE, BOGUS_VALUE))
        sent["forged_timer"].append(queue_signal(tid, SI_TIMER, BOGUS_VALUE))
        time.sleep(0.005)
    return {"sent": {how: sorted(set(errors)) for how, errors in sent.items()},
            "runs": [run.report()]}


def concurrent(cpu: int, priority: int) -> dict:
    """Run A starts first and ends first, while run B still depends on the handler."""
    first = InjectedRun(cpu, priority, 1_200_000_000, 40_000_000)
    wait_for_targets(cpu, 1)
    time.sleep(0.2)
    second = InjectedRun(cpu, priority, 2_000_000_000, 100_000_000)
    wait_for_targets(cpu, 2)
    installed = {"both_running": handler_installed()}
    runs = [first.report()]
    installed["second_running"] = handler_installed()
    installed["second_was_running"] = second.thread.is_alive()  # the scenario held
    runs.append(second.report())
    installed["none_running"] = handler_installed()
    return {"installed": installed, "runs": runs}


if __name__ == "__main__":
    mode, cpu, priority = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps({"forged": forged, "concurrent": concurrent}[mode](cpu, priority)))
