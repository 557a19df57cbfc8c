"""Statistics of `compare` checked against known answers (synthetic bundles)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from noisescope.analysis.compare import compare
from noisescope.bundle import Bundle
from noisescope.errors import UsageError
from noisescope.manifest import SCHEMA_VERSION
from noisescope.render.compare import markdown, to_csv, to_json
from noisescope.tables import Table


def bench_bundle(label: str, wall_s, *, workload="app", user_s=None, sys_s=None, status=None,
                 configuration="", metrics=None, complete=True, schema=SCHEMA_VERSION,
                 declared=None) -> Bundle:
    wall = np.asarray(wall_s, float)
    n = len(wall)
    columns = {
        "workload": np.array([workload] * n, object),
        "configuration": np.array([configuration] * n, object),
        "warmup": np.zeros(n, bool),
        "status": np.array(status or ["ok"] * n, object),
        "wall_ns": np.rint(wall * 1e9).astype(np.int64),
        "user_ns": np.rint(np.asarray(user_s if user_s is not None else wall * 0.9) * 1e9)
        .astype(np.int64),
        "sys_ns": np.rint(np.asarray(sys_s if sys_s is not None else wall * 0.1) * 1e9)
        .astype(np.int64),
        "system_context_switches_per_s": np.full(n, 1000.0),
    }
    for name, values in (metrics or {}).items():
        columns[f"metric_{name}"] = np.asarray(values, float)
    manifest = {"schema_version": schema, "kind": "bench", "tool": {"name": "noisescope",
                "version": "0.1.0"}, "argv": [], "label": label,
                "started_utc": "2026-01-01T00:00:00Z", "complete": complete,
                "parameters": {"workloads": [{"name": workload, "metrics": declared or [
                    {"name": m, "pattern": "x", "better": "higher"} for m in metrics or {}]}]},
                "summaries": {}, "warnings": [], "tables": {}}
    return Bundle(manifest, {"runs": Table(columns)})


def scan_bundle(label: str, noise_by_cpu: dict[int, float]) -> Bundle:
    rows = [{"cpu": cpu, "windows": 1, "measured_ns": 10**9, "run_delay_ns": 0,
             "noise_pct": pct, "detours_per_s": 500.0, "p99_ns": 20000.0, "max_ns": 90000,
             "iterations": 123} for cpu, pct in noise_by_cpu.items()]
    manifest = {"schema_version": SCHEMA_VERSION, "kind": "scan", "tool": {"name": "noisescope",
                "version": "0.1.0"}, "argv": [], "label": label,
                "started_utc": "2026-01-01T00:00:00Z", "complete": True, "parameters": {},
                "summaries": {"detour": rows, "ftq": [{"cpu": 0, "noise_pct": 1.0}]},
                "warnings": [], "tables": {}}
    return Bundle(manifest)


def wall_change(comparison, config, workload="app"):
    return comparison.row(workload, "wall_ns", config).change


def test_identical_distributions_are_significant_at_about_alpha():
    rng = np.random.default_rng(11)
    trials, hits = 300, 0
    for _ in range(trials):
        a, b = rng.normal(1.0, 0.01, 10), rng.normal(1.0, 0.01, 10)
        result = compare([bench_bundle("a", a), bench_bundle("b", b)], metrics=["wall_ns"])
        hits += wall_change(result, "b").significant
    # The Mann-Whitney test at n = 10 holds its level (about 4.3% at 0.05).
    assert 0.01 <= hits / trials <= 0.09


def test_a_five_percent_shift_with_one_percent_noise_is_significant():
    rng = np.random.default_rng(5)
    for _ in range(20):
        base = rng.normal(1.0, 0.01, 10)
        slower = rng.normal(1.05, 0.0105, 10)
        change = wall_change(compare([bench_bundle("base", base), bench_bundle("slow", slower)],
                                     metrics=["wall_ns"]), "slow")
        assert change.significant and change.verdict == "worse"
        assert 0 < change.ci_low < change.change < change.ci_high
        assert 2 < change.change < 8


def test_confidence_intervals_cover_the_true_change_at_about_their_level():
    """The new runs are the baseline's times 1.05 (a shift of the logarithms): the
    median ratio is 1.05, and 95% of the intervals should hold +5%."""
    rng = np.random.default_rng(2024)
    trials, covered = 400, 0
    for _ in range(trials):
        base = rng.normal(100.0, 1.0, 10)
        shifted = rng.normal(105.0, 1.05, 10)
        result = compare([bench_bundle("b", base), bench_bundle("s", shifted)],
                         metrics=["wall_ns"])
        assert result.confidence == 0.95  # one comparison: no adjustment
        change = wall_change(result, "s")
        covered += change.ci_low <= 5.0 <= change.ci_high
    assert 0.90 <= covered / trials <= 0.985  # nominal 0.95


def test_one_slow_outlier_in_the_baseline_does_not_turn_a_slowdown_into_better():
    """Every new run is slower than 10 of the 11 baseline runs; the mean of the
    baseline is higher only because of one 3 s run. The change of the mean said
    -5.6% "better" with p = 0.001; the rank test's own change says worse."""
    base = np.append(np.linspace(1.00, 1.09, 10), 3.0)
    new = np.linspace(1.10, 1.19, 10)
    change = wall_change(compare([bench_bundle("base", base), bench_bundle("new", new)],
                                 metrics=["wall_ns"]), "new")
    assert change.verdict == "worse" and change.significant
    assert 0 < change.ci_low <= change.change <= change.ci_high
    assert 5 < change.change < 15  # a typical new run against a typical baseline run (+10%)


def test_verdict_change_and_interval_tell_one_story_over_many_comparisons():
    """Whatever the data (outliers, shifts, ties, several comparisons corrected
    together): significant exactly where the interval excludes 0, on the side of the
    change and of the verdict."""
    rng = np.random.default_rng(13)
    seen = set()
    for trial in range(60):
        base = rng.lognormal(0, 0.05, 12)
        configs = [bench_bundle("base", base)]
        for i in range(4):
            values = rng.lognormal(rng.choice([-0.1, 0, 0.03, 0.1]), 0.05, 12)
            values[rng.integers(12)] *= rng.choice([1, 3, 0.3])  # an outlier, or none
            if trial % 3 == 0:
                values = np.round(values, 2)  # ties
            configs.append(bench_bundle(f"c{i}", values))
        result = compare(configs, metrics=["wall_ns", "user_ns"])
        for row in result.rows:
            c = row.change
            if c is None:
                continue
            excludes = c.ci_low > 0 or c.ci_high < 0
            assert c.significant == excludes == (c.q_value < result.alpha)
            assert c.ci_low <= c.change <= c.ci_high
            if c.significant:
                assert c.verdict == ("worse" if c.change > 0 else "better")
                assert np.sign(c.ci_low) == np.sign(c.ci_high) == np.sign(c.change)
            else:
                assert c.verdict == "not significant"
            seen.add(c.verdict)
    assert seen == {"worse", "better", "not significant"}


def test_intervals_are_adjusted_for_the_comparisons_found_significant():
    rng = np.random.default_rng(3)
    bundles = [bench_bundle("base", rng.normal(1, 0.01, 10)),
               bench_bundle("same", rng.normal(1, 0.01, 10)),
               bench_bundle("slow", rng.normal(1.1, 0.01, 10))]
    result = compare(bundles, metrics=["wall_ns", "user_ns"])
    tested = [r.change for r in result.rows if r.change]
    significant = sum(c.significant for c in tested)
    assert len(tested) == 4 and significant == 2  # slow's wall and user
    assert result.confidence == pytest.approx(1 - 0.05 * 2 / 4)


def test_benjamini_hochberg_over_all_comparisons_and_not_significant_stated():
    rng = np.random.default_rng(3)
    base = bench_bundle("base", rng.normal(1, 0.01, 10))
    same = bench_bundle("same", rng.normal(1, 0.01, 10))
    slow = bench_bundle("slow", rng.normal(1.1, 0.01, 10))
    result = compare([base, same, slow])
    changes = [r.change for r in result.rows if r.change]
    assert len(changes) == 8  # 4 default metrics x 2 configurations
    p = np.array([c.p_value for c in changes])
    q = np.array([c.q_value for c in changes])
    assert (q >= p - 1e-12).all() and (q <= 1).all()
    order = np.argsort(p)
    assert (np.diff(q[order]) >= -1e-12).all()  # BH keeps the order of the p-values
    assert wall_change(result, "same").verdict == "not significant"
    assert not wall_change(result, "same").significant
    assert wall_change(result, "slow").verdict == "worse"


def test_user_metrics_direction_and_missing_values():
    rng = np.random.default_rng(8)
    base = bench_bundle("base", rng.normal(1, 0.01, 8), metrics={"tps": rng.normal(100, 1, 8)})
    values = rng.normal(110, 1, 8)
    values[2] = np.nan  # the pattern did not match in one run
    better = bench_bundle("tuned", rng.normal(1, 0.01, 8), metrics={"tps": values})
    result = compare([base, better])
    row = result.row("app", "metric_tps", "tuned")
    assert row.stats.n == 7
    assert row.change.verdict == "better"
    assert any(w.code.value == "metric_missing" and "tps" in w.message for w in result.warnings)


def test_failed_runs_are_left_out_with_a_warning():
    status = ["ok"] * 6 + ["failed", "timeout"]
    result = compare([bench_bundle("a", [1.0] * 8, status=status),
                      bench_bundle("b", np.linspace(1, 1.1, 8))])
    assert result.row("app", "wall_ns", "a").stats.n == 6
    excluded = [w for w in result.warnings if w.code.value == "run_excluded"]
    assert excluded and "1 failed, 1 timeout" in excluded[0].message


def test_an_interval_the_runs_are_too_few_for_is_unbounded_not_missing():
    """3 runs against 3: no count of the rank test reaches 95% (its smallest p is
    0.1), so every change is possible; the tables say so instead of leaving a gap."""
    result = compare([bench_bundle("a", [1.0, 1.1, 1.2]), bench_bundle("b", [2.0, 2.1, 2.2])],
                     metrics=["wall_ns"])
    change = wall_change(result, "b")
    assert change.ci_low is None and change.ci_high is None and change.change is not None
    assert change.verdict == "not significant"
    assert "| unbounded |" in markdown(result)
    assert '"ci_low":null' in to_json(result)


def test_too_few_runs_are_flagged_and_single_runs_not_tested():
    result = compare([bench_bundle("a", [1.0, 1.1, 1.05]), bench_bundle("b", [2.0])])
    change = wall_change(result, "b")
    assert change.verdict == "too few runs" and change.p_value is None
    assert any(w.code.value == "too_few_runs" for w in result.warnings)


def test_experiment_configurations_are_label_slash_name_and_baseline_selectable():
    a = bench_bundle("vm", [1.0, 1.01, 0.99, 1.02, 1.0], configuration="packed")
    b = bench_bundle("vm", [1.2, 1.21, 1.19, 1.22, 1.2], configuration="spread")
    result = compare([a, b], baseline="vm/spread")
    assert result.baseline == "vm/spread"
    assert result.configurations == ["vm/packed", "vm/spread"]
    assert wall_change(result, "vm/packed").verdict == "better"
    with pytest.raises(UsageError, match="no configuration is called 'spread'.*vm/packed"):
        compare([a, b], baseline="spread")


def test_scan_bundles_with_one_label_are_repetitions():
    quiet = [scan_bundle("quiet", {0: 0.50 + d, 1: 0.60 + d}) for d in (0.0, 0.01, -0.01, 0.02)]
    noisy = [scan_bundle("noisy", {0: 2.0 + d, 1: 2.1 + d}) for d in (0.0, 0.02, -0.01, 0.01)]
    result = compare(quiet + noisy)
    row = result.row("detour", "noise_pct", "noisy")
    assert row.stats.n == 4  # bundles, not CPUs or samples
    assert row.stats.mean == pytest.approx(2.055, abs=1e-9)  # mean over CPUs, then bundles
    assert {m.name for m in result.metrics("detour")} == {"noise_pct", "detours_per_s", "p99_ns",
                                                          "max_ns"}
    per_cpu = compare(quiet + noisy, per_cpu=True, metrics=["noise_pct"])
    assert per_cpu.row("detour cpu1", "noise_pct", "quiet").stats.mean == pytest.approx(0.605)


def test_bench_and_scan_bundles_compare_together():
    result = compare([bench_bundle("x", [1, 1.1, 1.2, 1.0, 1.1]), scan_bundle("x", {0: 1.0})])
    assert set(result.workloads) == {"app", "detour", "ftq"}


def test_metric_selection_errors_name_what_exists():
    with pytest.raises(UsageError, match="no bundle has metric wal_ns; choose from:.*wall_ns"):
        compare([bench_bundle("a", [1, 2, 3])], metrics=["wal_ns"])
    by_title = compare([bench_bundle("a", [1, 2, 3], metrics={"tps": [5, 6, 7]})],
                       metrics=["wall", "tps"])
    assert {m.name for m in by_title.metrics()} == {"wall_ns", "metric_tps"}
    everything = compare([bench_bundle("a", [1, 2, 3])], metrics=["all"])
    assert "system_context_switches_per_s" in {m.name for m in everything.metrics()}


def test_incompatible_schema_is_a_clear_error():
    old = bench_bundle("old", [1, 2, 3], schema=0)
    with pytest.raises(UsageError, match="bundle schema 0.*cannot compare"):
        compare([bench_bundle("a", [1, 2, 3]), old])


def test_results_are_reproducible_and_exports_agree():
    rng = np.random.default_rng(1)
    bundles = [bench_bundle("a", rng.normal(1, 0.02, 10)),
               bench_bundle("b", rng.normal(1.03, 0.02, 10))]
    first, second = compare(bundles), compare(bundles)
    assert first.to_dict() == second.to_dict()
    data = json.loads(to_json(first))
    row = next(r for r in data["rows"] if r["metric"] == "wall_ns" and r["configuration"] == "b")
    assert len(row["cdf"]["values"]) == 10 and row["cdf"]["probability"][-1] == 1.0
    assert row["cdf"]["values"] == sorted(row["cdf"]["values"])
    lines = to_csv(first).splitlines()
    assert lines[0].startswith("workload,metric,title,unit,better,configuration")
    assert len(lines) == 1 + len(first.rows)
    md = markdown(first)
    assert "| workload | a | b |" in md and "Perturbation" in md


def test_timerlat_and_imported_summaries_compare_by_cpu_or_thread():
    def imported(label, p99_by_thread):
        rows = [{"cpu": None, "thread": t, "interval_ns": 200000, "samples": 5000, "min_ns": 9000,
                 "avg_ns": p99 / 2, "max_ns": 3 * p99, "p99_ns": p99}
                for t, p99 in enumerate(p99_by_thread)]
        bundle = scan_bundle(label, {})
        bundle.manifest.update(kind="import", summaries={"timerlat": rows})
        return bundle

    bundles = [imported("quiet", [20000.0 + i, 22000.0]) for i in range(5)]
    bundles += [imported("busy", [90000.0 + i, 80000.0]) for i in range(5)]
    result = compare(bundles)
    assert {m.name for m in result.metrics("timerlat")} == {"avg_ns", "p99_ns", "max_ns"}
    row = result.row("timerlat", "p99_ns", "busy")
    assert row.stats.n == 5 and row.change.verdict == "worse"
    assert compare(bundles, per_cpu=True).row("timerlat thread1", "p99_ns", "busy").stats.mean \
        == 80000.0


def test_sibling_shares_change_in_percentage_points():
    """Sibling occupancy shares can be 0 in the baseline: their change is the
    difference of the means (pp), not a ratio; runs without a trace are left out."""
    rng = np.random.default_rng(1)
    alone, pair = bench_bundle("alone", [1.0] * 8), bench_bundle("pair", [1.0] * 8)
    alone.table("runs")._columns["sibling_same_pct"] = np.append(np.zeros(7), np.nan)
    pair.table("runs")._columns["sibling_same_pct"] = 40 + rng.normal(0, 2, 8)
    result = compare([alone, pair])
    base, change = result.row("app", "sibling_same_pct", "alone"), \
        result.row("app", "sibling_same_pct", "pair").change
    assert base.stats.n == 7 and base.stats.mean == 0
    assert change.change_unit == "pp" and change.ci_low < change.change < change.ci_high
    assert 35 < change.change < 45 and change.verdict == "higher"
    assert wall_change(result, "pair").change_unit == "%"
    assert " pp*)" in markdown(result)  # the paper table's cell: mean ± sd (+40.1 pp*)


def test_group_statistics_of_many_groups_are_each_group_s_own():
    from noisescope.analysis.compare import P99_MIN_RUNS, GroupStats

    rng = np.random.default_rng(5)
    groups = [rng.lognormal(0, 1, n) for n in (1, 4, 4, 2, P99_MIN_RUNS, 4, 1)]
    for values, stats in zip(groups, GroupStats.of_groups(groups), strict=True):
        assert stats.n == len(values)
        assert (stats.mean, stats.median, stats.min, stats.max) == pytest.approx(
            (values.mean(), np.median(values), values.min(), values.max()))
        assert stats.std == (pytest.approx(values.std(ddof=1)) if len(values) > 1 else None)
        assert stats.p99 == (pytest.approx(np.percentile(values, 99))
                             if len(values) >= P99_MIN_RUNS else None)
