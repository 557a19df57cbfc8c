"""The native prediction engine gives what the numpy engine it replaced gave:
`bench/predict_same.py` (six cases at about 2^20 processes: allreduce, barrier,
no collective, co-scheduled noise, a size that is not a power of two, two
traces with a binding gap and 4 KiB messages) prints, byte for byte, what it
printed at 5728cd0, the last commit with the numpy engine
(tests/fixtures/predict/same-2p20-5728cd0.jsonl: run there with its own
extension built in place, 2026-12-06)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ROOT / "tests" / "fixtures" / "predict" / "same-2p20-5728cd0.jsonl"


def test_predictions_at_a_million_processes_are_those_of_the_numpy_engine():
    printed = subprocess.run([sys.executable, str(ROOT / "bench" / "predict_same.py")],
                             check=True, capture_output=True, text=True).stdout
    expected = EXPECTED.read_text()
    assert len(expected.splitlines()) == 6
    assert printed == expected
