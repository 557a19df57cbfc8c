"""The change between two groups of runs as the Mann-Whitney U test sees it.

A rank test and a change of the mean can disagree: one slow outlier in the
baseline lowers the change of the mean while the ranks say every new run is
slower. So the change is the test's own estimate and interval:

- the Hodges-Lehmann estimate: the median of all pairwise differences
  new - baseline (of the logarithms for a relative change, i.e. the median of
  all ratios new / baseline), the shift the rank test is built around;
- its distribution-free confidence interval (Lehmann; Hollander & Wolfe,
  Nonparametric Statistical Methods, 4.3; R's wilcox.test(conf.int = TRUE)):
  the shifts the two-sided test does not reject, which are an interval
  between two order statistics of the same pairwise differences.

The interval is the inversion of exactly the test whose p-value is reported
(the same null distribution: exact for small samples without ties, as scipy
chooses, else normal with scipy's tie and continuity corrections, the tie
term taken from the pooled groups as for the p-value), so at any level L the
interval excludes 0 exactly when p < 1 - L. Its assumption is the test's: the
groups differ by a shift (of the logarithms: by a factor). Large groups never
materialise their n1 x n2 differences; the order statistics are selected
among them (Floyd-Rivest style sampling of pivots, counted with searchsorted).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

EXACT_MAX_SMALLER_GROUP = 8  # scipy's choice for an exact Mann-Whitney p-value (without ties)
MATERIALISED_MAX = 1 << 16  # pairwise differences materialised when they are this few
GATHER_MAX = 1 << 14  # differences a bracket may hold to be gathered
PIVOT_SAMPLE = 1 << 12  # differences sampled for the first brackets


@dataclass(frozen=True)
class RankTest:
    """The two-sided Mann-Whitney U test of one group against another."""

    n1: int  # the group compared
    n2: int  # the reference (baseline)
    p_value: float
    exact: bool  # exact null distribution, else normal with tie and continuity corrections
    tie_term: float  # sum of t^3 - t over the groups of equal values in the pooled runs

    def critical_count(self, level: float) -> int:
        """The largest count c of differences below 0 (or above it) at which the test
        rejects at 1 - level; -1 when no count can reach that level (too few runs)."""
        return _critical_count(self.n1, self.n2, self.exact, self.tie_term, level)


@functools.lru_cache(maxsize=4096)  # a comparison of many groups has a few sizes and levels
def _critical_count(n1: int, n2: int, exact: bool, tie_term: float, level: float) -> int:
    alpha = 1 - level
    total = n1 * n2
    if exact:
        lower_tail = _exact_lower_tail(n1, n2, total // 2)
        rejected = np.flatnonzero(2 * lower_tail < alpha)
        return int(rejected[-1]) if len(rejected) else -1
    from scipy.special import ndtri  # the normal quantile (scipy.stats.norm is slower)

    n = n1 + n2
    # (all values equal: 0, perhaps a rounding below it)
    sd = math.sqrt(max(0.0, n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))))
    # scipy: p = 2 * sf((|U - total/2| - 0.5) / sd); rejected while U < this bound
    bound = total / 2 - 0.5 + float(ndtri(alpha / 2)) * sd
    return max(-1, math.ceil(bound) - 1)


def rank_tests(groups: Sequence[np.ndarray], reference: np.ndarray) -> list[RankTest]:
    """The test of each group against the reference. Groups of one size and method
    share one vectorised scipy call (a call costs about a millisecond, which is most
    of the time of a comparison of many configurations)."""
    from scipy.stats import mannwhitneyu

    plans: dict[int, tuple[bool, float]] = {}  # group -> (exact, tie term)
    for members in by_size(groups).values():
        plans.update(_plan(groups, members, reference))
    batches: dict[tuple[int, bool], list[int]] = {}
    for i, values in enumerate(groups):
        batches.setdefault((len(values), plans[i][0]), []).append(i)
    p_values = np.empty(len(groups))
    for (_, exact), members in batches.items():
        p_values[members] = mannwhitneyu(np.stack([groups[i] for i in members]),
                                         reference[None, :], axis=1, alternative="two-sided",
                                         method="exact" if exact else "asymptotic").pvalue
    return [RankTest(len(values), len(reference), float(p), *plans[i])
            for i, (values, p) in enumerate(zip(groups, p_values, strict=True))]


def by_size(groups: Sequence[np.ndarray]) -> dict[int, list[int]]:
    """The indices of the groups of each size."""
    sizes: dict[int, list[int]] = {}
    for i, values in enumerate(groups):
        sizes.setdefault(len(values), []).append(i)
    return sizes


def _plan(groups: Sequence[np.ndarray], members: list[int],
          reference: np.ndarray) -> dict[int, tuple[bool, float]]:
    """(exact, tie term) of each of `members`, groups of one size: the pooled runs of
    all of them sorted at once; only those with ties are counted one by one."""
    pooled = np.sort(np.hstack([np.stack([groups[i] for i in members]),
                                np.broadcast_to(reference, (len(members), len(reference)))]),
                     axis=1)
    tied = (pooled[:, 1:] == pooled[:, :-1]).any(axis=1)
    exact = min(len(groups[members[0]]), len(reference)) <= EXACT_MAX_SMALLER_GROUP
    plans = {}
    for i, row, ties in zip(members, pooled, tied.tolist(), strict=True):
        if not ties:
            plans[i] = (exact, 0.0)
            continue
        _, counts = np.unique(row, return_counts=True)
        plans[i] = (False, float((counts.astype(np.float64) ** 3 - counts).sum()))
    return plans


def rank_test(values: np.ndarray, reference: np.ndarray) -> RankTest:
    return rank_tests([values], reference)[0]


@dataclass(frozen=True)
class Shift:
    """The Hodges-Lehmann change and its interval: in % for a relative change, else in
    the unit of the values; low and high are None where no interval reaches the level."""

    estimate: float
    low: float | None
    high: float | None

    def excludes_zero(self) -> bool:
        return self.low is not None and (self.low > 0 or self.high < 0)


def hodges_lehmann(values: np.ndarray, reference: np.ndarray, test: RankTest, level: float,
                   relative: bool) -> Shift:
    """The change of `values` against `reference` (both sorted) and its interval at
    `level`; relative: of the logarithms, as % (all values must be positive)."""
    new, base = (np.log(values), np.log(reference)) if relative else (values, reference)
    ranks = _wanted_ranks(len(new) * len(base), test.critical_count(level))
    return _shift(pairwise_order_statistics(base, new, ranks).tolist(), relative)


def hodges_lehmann_many(groups: Sequence[np.ndarray], reference: np.ndarray,
                        tests: Sequence[RankTest], level: float,
                        relative: Sequence[bool]) -> list[Shift]:
    """hodges_lehmann of each group against one reference. Groups of one size, critical
    count and kind whose differences are few share one vectorised pass (a fleet
    compared node by node has tens of thousands of groups of a few CPUs)."""
    out: list[Shift | None] = [None] * len(groups)
    batches: dict[tuple[int, int, bool], list[int]] = {}
    for i, (values, test, rel) in enumerate(zip(groups, tests, relative, strict=True)):
        if len(values) * len(reference) > MATERIALISED_MAX:
            out[i] = hodges_lehmann(values, reference, test, level, rel)
        else:
            batches.setdefault((len(values), test.critical_count(level), rel), []).append(i)
    for (size, c, rel), members in batches.items():
        new = np.stack([groups[i] for i in members])
        new, base = (np.log(new), np.log(reference)) if rel else (new, reference)
        picks = np.asarray(_wanted_ranks(size * len(base), c)) - 1
        # each row: the differences new[j] - base[i], as pairwise_order_statistics orders them
        differences = (new[:, :, None] - base[None, None, :]).reshape(len(members), -1)
        found = np.partition(differences, picks, axis=1)[:, picks]
        for i, row in zip(members, found.tolist(), strict=True):
            out[i] = _shift(row, rel)
    return out


def _wanted_ranks(total: int, critical: int) -> list[int]:
    """The order statistics of `total` differences that give the estimate (the median:
    one, or the mean of two) and, if the test can reject at all, the interval's ends."""
    middle = [(total + 1) // 2, total // 2 + 1]
    return middle + ([critical + 1, total - critical] if critical >= 0 else [])


def _shift(found: list[float], relative: bool) -> Shift:
    """The Shift of the order statistics _wanted_ranks asked for."""
    out = [(found[0] + found[1]) / 2, *found[2:]]
    if relative:
        out = [100 * math.expm1(v) for v in out]
    return Shift(out[0], *(out[1:] or [None, None]))


def pairwise_order_statistics(a: np.ndarray, b: np.ndarray, ranks: list[int]) -> np.ndarray:
    """The ranks-th smallest (1-based) of the differences b[j] - a[i] over all pairs;
    a and b sorted."""
    if len(a) * len(b) <= MATERIALISED_MAX:
        picks = np.asarray(ranks) - 1
        return np.partition(np.subtract.outer(b, a).ravel(), picks)[picks]
    found = _Selection(a, b).find(sorted(set(ranks)))
    return np.array([found[k] for k in ranks])


class _Selection:
    """Order statistics of the differences b[j] - a[i] without materialising them.

    Each wanted rank k has a bracket (low, high] of values holding the k-th
    difference, known by the count of differences <= each end (searchsorted per
    row, which also says which differences of each row lie inside). It starts
    around k's place in a small sample of the differences, with a margin; then
    the count is interpolated linearly inside the bracket and two new ends are
    counted about GATHER_MAX / 2 differences either side of the estimate, until
    the bracket holds few enough differences to gather and partition. A bracket
    whose ends are adjacent floats holds only ties: its high end is the answer.
    Pivots are random; the result is not."""

    def __init__(self, a: np.ndarray, b: np.ndarray):
        self.a, self.b = a, b
        self.total = len(a) * len(b)

    def count(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per value: the differences <= it, and per row j how many a[i] give a larger
        one (so a[:rows[j]] differ from b[j] by more than the value)."""
        rows = np.searchsorted(self.a, (self.b[None, :] - values[:, None]).ravel(),
                               side="left").reshape(len(values), len(self.b))
        return self.total - rows.sum(axis=1), rows

    def find(self, ranks: list[int]) -> dict[int, float]:
        rng = np.random.default_rng(0)
        sample = self.b[rng.integers(0, len(self.b), PIVOT_SAMPLE)] \
            - self.a[rng.integers(0, len(self.a), PIVOT_SAMPLE)]
        places = set()
        for k in ranks:
            fraction = k / self.total
            margin = 4 * math.sqrt(PIVOT_SAMPLE * fraction * (1 - fraction)) + 2
            places |= {max(0, int(fraction * PIVOT_SAMPLE - margin)),
                       min(PIVOT_SAMPLE - 1, int(fraction * PIVOT_SAMPLE + margin))}
        places = sorted(places)
        smallest, largest = self.b[0] - self.a[-1], self.b[-1] - self.a[0]
        # value -> (differences <= value, rows); -inf and the largest difference
        # bound every bracket
        ends = {-math.inf: (0, np.full(len(self.b), len(self.a))),
                largest: (self.total, np.zeros(len(self.b), np.int64))}
        brackets = dict.fromkeys(ranks, (-math.inf, largest))
        sizes = dict.fromkeys(ranks, self.total)
        pivots = np.partition(sample, places)[places].tolist()
        found: dict[int, float] = {}
        while pivots:
            values = np.array(sorted({v for v in pivots if v not in ends}))
            counts, rows = self.count(values)
            ends.update(zip(values.tolist(), zip(counts.tolist(), rows, strict=True),
                            strict=True))
            for k, (low, high) in brackets.items():
                for value in ends:  # the closest counted values either side of the k-th
                    if low < value < high:
                        low, high = (value, high) if ends[value][0] < k else (low, value)
                brackets[k] = (low, high)
            pivots = []
            for (low, high), group in _by_bracket(brackets).items():
                under, size = ends[low][0], ends[high][0] - ends[low][0]
                if low == -math.inf and smallest not in ends:
                    pivots.append(smallest)  # the sample missed the smallest ranks
                elif low == -math.inf or np.nextafter(low, high) == high:
                    # Nothing lies between the ends: the bracket holds ties, any of them
                    # is the answer (a difference, not the interpolated end).
                    start, stop = ends[high][1], ends[low][1]
                    j = int(np.flatnonzero(stop > start)[0])
                    found.update(dict.fromkeys(group, float(self.b[j] - self.a[start[j]])))
                    for k in group:
                        del brackets[k]
                elif size > GATHER_MAX:
                    # Where the ranks would be if the bracket's differences were spread
                    # evenly, with ends a quarter of GATHER_MAX beyond; halving as well
                    # where the last round did not halve the bracket.
                    step = (high - low) / size
                    for first, last in _clusters(group, GATHER_MAX / 2):
                        pivots += [low + (first - under - GATHER_MAX / 4) * step,
                                   low + (last - under + GATHER_MAX / 4) * step]
                    if size > sizes[group[0]] / 2:
                        pivots.append((low + high) / 2)
                    sizes.update(dict.fromkeys(group, size))
            pivots = [v for v in pivots if math.isfinite(v)]
        for (low, high), group in _by_bracket(brackets).items():
            values = self.inside(ends[high][1], ends[low][1])
            picks = np.array(group) - ends[low][0] - 1
            found.update(zip(group, np.partition(values, picks)[picks].tolist(), strict=True))
        return found

    def inside(self, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
        """The differences b[j] - a[start[j]:stop[j]] of every row j."""
        widths = stop - start
        rows = np.repeat(np.arange(len(self.b)), widths)
        columns = np.arange(widths.sum()) - np.repeat(np.cumsum(widths) - widths - start, widths)
        return self.b[rows] - self.a[columns]


def _clusters(ranks: list[int], gap: float) -> list[tuple[int, int]]:
    """Sorted ranks as (first, last) of runs whose neighbours are closer than gap."""
    runs = [[ranks[0], ranks[0]]]
    for k in ranks[1:]:
        if k - runs[-1][1] < gap:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    return [(first, last) for first, last in runs]


def _by_bracket(brackets: dict[int, tuple[float, float]]) -> dict[tuple[float, float], list[int]]:
    groups: dict[tuple[float, float], list[int]] = {}
    for k, bracket in brackets.items():
        groups.setdefault(bracket, []).append(k)
    return groups


def _exact_lower_tail(n1: int, n2: int, upto: int) -> np.ndarray:
    """P(U <= u) for u = 0..upto when both groups come from one distribution (no
    ties): the coefficients of the Gaussian binomial [n1 + n2 choose n1]_q,
    i.e. the product over i = 1..min(n1, n2) of (1 - q^(max + i)) / (1 - q^i)."""
    small, large = min(n1, n2), max(n1, n2)
    counts = np.zeros(upto + 1)
    counts[0] = 1.0
    for i in range(1, small + 1):
        if large + i <= upto:
            counts[large + i:] -= counts[:upto + 1 - large - i].copy()
        # dividing by (1 - q^i) is a running sum over every i-th coefficient
        padded = np.concatenate([counts, np.zeros(-len(counts) % i)])
        counts = padded.reshape(-1, i).cumsum(axis=0).ravel()[:upto + 1]
    return np.cumsum(counts) / math.comb(n1 + n2, n1)
