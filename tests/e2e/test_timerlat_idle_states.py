"""`noisescope timerlat` says whether it kept the CPUs out of deep idle states, and is right."""

from __future__ import annotations

import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

import noisescope
from noisescope.pmqos import DEVICE

from ..unit.test_bundle import validate
from .test_scan_cli import CLI


def system_latency_target() -> int:
    """The PM QoS CPU latency the kernel applies now (the strictest request held)."""
    return struct.unpack("i", Path(DEVICE).read_bytes()[:4])[0]


def timerlat_reading_the_target(out, *extra) -> tuple[subprocess.CompletedProcess, int]:
    """A 2 s timerlat run; the system's latency target read in its middle."""
    proc = subprocess.Popen([*CLI, "timerlat", "--cpus", "0", "-D", "2s", "--no-trace", "-q",
                             "-o", str(out), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.2)
    during = system_latency_target()
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), during


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(DEVICE),
                    reason=f"needs root and {DEVICE}")
def test_idle_states_are_left_alone_by_default_and_held_on_request(tmp_path):
    before = system_latency_target()
    assert before > 0, "another process holds the CPUs out of idle: nothing can be told apart"

    done, during = timerlat_reading_the_target(tmp_path / "default")
    assert done.returncode == 0, done.stderr
    assert during == before  # read-only by default
    assert "idle states: not held" in " ".join(done.stdout.split())
    bundle = noisescope.load(tmp_path / "default")
    validate(bundle.manifest)
    assert bundle.manifest["privileges"]["dma_latency"] == "not held"
    assert bundle.parameters["dma_latency_us"] is None

    done, during = timerlat_reading_the_target(tmp_path / "held", "--dma-latency", "0")
    assert done.returncode == 0, done.stderr
    assert during == 0 and system_latency_target() == before  # held, then released
    assert "idle states: held at 0 us exit latency" in " ".join(done.stdout.split())
    bundle = noisescope.load(tmp_path / "held")
    assert bundle.manifest["privileges"]["dma_latency"] == "0 us while measuring"
    assert bundle.parameters["dma_latency_us"] == 0
    shown = subprocess.run([*CLI, "show", str(tmp_path / "held")], capture_output=True, text=True,
                           timeout=60)
    assert "idle states: held at 0 us exit latency" in " ".join(shown.stdout.split())
