"""Per-CPU summary statistics of each probe, as stored in the manifest."""

from __future__ import annotations

import numpy as np

from ..tables import Table

QUANTILES = {"p50_ns": 0.50, "p99_ns": 0.99, "p999_ns": 0.999}


def histogram_quantiles(lower: np.ndarray, upper: np.ndarray, counts: np.ndarray,
                        quantiles: list[float]) -> list[float]:
    """Quantiles of binned data, each reported as the geometric middle of its bin."""
    if counts.sum() == 0:
        return [float("nan")] * len(quantiles)
    cumulative = np.cumsum(counts)
    total = cumulative[-1]
    middle = np.sqrt(np.maximum(lower, 1).astype(np.float64) * upper.astype(np.float64))
    picks = np.searchsorted(cumulative, [q * total for q in quantiles], side="left")
    return [float(middle[min(i, len(middle) - 1)]) for i in picks]


def detour_summary(stats: dict, native: dict, durations_ns: np.ndarray, histogram: Table,
                   threshold_ns: int, ticks_per_ns: float) -> dict:
    measured_ns = stats["measured_ns"]
    iterations = int(histogram["count"].sum())
    lost_ns = native["lost_ticks"] / ticks_per_ns
    if native["overflow"] == 0 or len(durations_ns) == 0:
        source = "detours"
        values = ([float(np.percentile(durations_ns, q * 100, method="inverted_cdf"))
                   for q in QUANTILES.values()] if len(durations_ns) else [float("nan")] * 3)
    else:
        source = "histogram"
        above = histogram.filter(histogram["upper_ns"] > threshold_ns)
        values = histogram_quantiles(above["lower_ns"], above["upper_ns"], above["count"],
                                     list(QUANTILES.values()))
    seconds = measured_ns / 1e9
    return {
        **stats,
        "threshold_ns": int(threshold_ns),
        "detours": int(native["detours"]),
        "stored": int(native["stored"]),
        "overflow": int(native["overflow"]),
        "detours_per_s": native["detours"] / seconds if seconds else 0.0,
        "lost_ns": int(round(lost_ns)),
        "noise_pct": 100.0 * lost_ns / measured_ns if measured_ns else 0.0,
        **{name: _finite(v) for name, v in zip(QUANTILES, values, strict=False)},
        "max_ns": int(round(native["max_gap_ticks"] / ticks_per_ns)),
        "percentiles_from": source,
        "iterations": iterations,
        "resolution_cycles": int(native["resolution_ticks"]),
        "resolution_ns": native["resolution_ticks"] / ticks_per_ns,
        "mean_loop_cycles": measured_ns * ticks_per_ns / iterations if iterations else None,
        "max_gap_cycles": int(native["max_gap_ticks"]),
        "gaps_over_1000_cycles": int(native["hourglass_gaps"]),
    }


def ftq_summary(stats: dict, work: np.ndarray) -> dict:
    if len(work) == 0:
        return {**stats, "quanta": 0, "work_min": None, "work_mean": None, "work_max": None,
                "missed_quanta": 0, "noise_pct": None}
    best = int(work.max())
    mean = float(work.mean())
    return {
        **stats,
        "quanta": int(len(work)),
        "work_min": int(work.min()),
        "work_mean": mean,
        "work_max": best,
        "missed_quanta": int((work == 0).sum()),
        # The best quantum is the noise-free reference; the average shortfall
        # is the fraction of the CPU the noise took.
        "noise_pct": 100.0 * (1.0 - mean / best) if best else None,
    }


def fwq_summary(stats: dict, durations_ns: np.ndarray) -> dict:
    if len(durations_ns) == 0:
        return {**stats, "samples": 0, "duration_min_ns": None, "duration_mean_ns": None,
                "duration_max_ns": None, "noise_pct": None}
    fastest = int(durations_ns.min())
    mean = float(durations_ns.mean())
    return {
        **stats,
        "samples": int(len(durations_ns)),
        "duration_min_ns": fastest,
        "duration_mean_ns": mean,
        "duration_max_ns": int(durations_ns.max()),
        "noise_pct": 100.0 * (1.0 - fastest / mean) if mean else None,
    }


def _finite(value: float) -> float | None:
    return None if value is None or not np.isfinite(value) else float(value)
