"""The Hodges-Lehmann change and the Mann-Whitney interval, against brute force and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from noisescope.analysis import shift
from noisescope.analysis.shift import hodges_lehmann, pairwise_order_statistics, rank_test


def sorted_differences(a, b):
    return np.sort(np.subtract.outer(b, a).ravel())


@pytest.mark.parametrize("kind", ["continuous", "ties", "outliers"])
def test_order_statistics_selected_without_materialising_are_exact(monkeypatch, kind):
    # Tiny limits force several rounds of pivots on groups brute force can still check.
    monkeypatch.setattr(shift, "MATERIALISED_MAX", 200)
    monkeypatch.setattr(shift, "GATHER_MAX", 100)
    monkeypatch.setattr(shift, "PIVOT_SAMPLE", 64)
    rng = np.random.default_rng(7)
    for _ in range(20):
        n1, n2 = rng.integers(20, 400, 2)
        if kind == "ties":
            a, b = rng.integers(0, 6, n1).astype(float), rng.integers(0, 6, n2).astype(float)
        else:
            a, b = rng.lognormal(0, 1, n1), rng.lognormal(0.2, 1, n2)
            if kind == "outliers":
                a[:3], b[-2:] = 1e9, -1e9
        a, b = np.sort(a), np.sort(b)
        every = sorted_differences(a, b)
        ranks = [1, len(every), *rng.integers(1, len(every) + 1, 6).tolist()]
        assert pairwise_order_statistics(a, b, ranks).tolist() == every[np.array(ranks) - 1] \
            .tolist()


def test_order_statistics_of_large_groups_are_exact():
    rng = np.random.default_rng(1)
    a, b = np.sort(rng.normal(0, 1, 2000)), np.sort(rng.normal(0.1, 1, 3000))
    every = sorted_differences(a, b)
    ranks = [1, 3_000_000, 3_000_001, 2_900_000, 3_100_000, len(every)]
    assert pairwise_order_statistics(a, b, ranks).tolist() == every[np.array(ranks) - 1].tolist()


def test_exact_null_distribution_is_scipys():
    rng = np.random.default_rng(2)
    for n1 in range(1, 9):
        for n2 in (1, 3, 8, 15):
            x, y = rng.normal(size=n1), rng.normal(0.5, 1, n2)
            test = rank_test(x, y)
            assert test.exact
            u = mannwhitneyu(x, y).statistic
            tail = shift._exact_lower_tail(n1, n2, n1 * n2 // 2)
            assert min(1.0, 2 * tail[int(min(u, n1 * n2 - u))]) == pytest.approx(test.p_value)


@pytest.mark.parametrize("sizes, ties", [((5, 7), False), ((8, 30), False), ((10, 10), False),
                                         ((25, 40), False), ((12, 15), True), ((60, 50), True)])
def test_the_interval_excludes_zero_exactly_where_the_test_rejects(sizes, ties):
    """The interval is the test inverted: at any level L it excludes 0 exactly when
    the reported p-value is below 1 - L (exact and normal null distributions)."""
    rng = np.random.default_rng(sum(sizes))
    agreed = rejected = 0
    for trial in range(150):
        base = rng.lognormal(0, 0.1, sizes[0])
        new = rng.lognormal(rng.choice([0, 0.05, 0.1]), 0.1, sizes[1])
        if ties:  # ties inside the groups, none across them (no difference is exactly 0)
            base, new = np.round(base, 1) + 0.01, np.round(new, 1)
        test = rank_test(new, base)
        for level in (0.9, 0.95, 0.99):
            change = hodges_lehmann(np.sort(new), np.sort(base), test, level, relative=True)
            excludes = change.low is not None and (change.low > 0 or change.high < 0)
            assert excludes == (test.p_value < 1 - level), (trial, level, test, change)
            rejected += excludes
            agreed += 1
    assert 20 < rejected < agreed - 20  # both sides of the edge were tried


def test_hodges_lehmann_is_the_median_ratio_or_difference():
    rng = np.random.default_rng(4)
    base, new = np.sort(rng.lognormal(0, 0.2, 9)), np.sort(rng.lognormal(0.1, 0.2, 12))
    test = rank_test(new, base)
    ratios = np.divide.outer(new, base).ravel()
    relative = hodges_lehmann(new, base, test, 0.95, relative=True)
    assert relative.estimate == pytest.approx(100 * (np.median(ratios) - 1))
    absolute = hodges_lehmann(new, base, test, 0.95, relative=False)
    assert absolute.estimate == pytest.approx(np.median(np.subtract.outer(new, base)))
    assert absolute.low <= absolute.estimate <= absolute.high


def test_no_interval_where_no_count_reaches_the_level():
    """3 runs against 3: the smallest two-sided p-value is 0.1, so no 95% interval
    excludes anything; there is none rather than an invented one."""
    base, new = np.array([1.0, 1.1, 1.2]), np.array([2.0, 2.1, 2.2])
    test = rank_test(new, base)
    assert test.p_value == pytest.approx(0.1)
    change = hodges_lehmann(new, base, test, 0.95, relative=False)
    assert change.low is None and change.high is None and change.estimate == pytest.approx(1.0)
    assert not change.excludes_zero()
    assert hodges_lehmann(new, base, test, 0.85, relative=False).excludes_zero()


def test_many_groups_at_once_give_each_group_s_own_tests_and_changes(monkeypatch):
    """rank_tests and hodges_lehmann_many, vectorised over groups of one size (a fleet
    compared node by node), give what each group gets alone: groups of several sizes,
    with ties and without, relative and not, and some too large to materialise."""
    monkeypatch.setattr(shift, "MATERIALISED_MAX", 300)
    rng = np.random.default_rng(11)
    base = np.sort(rng.lognormal(0, 0.2, 12))
    groups = []
    for i in range(120):
        values = rng.lognormal(rng.choice([0, 0.3]), 0.2, rng.choice([2, 4, 4, 30]))
        if i % 5 == 0:  # ties: within the group and with the baseline
            values = np.concatenate([values[:-1], base[:1]])
            values[0] = values[-1]
        groups.append(np.sort(values))
    relative = [i % 3 != 0 for i in range(len(groups))]
    tests = shift.rank_tests(groups, base)
    alone = [rank_test(g, base) for g in groups]
    assert tests == alone
    assert sum(not t.exact for t in tests) > 20 and sum(t.exact for t in tests) > 20
    many = shift.hodges_lehmann_many(groups, base, tests, 0.97, relative)
    assert many == [hodges_lehmann(g, base, t, 0.97, r)
                    for g, t, r in zip(groups, tests, relative, strict=True)]
    assert sum(s.low is None for s in many) > 0 and sum(s.excludes_zero() for s in many) > 5
