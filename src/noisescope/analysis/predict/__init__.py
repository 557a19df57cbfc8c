"""Predict what measured noise costs a bulk-synchronous application at scale.

    >>> from noisescope.analysis.predict import predict
    >>> result = predict("250Hz:2us+1Hz:200us", [1024, 1 << 20], compute_ns=1_000_000)
    >>> result.point(1024).slowdowns

Modules, in the order data flows: traces (noise sources), replay (charging
noise to busy windows), loggp (costs and collective schedules), orderstats
(the analytic cross-check and the knee), model (predict() and its result).
"""

from .loggp import LogGP
from .model import Prediction, PredictOptions, ScalePoint, predict, simulate
from .orderstats import Knee, expected_maximum
from .traces import (
           NoiseTrace,
           load_noise,
           read_trace_file,
           synthetic_trace,
           traces_from_bundle,
           write_trace_file,
)

__all__ = ["Knee", "LogGP", "NoiseTrace", "PredictOptions", "Prediction", "ScalePoint",
           "expected_maximum", "load_noise", "predict", "read_trace_file", "simulate",
           "synthetic_trace", "traces_from_bundle", "write_trace_file"]
