"""The rig's fixtures: one boot per kernel for the whole session.

Every test here is marked `rig` (run them alone with `pytest -m rig`, leave
them out with `-m "not rig"`). Without QEMU, busybox-static or cpio, or
without the core-scheduling kernel (NOISESCOPE_RIG_DIR, or ../shared/rig),
they are skipped with the reason; with NOISESCOPE_RIG=require (CI sets it)
anything but a missing rig kernel folder fails instead, so CI cannot pass
by skipping what it installs itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from .guest import (
    HERE,
    GuestHung,
    GuestRun,
    Kernel,
    RigError,
    Step,
    boot,
    debian_rt_kernel,
    missing_tools,
    rig_kernel,
    steps_left,
)
from .plan import rig_kernel_steps, rt_kernel_steps

GUEST_OUT = Path("/run/out")  # the output share, as the guest sees it
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "noisescope" / "rig"
BOOTS = 3  # a guest that hangs this many times has its tests skipped


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.rig)


def _required() -> bool:
    return os.environ.get("NOISESCOPE_RIG") == "require"


def _unavailable(reason: str, *, always_skip: bool = False):
    if _required() and not always_skip:
        pytest.fail(f"rig required (NOISESCOPE_RIG=require) but unavailable: {reason}",
                    pytrace=False)
    pytest.skip(f"rig: {reason}")


def available_kernel(kernel_of: Callable[[], Kernel]) -> Kernel:
    """The kernel, once the host can boot it (else the test is skipped, or
    fails under NOISESCOPE_RIG=require)."""
    reason = missing_tools()
    if reason:
        _unavailable(reason)
    try:
        return kernel_of()
    except RigError as error:
        _unavailable(str(error), always_skip="no rig kernel" in str(error))
        raise  # not reached: the line above skips or fails


def boot_or_fail(kernel_of: Callable[[], Kernel], steps_of: Callable[[Path], list[Step]],
                 out: Path) -> GuestRun:
    """The guest's run; a guest that hangs is booted again (in again/ of the
    last boot's folder) for the steps that did not end (`steps_left`), with a
    warning that keeps the hang's console tail, up to BOOTS boots; the run
    returned holds every boot's steps. Under TCG with a thread per vCPU on a
    2-CPU host the guest freezes now and then (RCU stall reports with a CPU
    spinning in the kernel, mostly while tracing is switched on: one boot in
    three to one in two here, more under load; twice in a row in scan-all once);
    one thread for all vCPUs did not freeze but was 2x slower and timed out
    MPI's busy-polling ranks. BOOTS hangs skip the guest's tests with every
    console tail (the emulator's doing: the same commands pass on another
    boot); a panic or a rig error fails."""
    kernel = available_kernel(kernel_of)
    folder, earlier, hangs = out, None, []
    while True:
        steps = steps_of(folder)
        if earlier is not None:
            steps = steps_left(steps, earlier.ended())
        try:
            run = boot(kernel, steps, folder)
        except GuestHung as hang:
            hangs.append(str(hang))
            if len(hangs) == BOOTS:
                pytest.skip(f"rig: the emulated guest froze {BOOTS} times: "
                            + "\n(and before: ".join(reversed(hangs)) + ")" * (BOOTS - 1))
            warnings.warn(f"rig: booting again after a hang: {hang}", stacklevel=1)
            if hang.run is not None:
                hang.run.earlier, earlier = earlier, hang.run
            folder = folder / "again"
            folder.mkdir()  # steps_of may write into it (the rig compiles its workload there)
        except RigError as error:
            pytest.fail(f"rig: {error}" + (f"\n(it had hung before: {hangs[-1]})" if hangs else ""),
                        pytrace=False)
        else:
            run.earlier = earlier
            return run


@pytest.fixture(scope="session")
def rig_guest(tmp_path_factory) -> GuestRun:
    """The core-scheduling kernel (8 CPUs, SMT, 2 NUMA nodes, isolcpus=2,3
    nohz_full=2,3) after running plan.rig_kernel_steps."""
    out = tmp_path_factory.mktemp("rig-guest")

    def steps(folder: Path):
        compiled = folder / "workload"
        done = subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-o", str(compiled),
                               str(HERE / "workload.c")], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.fail(f"rig: the test workload does not compile: {done.stderr}", pytrace=False)
        return rig_kernel_steps(folder, GUEST_OUT / "workload")

    return boot_or_fail(rig_kernel, steps, out)


@pytest.fixture(scope="session")
def rt_guest(tmp_path_factory) -> GuestRun:
    """Debian's PREEMPT_RT kernel, downloaded once into the cache."""
    out = tmp_path_factory.mktemp("rt-guest")
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        _unavailable("apt-get and dpkg-deb fetch the Debian RT kernel; this is not a Debian system")
    return boot_or_fail(lambda: debian_rt_kernel(CACHE), lambda folder: rt_kernel_steps(), out)
