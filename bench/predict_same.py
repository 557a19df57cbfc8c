"""predict() results at about 2^20 processes as JSON lines, to compare two checkouts.

The simulation's results must not change when the engine gets faster: run this
in both (each with its own extension built in place) and compare the outputs.

    (cd ../main-copy && PYTHONPATH=src python $OLDPWD/bench/predict_same.py) > main.jsonl
    PYTHONPATH=src python bench/predict_same.py > now.jsonl
    cmp main.jsonl now.jsonl
"""

from __future__ import annotations

import json
import sys

from noisescope.analysis.predict import LogGP, predict, synthetic_trace

CASES = [
    ("250Hz:2us+1Hz:200us", {"procs": [1 << 20], "seeds": 3}),
    ("250Hz:2us+1Hz:200us", {"procs": [1_000_000], "seeds": 2}),  # not a power of two
    ("1kHz:10us+10Hz:1ms", {"procs": [1 << 20], "seeds": 2, "collective": "barrier",
                            "compute_ns": 0, "iterations": 3}),
    ("100Hz:250us", {"procs": [1 << 20], "seeds": 2, "sync_noise": True}),
    ("2kHz:5us", {"procs": [1 << 20], "seeds": 2, "collective": "none"}),
    # two traces, a gap that binds (g > 2 o), 4 KiB messages
    ([synthetic_trace("250Hz:2us+1Hz:200us", seed=2), synthetic_trace("1kHz:3us", seed=3)],
     {"procs": [(1 << 20) + 12345], "seeds": 2, "loggp": LogGP(gap_ns=4000),
      "message_bytes": 4096}),
]


def main() -> int:
    for noise, options in CASES:
        options = dict(options)
        result = predict(noise, options.pop("procs"), **options)
        print(json.dumps({"points": [p.to_dict() for p in result.points],
                          "knees": [k.to_dict() for k in result.knees]}, sort_keys=True),
              flush=True)
        print(f"{result.simulated_seconds:.2f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
