"""Per-CPU summary statistics of each probe, as stored in the manifest."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from ..tables import Table

QUANTILES = {"p50_ns": 0.50, "p99_ns": 0.99, "p999_ns": 0.999}
# A CPU's samples: an array, or (spooled) a function giving them batch by batch, in order
Samples = np.ndarray | Callable[[], Iterable[np.ndarray]]
DIGIT_BITS = 16  # exact_quantiles: bits of the values told apart per pass over them


def _batches(samples: Samples) -> Iterable[np.ndarray]:
    return samples() if callable(samples) else (samples,)


@dataclass(frozen=True)
class Totals:
    """Count, sum, smallest, largest and zeros of integer samples, in one pass."""

    count: int
    total: int
    smallest: int | None
    largest: int | None
    zeros: int

    @classmethod
    def of(cls, samples: Samples) -> Totals:
        count = total = zeros = 0
        smallest = largest = None
        for batch in _batches(samples):
            if not len(batch):
                continue
            count += len(batch)
            total += int(batch.sum(dtype=np.int64))
            zeros += int(np.count_nonzero(batch == 0))
            low, high = int(batch.min()), int(batch.max())
            smallest = low if smallest is None else min(smallest, low)
            largest = high if largest is None else max(largest, high)
        return cls(count, total, smallest, largest, zeros)

    @property
    def mean(self) -> float:
        return self.total / self.count


def inverted_cdf_index(n: int, quantile: float) -> int:
    """The sorted index np.percentile(values, 100 * quantile, method="inverted_cdf")
    picks among n values, computed as numpy does (its float steps included)."""
    virtual = n * (quantile * 100 / 100) - 1
    index = math.floor(virtual)
    return min(max(index if index == virtual else index + 1, 0), n - 1)


def exact_quantiles(samples: Samples, quantiles: list[float],
                    totals: Totals | None = None) -> list[float]:
    """The quantiles of non-negative integer samples exactly as
    np.percentile(..., method="inverted_cdf") gives them, in memory bounded by a
    batch: the sample of each quantile's rank is found digit by digit
    (DIGIT_BITS at a time, from the top), one pass over the batches per digit
    counting the samples that share the digits found so far."""
    totals = totals or Totals.of(samples)
    if not totals.count:
        return [float("nan")] * len(quantiles)
    n, base = totals.count, totals.smallest
    ranks = [inverted_cdf_index(n, q) for q in quantiles]
    span_bits = max(1, (totals.largest - base).bit_length())
    shift = -(-span_bits // DIGIT_BITS) * DIGIT_BITS
    prefixes = [0] * len(ranks)  # the digits found so far of each rank's sample
    while shift > 0:
        shift -= DIGIT_BITS
        counts = np.zeros((len(ranks), 1 << DIGIT_BITS), np.int64)
        for batch in _batches(samples):
            offsets = batch.astype(np.int64) - base
            for j, prefix in enumerate(prefixes):
                mine = offsets[(offsets >> (shift + DIGIT_BITS)) == prefix]
                counts[j] += np.bincount((mine >> shift) & ((1 << DIGIT_BITS) - 1),
                                         minlength=1 << DIGIT_BITS)
        for j in range(len(ranks)):
            cumulative = np.cumsum(counts[j])
            digit = int(np.searchsorted(cumulative, ranks[j], side="right"))
            ranks[j] -= int(cumulative[digit - 1]) if digit else 0
            prefixes[j] = (prefixes[j] << DIGIT_BITS) | digit
    return [float(base + prefix) for prefix in prefixes]


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


def detour_summary(stats: dict, native: dict, durations_ns: Samples, histogram: Table,
                   threshold_ns: int, hourglass_ns: int, ticks_per_ns: float) -> dict:
    """Ticks are those of the measurement clock (TSC cycles, or ns on the portable
    clock): kept raw only where named *_ticks, everything else in ns."""
    measured_ns = stats["measured_ns"]
    iterations = int(histogram["count"].sum())
    lost_ns = native["lost_ticks"] / ticks_per_ns
    totals = Totals.of(durations_ns)
    if native["overflow"] == 0 or totals.count == 0:
        source = "detours"
        values = exact_quantiles(durations_ns, list(QUANTILES.values()), totals)
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


def ftq_summary(stats: dict, work: Samples) -> dict:
    totals = Totals.of(work)
    if totals.count == 0:
        return {**stats, "quanta": 0, "work_min": None, "work_mean": None, "work_max": None,
                "missed_quanta": 0, "noise_pct": None}
    best = totals.largest
    mean = totals.mean
    return {
        **stats,
        "quanta": totals.count,
        "work_min": totals.smallest,
        "work_mean": mean,
        "work_max": best,
        "missed_quanta": totals.zeros,
        # The best quantum is the noise-free reference; the average shortfall
        # is the fraction of the CPU the noise took.
        "noise_pct": 100.0 * (1.0 - mean / best) if best else None,
    }


def fwq_summary(stats: dict, durations_ns: Samples) -> dict:
    totals = Totals.of(durations_ns)
    if totals.count == 0:
        return {**stats, "samples": 0, "duration_min_ns": None, "duration_mean_ns": None,
                "duration_max_ns": None, "noise_pct": None}
    fastest = totals.smallest
    mean = totals.mean
    return {
        **stats,
        "samples": totals.count,
        "duration_min_ns": fastest,
        "duration_mean_ns": mean,
        "duration_max_ns": totals.largest,
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
                     histogram_overflow: int | None, latencies_ns: Samples | None = None,
                     stored: int = 0, overflow: int = 0, avg_ns: float | None = None) -> dict:
    """Timer-latency figures of one CPU (cyclictest's min/avg/max and more).

    Percentiles come from the complete series when there is one, else from
    the 1 us histogram. The keys are shared by the native probe and by
    imported cyclictest results, so that both line up in comparisons; None
    means the source does not say."""
    totals = Totals.of(latencies_ns) if latencies_ns is not None else None
    if totals is not None and totals.count:
        source = "series"
        values = exact_quantiles(latencies_ns, list(QUANTILES.values()), totals)
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
