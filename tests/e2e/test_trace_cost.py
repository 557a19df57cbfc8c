"""`scan --trace-cost`: tracing's own cost as interleaved pairs, with its interval; off by default."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np

import noisescope
from noisescope.trace.scanning import COST_PAIRS

from ..unit.test_bundle import validate
from .test_trace import needs_tracefs

CLI = [sys.executable, "-m", "noisescope"]


@needs_tracefs
def test_tracing_cost_is_measured_only_on_request_in_interleaved_pairs(tmp_path):
    out = tmp_path / "b"
    done = subprocess.run([*CLI, "scan", "--duration", "300ms", "--probes", "detour", "--cpus", "0",
                           "--trace-cost", "1200ms", "--no-report", "-o", str(out)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    cost = bundle.manifest["trace"]["cost"]
    assert cost["pairs"] == COST_PAIRS == len(cost["per_pair"]) and cost["run_ns"] == 100_000_000
    assert cost["confidence"] == 1 - 2 / 2 ** COST_PAIRS
    for name in ("noise_pct", "detours_per_s"):
        differences = [p[f"traced_{name}"] - p[f"untraced_{name}"] for p in cost["per_pair"]]
        low, high = cost[f"{name}_increase_interval"]
        assert cost[f"{name}_increase"] == np.median(differences)
        assert (low, high) == (min(differences), max(differences))
    # the pairs' traced runs left no events in the scan's own trace: one recording, the probe's
    assert [r["probe"] for r in bundle.manifest["trace"]["recordings"]] == ["detour"]
    text = " ".join(done.stdout.split())  # the line wraps at the terminal's width
    line = text[text.index("tracing cost:"):]
    assert re.search(r"noise [+-]\d+\.\d{3} percentage points \[[+-]\d+\.\d{3}, [+-]\d+\.\d{3}\]",
                     line), line
    assert f"median of {COST_PAIRS} interleaved pairs of 100 ms runs, 97% interval" in line
