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
                   threshold_ns: int, hourglass_ns: int, ticks_per_ns: float) -> dict:
    """Ticks are those of the measurement clock (TSC cycles, or ns on the portable
    clock): kept raw only where named *_ticks, everything else in ns."""
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
        "stored_before_loss": int(native["stored_before_loss"]),
        "detours_per_s": native["detours"] / seconds if seconds else 0.0,
        "lost_ns": int(round(lost_ns)),
        "noise_pct": 100.0 * lost_ns / measured_ns if measured_ns else 0.0,
        **{name: _finite(v) for name, v in zip(QUANTILES, values, strict=False)},
        "max_ns": int(round(native["max_gap_ticks"] / ticks_per_ns)),
        "percentiles_from": source,
        "iterations": iterations,
        "resolution_ticks": int(native["resolution_ticks"]),
        "resolution_ns": native["resolution_ticks"] / ticks_per_ns,
        # Hourglass: the average gap between two clock reads (one loop iteration),
        # and the gaps longer than hourglass_ns (max_ns is the longest)
        "mean_gap_ns": measured_ns / iterations if iterations else None,
        "hourglass_ns": int(hourglass_ns),
        "hourglass_gaps": int(native["hourglass_gaps"]),
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


def linear_histogram_quantiles(lower: np.ndarray, upper: np.ndarray, counts: np.ndarray,
                               quantiles: list[float], limit_ns: int | None = None,
                               ) -> list[float | None]:
    """Quantiles of data in linear buckets, each reported as its bucket's middle;
    None where it falls at or beyond `limit_ns` (the open-ended overflow bucket)."""
    counts = np.asarray(counts)
    if counts.sum() == 0:
        return [None] * len(quantiles)
    order = np.argsort(lower)
    lower, upper, cumulative = lower[order], upper[order], np.cumsum(counts[order])
    picks = np.searchsorted(cumulative, [q * cumulative[-1] for q in quantiles], side="left")
    values: list[float | None] = []
    for i in np.minimum(picks, len(lower) - 1):
        beyond = limit_ns is not None and lower[i] >= limit_ns
        values.append(None if beyond else (float(lower[i]) + float(upper[i])) / 2)
    return values


def timerlat_summary(stats: dict, *, interval_ns: int | None, samples: int, missed: int | None,
                     min_ns: float | None, max_ns: float | None, sum_ns: float | None,
                     histogram: Table | None, histogram_limit_ns: int | None,
                     histogram_overflow: int | None, latencies_ns: np.ndarray | None = None,
                     stored: int = 0, overflow: int = 0, avg_ns: float | None = None) -> dict:
    """Timer-latency figures of one CPU (cyclictest's min/avg/max and more).

    Percentiles come from the complete series when there is one, else from
    the 1 us histogram. The keys are shared by the native probe and by
    imported cyclictest results, so that both line up in comparisons; None
    means the source does not say."""
    if latencies_ns is not None and len(latencies_ns):
        source = "series"
        values = [float(np.percentile(latencies_ns, q * 100, method="inverted_cdf"))
                  for q in QUANTILES.values()]
    elif histogram is not None and histogram.rows:
        source = "histogram"
        values = linear_histogram_quantiles(histogram["lower_ns"], histogram["upper_ns"],
                                            histogram["count"], list(QUANTILES.values()),
                                            histogram_limit_ns)
    else:
        source, values = None, [None] * len(QUANTILES)
    if avg_ns is None and sum_ns is not None and samples:
        avg_ns = sum_ns / samples
    return {
        **stats,
        "interval_ns": interval_ns,
        "samples": int(samples),
        "missed": missed,
        "min_ns": None if not samples or min_ns is None else int(min_ns),
        "avg_ns": None if avg_ns is None else float(avg_ns),
        "max_ns": None if not samples or max_ns is None else int(max_ns),
        **{name: _finite(v) for name, v in zip(QUANTILES, values, strict=False)},
        "percentiles_from": source,
        "histogram_limit_ns": histogram_limit_ns,
        "histogram_overflow": histogram_overflow,
        "stored": int(stored),
        "overflow": int(overflow),
    }
