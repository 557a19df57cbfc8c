"""Without a TSC the core reads CLOCK_MONOTONIC_RAW and everything still works.

Builds the native core with NS_FORCE_MONOTONIC (the code path of non-x86
machines) into a copy of the installed package and runs a short scan there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import noisescope

SOURCE = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not (SOURCE / "setup.py").exists(), reason="needs the source checkout")
def test_scan_with_the_portable_clock(tmp_path):
    build = tmp_path / "build"
    env = {**os.environ, "CFLAGS": "-DNS_FORCE_MONOTONIC"}
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(build),
                    "--build-temp", str(tmp_path / "tmp"), "--force"], cwd=SOURCE, env=env,
                   check=True, capture_output=True)
    package = tmp_path / "site" / "noisescope"
    shutil.copytree(Path(noisescope.__file__).parent, package,
                    ignore=shutil.ignore_patterns("_native*.so", "__pycache__"))
    for library in (build / "noisescope").glob("_native*.so"):
        shutil.copy(library, package)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = tmp_path / "bundle"
    done = subprocess.run([sys.executable, "-m", "noisescope", "scan", "--duration", "1s",
                           "--inject", "200Hz:50us@cpu0", "--cpus", "0", "-q", "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    bundle = noisescope.load(out)
    assert bundle.clock.counter == "monotonic_raw"
    assert bundle.clock.ticks_per_second == 1e9
    detour = bundle.summaries["detour"][0]
    found = detour["injections"]
    assert detour["iterations"] > 1_000_000 and 95 <= found["found_pct"] <= 100
    # each found injection sits inside its detour, so on average detours are longer
    assert found["detected_mean_ns"] >= found["injected_mean_ns"] >= 50_000
    # the Hourglass cut-off is a duration on this clock too (1 tick = 1 ns here)
    h = bundle.table("gap_histogram")
    assert detour["hourglass_ns"] == 1000 and detour["resolution_ticks"] >= 1
    assert h["count"][h["lower_ns"] >= 1000].sum() <= detour["hourglass_gaps"] \
        <= h["count"][h["upper_ns"] > 1000].sum()
    assert bundle.summaries["ftq"][0]["quanta"] == 1000
    assert bundle.summaries["fwq"][0]["samples"] > 500
