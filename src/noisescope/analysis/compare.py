"""Comparison of configurations, with statistics that fit noisy measurements.

The unit compared is a run, never a sample inside a run (samples inside a
run are autocorrelated):
- bench bundles: one value per successful, non-warm-up run and metric;
- bundles with per-CPU summaries (scan, timerlat, imported cyclictest,
  oslat, sysjitter, rtla): one value per bundle and metric, the mean over its CPUs
  (or CPU by CPU with per_cpu); bundles with the same label are repetitions.

A configuration is a bundle's label (or its directory name), joined with
the configuration name inside an experiment ("vm/packed"). For every
workload and metric, each configuration gets n, mean, standard deviation,
median, min, max (p99 from 100 runs on) and, against the baseline, one story
told by one test (analysis/shift.py): a two-sided Mann-Whitney U p-value,
its Hodges-Lehmann change (the median of the ratios new/baseline over all
pairs of runs, in %; a difference in the metric's unit where a value is <= 0,
and in percentage points for shares) and the test's own confidence interval
of that change; the Benjamini-Hochberg adjusted p-value (q) over all
comparisons made; and a verdict, "not significant" unless q < alpha.

The intervals are at the level 1 - alpha x max(R, 1) / m, for R significant
comparisons out of m (Benjamini & Yekutieli's false-coverage-rate intervals:
95% for a single comparison), which is the level at which the rank test's
interval excludes 0 exactly where q < alpha: a change is never called
significant with an interval that holds 0, nor the other way round.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..bundle import Bundle
from ..diagnostics import Code, Diagnostic
from ..errors import UsageError, option
from ..manifest import SCHEMA_VERSION
from .shift import RankTest, Shift, by_size, hodges_lehmann_many, rank_tests

ALPHA = 0.05
P99_MIN_RUNS = 100
FEW_RUNS = 5
LISTED_FEW = 5  # configurations with too few runs named one by one, per workload
READABLE_SCHEMAS = range(1, SCHEMA_VERSION + 1)


@dataclass(frozen=True)
class MetricInfo:
    name: str  # runs-table column or summary field (wall_ns, noise_pct, metric_tps)
    title: str  # for people (wall, noise %, tps)
    unit: str  # ns, KiB, /s, %, count or ""
    better: str | None = "lower"  # lower, higher or None (no direction)
    # Changes as differences (percentage points) rather than ratios: for shares
    # whose baseline can be 0.
    difference: bool = False


def _info(name: str, title: str, unit: str, better: str | None = "lower",
          difference: bool = False) -> MetricInfo:
    return MetricInfo(name, title, unit, better, difference)


# Runs-table columns compared for bench bundles; DEFAULT_RUN_METRICS unless asked for more.
RUN_METRICS = {m.name: m for m in (
    _info("wall_ns", "wall", "ns"),
    _info("user_ns", "user", "ns"),
    _info("sys_ns", "sys", "ns"),
    _info("system_context_switches_per_s", "system ctx sw/s", "/s"),
    _info("system_interrupts_per_s", "system irq/s", "/s"),
    _info("voluntary_switches", "voluntary switches", "count"),
    _info("involuntary_switches", "involuntary switches", "count"),
    _info("maxrss_kib", "max RSS", "KiB"),
    _info("minor_faults", "minor faults", "count"),
    _info("major_faults", "major faults", "count"),
    # SMT sibling occupancy (where traced): what the sibling of a workload CPU ran
    _info("sibling_same_pct", "sibling same %", "%", None, difference=True),
    _info("sibling_idle_pct", "sibling idle %", "%", None, difference=True),
    _info("sibling_foreign_pct", "sibling foreign %", "%", difference=True),
)}
DEFAULT_RUN_METRICS = ("wall_ns", "user_ns", "sys_ns", "system_context_switches_per_s",
                       "sibling_same_pct", "sibling_idle_pct", "sibling_foreign_pct")
PERTURBATION_METRICS = ("wall_ns", "user_ns", "sys_ns")

# Per-CPU summary fields compared by default, per probe; other probes (imported
# tools) use every numeric field that looks like noise or latency.
SUMMARY_METRICS = {
    "detour": ("noise_pct", "detours_per_s", "p99_ns", "max_ns"),
    "ftq": ("noise_pct",),
    "fwq": ("noise_pct",),
    "timerlat": ("avg_ns", "p99_ns", "max_ns"),
    "oslat": ("avg_ns", "p99_ns", "max_ns"),
    "osnoise": ("noise_pct", "max_single_ns", "irq_per_s", "thread_per_s"),  # imported rtla
}
_NOISE_FIELD = re.compile(r"(_pct|_per_s|^p\d+_ns|^(max|mean|avg|median)_ns)$")
_TITLES = {"noise_pct": "noise %", "detours_per_s": "detours/s", "p99_ns": "p99",
           "p999_ns": "p99.9", "p50_ns": "p50", "max_ns": "max", "avg_ns": "avg",
           "max_single_ns": "max single", "irq_per_s": "IRQs/s", "thread_per_s": "threads/s",
           "targeted_pct": "targeted %"}


def summary_metric(name: str) -> MetricInfo:
    unit = "ns" if name.endswith("_ns") else "%" if name.endswith("_pct") else \
        "/s" if name.endswith("_per_s") else ""
    return MetricInfo(name, _TITLES.get(name, name), unit, "lower")


@dataclass(frozen=True)
class GroupStats:
    n: int
    mean: float
    std: float | None  # sample standard deviation, None for n < 2
    median: float
    min: float
    max: float
    p99: float | None  # only from P99_MIN_RUNS runs on

    @classmethod
    def of(cls, values: np.ndarray) -> GroupStats:
        return cls.of_groups([values])[0]

    @classmethod
    def of_groups(cls, groups: Sequence[np.ndarray]) -> list[GroupStats]:
        """Each group's statistics; the groups of one size in one vectorised pass (a
        fleet compared node by node has tens of thousands of groups of a few CPUs)."""
        out: list[GroupStats | None] = [None] * len(groups)
        for n, members in by_size(groups).items():
            v = np.stack([groups[i] for i in members])
            none = [None] * len(members)
            columns = zip(v.mean(axis=1).tolist(),
                          v.std(axis=1, ddof=1).tolist() if n > 1 else none,
                          np.median(v, axis=1).tolist(), v.min(axis=1).tolist(),
                          v.max(axis=1).tolist(),
                          np.percentile(v, 99, axis=1).tolist() if n >= P99_MIN_RUNS else none,
                          strict=True)
            for i, stats in zip(members, columns, strict=True):
                out[i] = cls(n, *stats)
        return out

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Change:
    """A configuration against the baseline, for one workload and metric."""

    change: float | None  # Hodges-Lehmann estimate, in change_unit
    ci_low: float | None  # the rank test's interval of it (None: too few runs for its level)
    ci_high: float | None
    p_value: float | None  # two-sided Mann-Whitney U
    q_value: float | None  # Benjamini-Hochberg over all comparisons
    significant: bool  # q < alpha (and so the interval excludes 0)
    verdict: str  # "not significant", "worse", "better", "higher", "lower", "too few runs"
    # "%": relative (the median ratio new/baseline - 1); else a difference in the
    # metric's unit ("pp" for shares)
    change_unit: str = "%"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Row:
    workload: str
    metric: MetricInfo
    configuration: str
    stats: GroupStats
    change: Change | None  # None for the baseline, or where there is no baseline group
    values: np.ndarray = field(repr=False, compare=False)  # one per run (or bundle), sorted

    @property
    def is_baseline(self) -> bool:
        return self.change is None

    def cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """Empirical CDF: sorted values and the fraction of runs at or below each."""
        return self.values, np.arange(1, len(self.values) + 1) / len(self.values)

    def to_dict(self, with_cdf: bool = True) -> dict:
        data = {"workload": self.workload, "metric": self.metric.name,
                "title": self.metric.title, "unit": self.metric.unit,
                "better": self.metric.better, "configuration": self.configuration,
                "baseline": self.is_baseline, **self.stats.to_dict(),
                **(self.change.to_dict() if self.change else {})}
        if with_cdf:
            x, p = self.cdf()
            data["cdf"] = {"values": x.tolist(), "probability": p.tolist()}
        return data


METHOD = {
    "test": "Mann-Whitney U, two-sided (exact null distribution for groups of up to 8 runs "
            "without ties, else normal with tie and continuity corrections)",
    "change": "Hodges-Lehmann estimate: the median over all pairs of runs of the ratio "
              "new/baseline (change_unit %), or of the difference where a value is <= 0 or for "
              "shares (the metric's unit; pp)",
    "interval": "the Mann-Whitney confidence interval of the change (the changes the test does "
                "not reject), at 1 - alpha x max(R, 1) / m for R significant of m comparisons "
                "(Benjamini-Yekutieli): it excludes 0 exactly where q < alpha",
    "correction": "Benjamini-Hochberg over all comparisons",
}


@dataclass
class Comparison:
    baseline: str | None
    configurations: list[str]
    rows: list[Row]
    sources: list[dict]
    warnings: list[Diagnostic]
    alpha: float = ALPHA
    confidence: float = 1 - ALPHA  # the level of every interval (see interval_level)

    @property
    def workloads(self) -> list[str]:
        return list(dict.fromkeys(r.workload for r in self.rows))

    def metrics(self, workload: str | None = None) -> list[MetricInfo]:
        return list(dict.fromkeys(rows[0].metric for (w, _), rows in self._by_metric.items()
                                  if workload is None or w == workload))

    def row(self, workload: str, metric: str, configuration: str) -> Row | None:
        return self._index.get((workload, metric, configuration))

    def rows_of(self, workload: str, metric: str) -> list[Row]:
        """The rows of one workload and metric (one per configuration)."""
        return self._by_metric.get((workload, metric), [])

    def __post_init__(self) -> None:
        self._index = {(r.workload, r.metric.name, r.configuration): r for r in self.rows}
        self._by_metric: dict[tuple[str, str], list[Row]] = {}
        for r in self.rows:
            self._by_metric.setdefault((r.workload, r.metric.name), []).append(r)

    def to_dict(self) -> dict:
        return {"baseline": self.baseline, "configurations": self.configurations,
                "alpha": self.alpha, "confidence": self.confidence, "method": METHOD,
                "sources": self.sources, "rows": [r.to_dict() for r in self.rows],
                "warnings": [w.to_dict() for w in self.warnings]}


class MetricSelection:
    """Which metrics to compare: the defaults, "all", or names given by the user
    (a workload's own metric by its name, e.g. tps for the column metric_tps)."""

    def __init__(self, names: Iterable[str] | None = None):
        given = {n.strip() for n in names or () if n.strip()}
        self.everything = "all" in given
        self.names = given - {"all"} if given and not self.everything else None
        self.seen: set[str] = set()  # names of the metrics the bundles have
        self.titles: set[str] = set()  # and the titles of run metrics (wall, tps)

    def wants_run_metric(self, metric: MetricInfo) -> bool:
        self.seen.add(metric.name)
        self.titles.add(metric.title)
        if self.everything:
            return True
        if self.names is None:
            return metric.name in DEFAULT_RUN_METRICS or metric.name.startswith("metric_")
        return metric.name in self.names or metric.title in self.names

    def wants_summary_field(self, probe: str, name: str) -> bool:
        self.seen.add(name)
        default = SUMMARY_METRICS.get(probe)
        if self.names is not None:
            return name in self.names
        if self.everything or default is None:
            return bool(_NOISE_FIELD.search(name)) or name in (default or ())
        return name in default

    def check_known(self) -> None:
        """Names the user gave that no bundle has."""
        unknown = sorted(n for n in self.names or () if n not in self.seen | self.titles)
        if unknown:
            raise UsageError(f"no bundle has metric {', '.join(unknown)}",
                             f"choose from: {', '.join(sorted(self.seen))}")


# -- observations ---------------------------------------------------------------

@dataclass
class _Observations:
    """Values per (workload, metric, configuration), in order of appearance."""

    metrics: dict[str, MetricInfo] = field(default_factory=dict)
    values: dict[tuple[str, str, str], list[np.ndarray]] = field(default_factory=dict)
    configurations: list[str] = field(default_factory=list)

    known: set[str] = field(default_factory=set)  # the configurations, for a quick lookup

    def add(self, workload: str, metric: MetricInfo, configuration: str,
            values: np.ndarray) -> None:
        self.metrics.setdefault(metric.name, metric)
        if configuration not in self.known:  # a fleet --by-node: 10,000 configurations
            self.known.add(configuration)
            self.configurations.append(configuration)
        self.values.setdefault((workload, metric.name, configuration), []).append(values)


def configuration_name(bundle: Bundle, inner: str = "") -> str:
    outer = bundle.label or (bundle.path.name if bundle.path else bundle.kind)
    return f"{outer}/{inner}" if inner else outer


def _check_compatible(bundle: Bundle) -> None:
    version = bundle.manifest.get("schema_version")
    if version not in READABLE_SCHEMAS:
        tool = bundle.manifest.get("tool", {}).get("version", "?")
        raise UsageError(
            f"{bundle.path or bundle.name} was written by noisescope {tool} (bundle schema "
            f"{version}), which this noisescope cannot compare (schemas "
            f"{READABLE_SCHEMAS.start}-{READABLE_SCHEMAS.stop - 1})",
            "compare it with the noisescope version that wrote it, or re-run the measurement")


REQUIRED_RUN_COLUMNS = ("workload", "configuration", "warmup", "status")


def _runs_observations(bundle: Bundle, selection: MetricSelection, obs: _Observations,
                       notes: list[Diagnostic]) -> None:
    runs = bundle.table("runs")
    missing = [c for c in REQUIRED_RUN_COLUMNS if c not in runs.columns]
    if missing:
        raise UsageError(f"{bundle.path}: runs table lacks column {missing[0]} (written by "
                         f"noisescope {bundle.manifest['tool'].get('version')})",
                         "the bundle is damaged or from an incompatible version; re-run it")
    declared = {m["name"]: m for w in bundle.parameters.get("workloads", [])
                for m in w.get("metrics", [])}
    metrics = [RUN_METRICS[c] for c in RUN_METRICS if c in runs.columns]
    metrics += [MetricInfo(c, c[len("metric_"):], "", declared.get(c[len("metric_"):], {})
                           .get("better")) for c in runs.columns if c.startswith("metric_")]
    metrics = [m for m in metrics if selection.wants_run_metric(m)]
    measured = runs.filter(~runs["warmup"].astype(bool)) if runs.rows else runs
    where = bundle.path or bundle.name
    for workload in dict.fromkeys(measured["workload"].tolist()) if measured.rows else []:
        for inner in dict.fromkeys(measured.where(workload=workload)["configuration"].tolist()):
            mine = measured.where(workload=workload, configuration=inner)
            ok = mine.filter(mine["status"] == "ok")
            config = configuration_name(bundle, inner)
            if ok.rows < mine.rows:
                statuses = ", ".join(f"{int((mine['status'] == s).sum())} {s}"
                                     for s in dict.fromkeys(mine["status"].tolist()) if s != "ok")
                notes.append(Diagnostic(Code.RUN_EXCLUDED, f"{where}: {workload} [{config}]: "
                                        f"{mine.rows - ok.rows} of {mine.rows} runs left out "
                                        f"({statuses})"))
            own = _workload_metrics(bundle, workload)
            for metric in metrics:
                values = ok[metric.name].astype(np.float64)
                if metric.name.startswith("sibling_"):
                    values = values[~np.isnan(values)]  # runs without a trace have none
                elif metric.name.startswith("metric_"):
                    if metric.title not in own:
                        continue  # another workload's metric
                    found = values[~np.isnan(values)]
                    if len(found) < len(values):
                        notes.append(Diagnostic(
                            Code.METRIC_MISSING, f"{where}: {workload} [{config}]: metric "
                            f"{metric.title} missing in {len(values) - len(found)} of "
                            f"{len(values)} runs"))
                    values = found
                if len(values):
                    obs.add(workload, metric, config, values)


def _workload_metrics(bundle: Bundle, workload: str) -> set[str]:
    return {m["name"] for w in bundle.parameters.get("workloads", []) if w.get("name") == workload
            for m in w.get("metrics", [])}


# Per-CPU summaries that are not a measurement of the bundle's configuration: a
# tune bundle's plan (candidates' shares) and its trials' rounds (other
# configurations, compared inside the bundle).
NOT_COMPARED = ("plan", "rounds")


def _summary_observations(bundle: Bundle, selection: MetricSelection, per_cpu: bool,
                          obs: _Observations) -> None:
    config = configuration_name(bundle)
    for probe, rows in bundle.summaries.items():
        if probe in NOT_COMPARED:
            continue
        rows = [r for r in rows if isinstance(r, dict) and "cpu" in r]
        if not rows:
            continue
        names = [k for k, v in rows[0].items() if _is_number(v) and k not in ("cpu", "thread")]
        for name in [k for k in names if selection.wants_summary_field(probe, k)]:
            metric = summary_metric(name)
            per = {_where(r): float(r[name]) for r in rows if _is_number(r.get(name))}
            if not per:
                continue
            if per_cpu:
                for where, value in per.items():
                    obs.add(f"{probe} {where}", metric, config, np.array([value]))
            else:
                obs.add(probe, metric, config, np.array([np.mean(list(per.values()))]))


def _fleet_observations(bundle: Bundle, selection: MetricSelection, obs: _Observations, *,
                        per_cpu: bool, per_node: bool, by_node: bool) -> None:
    """A fleet bundle (cluster scan): by default its nodes are the units of the fleet's
    configuration (one value per node, the mean over its CPUs), so that two fleets
    compare with n = nodes; per_node: a row per node (nodes as rows), per_cpu: a row
    per node and CPU; by_node: every node is a configuration of its own ("fleet/node"),
    its CPUs the units, so that nodes compare against each other."""
    config = configuration_name(bundle)
    for probe in bundle.summaries:
        # By columns: a fleet of 10,000 nodes has 40,000 rows per probe.
        table = bundle.summary_table(probe)
        if not table.rows or "node" not in table or "cpu" not in table:
            continue
        names = [k for k in table.columns
                 if table[k].dtype.kind in "iuf" and k not in ("cpu", "rank")]
        row_nodes, row_cpus = [str(n) for n in table["node"].tolist()], table["cpu"].tolist()
        for name in [k for k in names if selection.wants_summary_field(probe, k)]:
            metric = summary_metric(name)
            per: dict[str, dict[int, float]] = {}
            for node, cpu, value in zip(row_nodes, row_cpus, table[name].tolist(), strict=True):
                if math.isfinite(value):
                    per.setdefault(node, {})[cpu] = float(value)
            for node, cpus in per.items():
                values = np.array(list(cpus.values()))
                if by_node:
                    obs.add(probe, metric, f"{config}/{node}", values)
                elif per_cpu:
                    for cpu, value in cpus.items():
                        obs.add(f"{probe} {node} cpu{cpu}", metric, config, np.array([value]))
                elif per_node:
                    obs.add(f"{probe} {node}", metric, config, np.array([values.mean()]))
            if per and not (by_node or per_cpu or per_node):
                obs.add(probe, metric, config,
                        np.array([np.mean(list(c.values())) for c in per.values()]))


def _where(row: dict) -> str:
    """'cpu3', or 'thread0' for imported results that do not say the CPU."""
    return f"cpu{row['cpu']}" if row.get("cpu") is not None else f"thread{row.get('thread', 0)}"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# -- statistics -------------------------------------------------------------------

def interval_level(alpha: float, significant: int, tests: int) -> float:
    """The level of every interval: 1 - alpha x max(R, 1) / m for R significant out of
    m tests (Benjamini & Yekutieli 2005: false coverage rate alpha over the selected
    changes). Benjamini-Hochberg calls a test significant exactly when its p-value is
    below alpha x R / m, so at this level a test-inverting interval excludes 0 exactly
    for the significant ones; 1 - alpha for a single comparison."""
    return 1 - alpha * max(significant, 1) / max(tests, 1)


def _verdict(shift: Shift, significant: bool, better: str | None) -> str:
    if not significant:
        return "not significant"
    up = shift.low > 0
    if better is None:
        return "higher" if up else "lower"
    return "better" if up == (better == "higher") else "worse"


def compare(bundles: Sequence[Bundle], *, baseline: str | None = None,
            metrics: Iterable[str] | None = None, per_cpu: bool = False, alpha: float = ALPHA,
            per_node: bool = False, by_node: bool = False) -> Comparison:
    """Compare every configuration with the baseline (default: the first).
    per_node and by_node apply to fleet bundles (see _fleet_observations)."""
    from scipy.stats import false_discovery_control

    if not bundles:
        raise UsageError("nothing to compare", "give bundle directories, e.g. compare a/ b/")
    if not 0 < alpha < 1:
        raise UsageError("alpha must lie between 0 and 1", f"e.g. {option('alpha', '0.05')}")
    selection = MetricSelection(metrics)
    obs = _Observations()
    notes: list[Diagnostic] = []
    for bundle in bundles:
        _check_compatible(bundle)
        if not bundle.complete:
            notes.append(Diagnostic(Code.INTERRUPTED, f"{bundle.path or bundle.name} is "
                                    f"incomplete: what it measured is included"))
        if bundle.has_table("runs"):  # its summaries are made of the runs
            _runs_observations(bundle, selection, obs, notes)
        elif bundle.kind == "fleet":
            _fleet_observations(bundle, selection, obs, per_cpu=per_cpu, per_node=per_node,
                                by_node=by_node)
        else:
            _summary_observations(bundle, selection, per_cpu, obs)
    selection.check_known()
    if not obs.values:
        raise UsageError("the bundles hold no values to compare",
                         "check that they hold successful runs or per-CPU summaries")
    if baseline is not None and baseline not in obs.configurations:
        raise UsageError(f"no configuration is called {baseline!r}",
                         f"choose from: {', '.join(obs.configurations)}")
    base = baseline or obs.configurations[0]

    groups = {key: np.sort(np.concatenate(parts)) for key, parts in obs.values.items()}
    notes += _too_few_runs(groups)

    # Every comparison with the baseline: its test first, as the intervals' level
    # depends on how many turn out significant.
    tests: dict[tuple[str, str, str], RankTest | None] = {}
    against: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}  # baseline -> others
    for workload, metric, config in groups:
        key, base_key = (workload, metric, config), (workload, metric, base)
        if config == base or base_key not in groups:
            continue
        tests[key] = None  # too few runs, unless tested below
        if min(len(groups[key]), len(groups[base_key])) >= 2:
            against.setdefault(base_key, []).append(key)
    for base_key, keys in against.items():
        tests.update(zip(keys, rank_tests([groups[k] for k in keys], groups[base_key]),
                         strict=True))
    tested = [key for key, test in tests.items() if test and math.isfinite(test.p_value)]
    adjusted = false_discovery_control([tests[k].p_value for k in tested], method="bh") \
        if tested else []
    q_values = {key: float(q) for key, q in zip(tested, adjusted, strict=True)}
    level = interval_level(alpha, sum(q < alpha for q in q_values.values()), len(tested))

    shifts: dict[tuple[str, str, str], Shift] = {}
    relative: dict[tuple[str, str, str], bool] = {}
    for base_key, keys in against.items():
        reference = groups[base_key]
        relative.update((k, not obs.metrics[k[1]].difference and groups[k][0] > 0
                         and reference[0] > 0) for k in keys)
        shifts.update(zip(keys, hodges_lehmann_many([groups[k] for k in keys], reference,
                                                    [tests[k] for k in keys], level,
                                                    [relative[k] for k in keys]), strict=True))
    changes = {}
    for key, test in tests.items():
        metric = obs.metrics[key[1]]
        if test is None:
            changes[key] = Change(None, None, None, None, None, False, "too few runs")
            continue
        shift = shifts[key]
        q = q_values.get(key)
        # The interval is the test inverted: it excludes 0 where q < alpha; requiring
        # both keeps the story one where ties blur that edge.
        significant = q is not None and q < alpha and shift.excludes_zero()
        p = test.p_value if q is not None else None
        changes[key] = Change(shift.estimate, shift.low, shift.high, p, q,
                              significant, _verdict(shift, significant, metric.better),
                              "%" if relative[key] else "pp" if metric.unit == "%" else metric.unit)

    keys = []
    for workload in dict.fromkeys(w for w, _, _ in groups):
        for metric in dict.fromkeys(m for w, m, _ in groups if w == workload):
            keys += [key for config in obs.configurations
                     if (key := (workload, metric, config)) in groups]
    stats = GroupStats.of_groups([groups[key] for key in keys])
    rows = [Row(key[0], obs.metrics[key[1]], key[2], group, changes.get(key), groups[key])
            for key, group in zip(keys, stats, strict=True)]
    return Comparison(base, obs.configurations, rows, [_source(b) for b in bundles], notes,
                      alpha, level)


def _too_few_runs(groups: dict[tuple[str, str, str], np.ndarray]) -> list[Diagnostic]:
    """A note per workload and configuration with fewer than FEW_RUNS values (its fewest
    over the metrics); a workload with more than LISTED_FEW of them (the nodes of a
    large fleet, --by-node) gets one note per count instead."""
    fewest: dict[tuple[str, str], int] = {}
    for (workload, _, config), values in groups.items():
        if len(values) < FEW_RUNS:
            fewest[(workload, config)] = min(len(values), fewest.get((workload, config), FEW_RUNS))
    by_workload: dict[str, list[tuple[str, int]]] = {}
    for (workload, config), n in sorted(fewest.items()):
        by_workload.setdefault(workload, []).append((config, n))
    notes = []
    for workload, small in by_workload.items():
        if len(small) <= LISTED_FEW:
            notes += [Diagnostic(Code.TOO_FEW_RUNS, f"{workload} [{config}]: only {_runs(n)}; "
                                 f"with so few, even a real difference can rarely be shown "
                                 f"significant") for config, n in small]
            continue
        for n in sorted({n for _, n in small}):
            configs = [config for config, count in small if count == n]
            shown = ", ".join(configs[:LISTED_FEW])
            more = f" and {len(configs) - LISTED_FEW:,} more" if len(configs) > LISTED_FEW else ""
            notes.append(Diagnostic(Code.TOO_FEW_RUNS, f"{workload}: {len(configs):,} "
                                    f"configurations ({shown}{more}) have only {_runs(n)}; with "
                                    f"so few, even a real difference can rarely be shown "
                                    f"significant"))
    return notes


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _source(bundle: Bundle) -> dict:
    host = bundle.manifest.get("host") or {}
    return {"path": str(bundle.path) if bundle.path else None, "label": bundle.label,
            "kind": bundle.kind, "complete": bundle.complete,
            "tool_version": bundle.manifest.get("tool", {}).get("version"),
            "schema_version": bundle.manifest.get("schema_version"),
            "hostname": host.get("hostname"), "kernel": host.get("kernel_release"),
            "started_utc": bundle.manifest.get("started_utc")}
