"""Fleet summaries: many nodes' scans side by side, and what sets one node apart.

Works on the rank records a cluster scan gathers (plain dicts, see
cluster/scan.py: per-CPU summaries, host facts, detour rates by length,
interrupt rates) and on the fleet's windows table. Pure functions: the tests
feed them records built by hand.

A node stands out on a figure when it is at least OUTLIER_RATIO times the
median of the *other* nodes and above it by more than the figure's floor (so
that 0.02% against 0.01% is not news). Comparing with the others' median
rather than a z-score works from two nodes up, and one noisy node cannot
hide itself by raising the spread.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from ..bundle import MANIFEST, Bundle, load
from ..errors import UsageError
from ..tables import Table
from ..units import format_duration

if TYPE_CHECKING:
    from .compare import Comparison, Row

OUTLIER_RATIO = 2.0
# Per figure: (summary of which probe, field, how nodes combine their CPUs, floor, title)
NODE_FIGURES = (
    ("detour", "noise_pct", "mean", 0.1, "detour noise %"),
    ("detour", "detours_per_s", "mean", 50.0, "detours/s"),
    ("detour", "p99_ns", "max", 5_000.0, "detour p99"),
    ("detour", "max_ns", "max", 100_000.0, "longest detour"),
    ("ftq", "noise_pct", "mean", 0.5, "FTQ noise %"),
    ("fwq", "noise_pct", "mean", 0.5, "FWQ noise %"),
    ("timerlat", "max_ns", "max", 100_000.0, "timer latency max"),
)
# Detour lengths in bands: a daemon waking on one node shows as a rate in one band
# that the other nodes lack.
BAND_EDGES_NS = (10_000, 100_000, 1_000_000)
BAND_NAMES = ("<10us", "10-100us", "100us-1ms", ">=1ms")
BAND_FLOOR_PER_S = 5.0
INTERRUPT_FLOOR_PER_S = 20.0
# Host facts whose differences between nodes matter for noise.
HOST_KEYS = ("kernel_release", "kernel_cmdline", "cpu_model", "online_cpus", "smt_control",
             "isolated_cpus", "nohz_full_cpus", "clocksource", "preemption", "config_hz",
             "rt_runtime_us")
NAMED_NODES = 5  # nodes named for each value of a host fact that differs
# What the noisiest-node ranking uses, first one the fleet has.
RANKING = (("detour", "noise_pct"), ("ftq", "noise_pct"), ("fwq", "noise_pct"),
           ("timerlat", "max_ns"))


def band_rates(durations_ns: np.ndarray, measured_ns: int) -> dict[str, float]:
    """Detours per second of measured CPU time, in each length band."""
    seconds = measured_ns / 1e9
    counts = np.bincount(np.searchsorted(BAND_EDGES_NS, durations_ns, side="right"),
                         minlength=len(BAND_NAMES))
    return {name: (float(c) / seconds if seconds else 0.0)
            for name, c in zip(BAND_NAMES, counts, strict=True)}


def node_figures(summaries: dict[str, list[dict]]) -> dict[str, float]:
    """One number per figure for a rank: its CPUs combined (mean, or max for tails)."""
    figures = {}
    for probe, name, combine, _, _ in NODE_FIGURES:
        values = [float(s[name]) for s in summaries.get(probe, []) if s.get(name) is not None]
        if values:
            figures[f"{probe}_{name}"] = float(np.mean(values) if combine == "mean"
                                               else np.max(values))
    return figures


def ranking_figure(rows: list[dict]) -> str | None:
    """The `ranks` field the noisiest-first order uses: the first RANKING figure any has."""
    for probe, name in RANKING:
        key = f"{probe}_{name}"
        if any(r.get(key) is not None for r in rows):
            return key
    return None


def noisiest(rows: list[dict], key: str, count: int | None = None) -> list[dict]:
    """Rows that have `key`, noisiest first."""
    have = [r for r in rows if r.get(key) is not None]
    return sorted(have, key=lambda r: -r[key])[:count]


def counts(rows: list[dict]) -> dict[str, int]:
    """How many ranks a fleet (or bsp) has, how many measured, on how many nodes."""
    return {"ranks": len(rows), "measured": sum(r.get("status", "ok") == "ok" for r in rows),
            "nodes": len({r["node"] for r in rows if r.get("node")})}


DISTRIBUTION_POINTS = ("min", "p50", "p90", "p99", "max")


def distribution(rows: list[dict]) -> list[dict]:
    """Each rank figure (NODE_FIGURES) over the measured ranks that have it: how many,
    and its min, median, p90, p99 and max."""
    measured = [r for r in rows if r.get("status") == "ok"]
    out = []
    for probe, name, _, _, _ in NODE_FIGURES:
        key = f"{probe}_{name}"
        values = np.array([r[key] for r in measured if r.get(key) is not None], np.float64)
        if len(values):
            points = np.percentile(values, [0, 50, 90, 99, 100])
            out.append({"what": key, "ranks": len(values),
                        **dict(zip(DISTRIBUTION_POINTS, points.tolist(), strict=True))})
    return out


def others_medians(values: np.ndarray) -> np.ndarray:
    """For each value, the median of all the other values (NaN with fewer than 2)."""
    n = len(values)
    if n < 2:
        return np.full(n, np.nan)
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    position = np.arange(n)  # each value's place in `ranked`

    def without_self(j: int) -> np.ndarray:
        """Element j of `ranked` with each value's own entry taken out."""
        return ranked[np.where(j < position, j, j + 1)]

    rest = n - 1
    middle = (without_self(rest // 2) if rest % 2 else
              (without_self(rest // 2 - 1) + without_self(rest // 2)) / 2)
    out = np.empty(n)
    out[order] = middle
    return out


def standouts(values: dict[int, float], floor: float) -> list[tuple[int, float, float]]:
    """(rank, value, others' median) for the ranks that stand out above the others."""
    ranks = list(values)
    data = np.array([values[r] for r in ranks], dtype=np.float64)
    medians = others_medians(data)
    return [(r, float(v), float(m)) for r, v, m in zip(ranks, data, medians, strict=True)
            if np.isfinite(m) and v - m > floor and v >= OUTLIER_RATIO * m]


def outlying_rows(comparison: Comparison, workload: str) -> list[tuple[Row, float]]:
    """Of a comparison of a fleet's nodes against each other (compare --by-node: too
    few CPUs per node for a significant change among thousands), the rows whose median
    stands out above the other nodes' medians by the rule of `differences` (the
    figure's floor, NODE_FIGURES), with the others' median; noisiest first."""
    floors = {(probe, name): floor for probe, name, _, floor, _ in NODE_FIGURES}
    out = []
    for metric in comparison.metrics(workload):
        if (workload, metric.name) not in floors:
            continue
        rows = comparison.rows_of(workload, metric.name)
        found = standouts({i: r.stats.median for i, r in enumerate(rows)},
                          floors[(workload, metric.name)])
        out += sorted(((rows[i], median) for i, _, median in found), key=_factor, reverse=True)
    return out


def _factor(found: tuple[Row, float]) -> float:
    row, others = found
    return row.stats.median / others if others > 0 else math.inf


def _one_rank_per_node(records: list[dict]) -> list[dict]:
    seen, out = set(), []
    for record in records:
        if record["node"] not in seen:
            seen.add(record["node"])
            out.append(record)
    return out


def _who(record: dict) -> str:
    return f"{record['node']} (rank {record['rank']})"


def _show(value: float, unit: str) -> str:
    if unit == "ns":
        return format_duration(value)
    if unit == "%":
        return f"{value:.3f}%"
    return f"{value:,.1f}/s"


def host_differences(records: list[dict]) -> list[dict]:
    """Host facts that are not the same on every node (one rank per node)."""
    nodes = _one_rank_per_node([r for r in records if r.get("host")])
    out = []
    for key in HOST_KEYS:
        groups: dict[str, list[str]] = {}
        for record in nodes:
            groups.setdefault(str(record["host"].get(key)), []).append(record["node"])
        if len(groups) > 1:
            ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
            text = "; ".join(f"{value!r} on {_nodes(names)}" for value, names in ordered)
            # How many nodes hold each value and the first of them (a fleet's every
            # rank's facts are in its table summary_ranks, as host_KEY).
            out.append({"kind": "host", "what": key,
                        "values": {value: len(names) for value, names in ordered},
                        "nodes": {value: names[:NAMED_NODES] for value, names in ordered},
                        "message": f"{key} differs: {text}"})
    return out


def _nodes(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED_NODES])
    more = len(names) - NAMED_NODES
    return shown + (f" and {more} more" if more > 0 else "")


def noise_differences(records: list[dict]) -> list[dict]:
    """Ranks whose noise figures, detour bands or interrupt rates stand out."""
    out = []
    by_rank = {r["rank"]: r for r in records}
    for probe, name, _, floor, title in NODE_FIGURES:
        key = f"{probe}_{name}"
        values = {r["rank"]: r["figures"][key] for r in records if key in r.get("figures", {})}
        unit = "ns" if name.endswith("_ns") else "%" if name.endswith("_pct") else "/s"
        for rank, value, median in standouts(values, floor):
            out.append(_standout("noise", key, by_rank[rank], value, median,
                                 f"{title} {_show(value, unit)}", _show(median, unit)))
    for kind, field, floor, what in (("detours", "bands", BAND_FLOOR_PER_S, "detours of {}"),
                                     ("interrupts", "interrupts_per_s", INTERRUPT_FLOOR_PER_S,
                                      "interrupts {} on the measured CPUs")):
        names = sorted({n for r in records for n in r.get(field, {})})
        for name in names:
            values = {r["rank"]: float(r.get(field, {}).get(name, 0.0)) for r in records}
            for rank, value, median in standouts(values, floor):
                out.append(_standout(kind, name, by_rank[rank], value, median,
                                     f"{what.format(name)} at {_show(value, '/s')}",
                                     _show(median, "/s")))
    return out


def _standout(kind: str, what: str, record: dict, value: float, median: float, said: str,
              others: str) -> dict:
    factor = f"{value / median:.1f}x" if median > 0 else "none elsewhere"
    return {"kind": kind, "what": what, "rank": record["rank"], "node": record["node"],
            "value": value, "others_median": median,
            "message": f"{_who(record)}: {said}; other nodes' median {others} ({factor})"}


def differences(records: list[dict]) -> list[dict]:
    """What sets nodes apart: host facts first, then noise figures."""
    return host_differences(records) + noise_differences(records)


def alignment(windows: Table) -> list[dict]:
    """Per probe: when each rank's first window began on the fleet timeline
    (0 = the agreed start of the first probe), and the spread between ranks."""
    out = []
    if windows.rows == 0:
        return out
    first = windows.filter(np.asarray(windows["window"]) == 0)
    for probe in dict.fromkeys(first["probe"].tolist()):
        starts = first.filter(first["probe"] == probe)
        per_rank = {}
        for rank, start in zip(starts["rank"].tolist(), starts["start_ns"].tolist(), strict=True):
            per_rank[rank] = min(start, per_rank.get(rank, start))
        values = np.array(list(per_rank.values()), dtype=np.int64)
        out.append({"probe": probe, "ranks": len(values), "earliest_ns": int(values.min()),
                    "latest_ns": int(values.max()),
                    "spread_ns": int(values.max() - values.min())})
    return out


class FleetBundle(Bundle):
    """A fleet bundle with its ranks' own bundles (DIR/nodes/...), found through the
    `bundle` path of each rank. Without a shared file system only some (or none) are
    here; `absent` lists the ranks whose bundle is not. A rank's bundle is loaded only
    when asked for: a report of 10,000 ranks reads the few it draws."""

    @classmethod
    def of(cls, bundle: Bundle) -> FleetBundle:
        return bundle if isinstance(bundle, FleetBundle) else \
            cls(bundle.manifest, bundle._tables, path=bundle.path)

    @functools.cached_property
    def _present(self) -> tuple[list[dict], list[dict]]:
        """The measured ranks' rows whose bundle is here, and those whose bundle is not."""
        present, absent = [], []
        for row in self.summaries.get("ranks", []):
            if row["status"] != "ok" or not row.get("bundle"):
                continue
            here = self.path is not None and (self.path / row["bundle"] / MANIFEST).is_file()
            (present if here else absent).append(row)
        return present, absent

    @functools.cached_property
    def _loaded(self) -> dict[str, Bundle | None]:
        return {}

    def _bundles(self, rows: list[dict]) -> list[Bundle]:
        """The bundles of `rows`; one that does not load (damaged, or being written on
        another node) joins `absent`."""
        out = []
        for row in rows:
            if row["bundle"] not in self._loaded:
                try:
                    self._loaded[row["bundle"]] = load(self.path / row["bundle"])
                except UsageError:
                    self._loaded[row["bundle"]] = None
                    self._present[1].append(row)
            if self._loaded[row["bundle"]] is not None:
                out.append(self._loaded[row["bundle"]])
        return out

    @property
    def nodes(self) -> list[Bundle]:
        """Every rank's bundle that is here (all loaded: for small fleets)."""
        return self._bundles(self._present[0])

    @property
    def node_count(self) -> int:
        return len(self._present[0])

    @property
    def absent(self) -> list[dict]:
        return self._present[1]

    def noisiest_nodes(self, count: int | None = None) -> list[Bundle]:
        """The ranks' bundles, noisiest first by the fleet's ranking figure."""
        rows = self._present[0]
        key = ranking_figure(rows)
        if key is not None:
            rows = sorted(rows, key=lambda r: r.get(key) or 0.0, reverse=True)
        return self._bundles(rows[:count])

    def drawn_nodes(self, count: int) -> list[Bundle]:
        """The `count` noisiest ranks' bundles, in rank order (every one of a small fleet)."""
        return sorted(self.noisiest_nodes(count), key=lambda b: b.manifest["cluster"]["rank"])
