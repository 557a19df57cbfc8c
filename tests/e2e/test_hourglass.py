"""The Hourglass figures are durations, whatever ticks the measurement clock counts."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

import noisescope
from noisescope.probes.detour import HOURGLASS_NS

from ..unit.test_bundle import validate


def test_hourglass_counts_the_gaps_longer_than_its_cut_off_in_ns(tmp_path):
    """The sampler counts the gaps above the cut-off on its own, apart from the
    histogram of every gap: the count must lie between the gaps of the buckets
    wholly above the cut-off and those of the buckets reaching above it. A cut-off
    of 1000 TSC ticks (about 400 ns here) also counts the hundreds of 400-1000 ns
    gaps a loop sees in a second."""
    out = tmp_path / "b"
    done = subprocess.run([sys.executable, "-m", "noisescope", "scan", "--probes", "detour",
                           "--duration", "1s", "--cpus", "0", "-q", "--no-report", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    s = bundle.summaries["detour"][0]
    assert s["hourglass_ns"] == HOURGLASS_NS == bundle.parameters["hourglass_ns"]
    h = bundle.table("gap_histogram")
    # lower_ns is floored and upper_ns ceiled from ticks: a bucket is wholly above the
    # cut-off when it starts at or after it, and reaches above it when it ends after it.
    above = int(h["count"][h["lower_ns"] >= HOURGLASS_NS].sum())
    reaching = int(h["count"][h["upper_ns"] > HOURGLASS_NS].sum())
    assert 0 < above <= s["hourglass_gaps"] <= reaching, (above, s["hourglass_gaps"], reaching)
    # mean gap: one loop iteration, tens of ns. The resolution (the smallest step the loop
    # saw the clock take) may exceed it: a TSC that moves in steps longer than an iteration
    # (20 ticks, 7.7 ns, on one of this project's VMs, whose loop takes 7.6 ns) reads the
    # same value twice now and then. The resolution in ticks is the same in ns.
    assert 0 < s["mean_gap_ns"] < 1000 and 0 < s["resolution_ns"] < 1000
    ticks_per_ns = bundle.clock.ticks_per_ns
    assert np.isclose(s["resolution_ticks"] / ticks_per_ns, s["resolution_ns"])
    shown = subprocess.run([sys.executable, "-m", "noisescope", "show", str(out)],
                           capture_output=True, text=True, timeout=60).stdout
    assert "Hourglass (gaps between clock reads)" in shown and "gaps > 1 us" in shown
    assert "cyc" not in shown
