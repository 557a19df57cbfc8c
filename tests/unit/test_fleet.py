"""Fleet analysis (analysis/fleet.py), CPU shares of ranks, and compare on fleet bundles,
with records built by hand (the MPI runs are in tests/e2e/test_cluster.py)."""

from __future__ import annotations

import numpy as np
import pytest

from noisescope.analysis import fleet
from noisescope.analysis.compare import compare
from noisescope.bundle import Bundle
from noisescope.cluster.cpus import assign_cpus, own_injections
from noisescope.cluster.mpi import RankPlacement
from noisescope.errors import UsageError
from noisescope.manifest import SCHEMA_VERSION
from noisescope.probes import Injection
from noisescope.tables import Table


def placement(local_rank: int, candidates, node="n1") -> RankPlacement:
    return RankPlacement(local_rank, len(candidates), node, local_rank, len(candidates),
                     tuple(candidates[local_rank]), tuple(tuple(c) for c in candidates))


def test_ranks_bound_to_disjoint_cpus_measure_their_own():
    bound = [(0, 1), (2, 3)]
    assert [assign_cpus(placement(i, bound)) for i in range(2)] == [(0, 1), (2, 3)]


def test_ranks_sharing_a_node_split_its_cpus():
    unbound = [(0, 1, 2, 3, 4)] * 2
    assert [assign_cpus(placement(i, unbound)) for i in range(2)] == [(0, 1), (2, 3, 4)]
    # one process per node takes everything
    assert assign_cpus(placement(0, [(0, 1, 2, 3)])) == (0, 1, 2, 3)


def test_more_ranks_than_cpus_on_a_node_is_refused():
    with pytest.raises(UsageError, match="3 ranks on node n1 share 2 CPUs"):
        assign_cpus(placement(0, [(0, 1)] * 3))


def test_injections_run_on_the_rank_that_measures_the_cpu():
    spec = (Injection.parse("1kHz:20us@cpu1"),)
    assert own_injections(spec, (1,), rank=1, ranks=None) == spec
    assert own_injections(spec, (0,), rank=0, ranks=None) == ()
    assert own_injections(spec, (1,), rank=5, ranks=(3,)) == ()  # --inject-ranks 3


def test_others_median_leaves_each_value_out():
    rng = np.random.default_rng(7)
    for n in range(2, 12):
        values = rng.integers(0, 6, n).astype(float)
        expected = [np.median(np.delete(values, i)) for i in range(n)]
        assert np.allclose(fleet.others_medians(values), expected)


def test_one_noisy_node_stands_out_even_among_two():
    assert fleet.standouts({0: 0.5, 1: 5.0}, floor=0.1) == [(1, 5.0, 0.5)]
    assert fleet.standouts({0: 0.5, 1: 0.55}, floor=0.1) == []  # not twice the others
    assert fleet.standouts({0: 0.01, 1: 0.03}, floor=0.1) == []  # below the floor


def record(rank: int, node: str, noise: float, bands=None, kernel="6.18", irq=None) -> dict:
    summaries = {"detour": [{"cpu": 0, "noise_pct": noise, "detours_per_s": 250.0,
                             "p99_ns": 3000, "max_ns": 20000}]}
    return {"rank": rank, "node": node, "summaries": summaries,
            "figures": fleet.node_figures(summaries),
            "bands": bands or {"<10us": 250.0, "10-100us": 1.0, "100us-1ms": 0.0, ">=1ms": 0.0},
            "interrupts_per_s": irq or {"LOC": 250.0},
            "host": {"kernel_release": kernel, "kernel_cmdline": "quiet", "cpu_model": "x"}}


def test_differences_name_the_node_with_a_daemon_and_a_different_kernel():
    records = [record(r, f"n{r}", 0.3) for r in range(5)]
    records[3] = record(3, "n3", 1.3, bands={"<10us": 250.0, "10-100us": 1.0,
                                             "100us-1ms": 100.0, ">=1ms": 0.0},
                        irq={"LOC": 250.0, "45 eth0-rx-3": 900.0})
    records[4]["host"]["kernel_release"] = "6.1"
    found = fleet.differences(records)
    host = [d for d in found if d["kind"] == "host"]
    assert [d["what"] for d in host] == ["kernel_release"]
    assert host[0]["values"] == {"6.18": 4, "6.1": 1}
    assert host[0]["nodes"] == {"6.18": ["n0", "n1", "n2", "n3"], "6.1": ["n4"]}
    noisy = {(d["kind"], d["what"]) for d in found if d.get("rank") == 3}
    assert noisy == {("noise", "detour_noise_pct"), ("detours", "100us-1ms"),
                     ("interrupts", "45 eth0-rx-3")}
    assert all(d.get("rank") in (None, 3) for d in found)
    assert "n3 (rank 3): detours of 100us-1ms at 100.0/s" in " ".join(d["message"] for d in found)


def test_band_rates_count_detours_by_length():
    durations = np.array([2_000, 9_999, 10_000, 150_000, 2_000_000])
    assert fleet.band_rates(durations, 2_000_000_000) == {
        "<10us": 1.0, "10-100us": 0.5, "100us-1ms": 0.5, ">=1ms": 0.5}


def test_alignment_is_the_spread_of_the_first_windows():
    windows = Table({"rank": np.array([0, 0, 1, 1, 0, 1]), "cpu": np.array([0, 0, 1, 1, 0, 1]),
                     "probe": np.array(["detour"] * 4 + ["ftq"] * 2, dtype=object),
                     "window": np.array([0, 1, 0, 1, 0, 0]),
                     "start_ns": np.array([10, 1_000_010, -20, 999_990, 2_000_000, 2_000_500]),
                     "end_ns": np.zeros(6, np.int64)})
    assert fleet.alignment(windows) == [
        {"probe": "detour", "ranks": 2, "earliest_ns": -20, "latest_ns": 10, "spread_ns": 30},
        {"probe": "ftq", "ranks": 2, "earliest_ns": 2_000_000, "latest_ns": 2_000_500,
         "spread_ns": 500}]


def fleet_bundle(label: str, noise_by_node: dict[str, list[float]]) -> Bundle:
    rows = [{"rank": i, "node": node, "cpu": cpu, "noise_pct": value, "detours_per_s": 100.0,
             "p50_ns": 500, "p99_ns": 1000, "p999_ns": 2000, "max_ns": 5000}
            for i, (node, values) in enumerate(noise_by_node.items())
            for cpu, value in enumerate(values)]
    manifest = {"schema_version": SCHEMA_VERSION, "kind": "fleet", "tool": {"version": "t"},
                "label": label, "complete": True, "parameters": {},
                "summaries": {"ranks": [], "detour": rows, "alignment": [], "differences": []},
                "warnings": [], "tables": {}}
    return Bundle(manifest)


def test_compare_fleets_with_nodes_as_units_as_rows_and_against_each_other():
    before = fleet_bundle("before", {f"n{i}": [1.0 + 0.1 * i, 1.2] for i in range(6)})
    after = fleet_bundle("after", {f"n{i}": [0.5 + 0.05 * i, 0.6] for i in range(6)})
    result = compare([before, after], metrics=["noise_pct"])
    row = result.row("detour", "noise_pct", "after")
    assert row.stats.n == 6  # one value per node
    assert row.change.change < -40 and row.change.verdict == "better"
    per_node = compare([before, after], metrics=["noise_pct"], per_node=True)
    assert per_node.workloads == [f"detour n{i}" for i in range(6)]
    assert per_node.row("detour n2", "noise_pct", "after").stats.mean == pytest.approx(0.6)
    by_node = compare([before], metrics=["noise_pct"], by_node=True)
    assert by_node.configurations == [f"before/n{i}" for i in range(6)]
    assert by_node.row("detour", "noise_pct", "before/n3").stats.n == 2  # its CPUs


def test_report_of_a_fleet_has_ranks_as_rows_node_against_node_and_findings_per_rank():
    from noisescope.render.report import TableBlock, build_report, render_markdown

    def table(section, title):
        return next(b for b in section.blocks if isinstance(b, TableBlock)
                    and b.title.startswith(title))

    bundle = fleet_bundle("f<1>", {"n0": [1.0, 1.1, 1.2], "n1": [3.0, 3.2, 3.1]})
    bundle.manifest["summaries"]["ranks"] = [
        {"rank": r, "node": f"n{r}", "status": "ok", "reason": None, "cpus": [0, 1, 2],
         "bundle": f"nodes/rank000{r}-n{r}", "detour_noise_pct": 1.1 + 2 * r}
        for r in (0, 1)]
    bundle.manifest["summaries"]["differences"] = [{"message": "n1 (rank 1): detour noise % 3.1%"}]
    bundle.manifest["parameters"] = {"ranks": 2, "probes": ["detour"], "duration_ns": 10**9,
                                     "rt": False}
    finding = {"check": "isolcpus", "message": "not isolated", "advice": "isolate"}
    bundle.manifest["system"] = [{**finding, "state": state, "rank": r, "node": f"n{r}"}
                                 for r, state in ((0, "ok"), (1, "advice"))]
    bundle.manifest["system"] += [{"check": "thp", "state": "ok", "message": "madvise",
                                   "advice": None, "rank": r, "node": f"n{r}"} for r in (0, 1)]
    report = build_report([bundle])
    sections = {s.key: s for s in report.sections}
    overview = sections["fleet"]
    assert overview.blocks[0].startswith("fleet: 2 ranks on 2 nodes, 2 measured")
    ranks = table(overview, "Noisiest ranks")
    assert [row[:2] for row in ranks.rows] == [["1", "n1"], ["0", "n0"]]  # noisiest first
    assert any("2 ranks' own bundles are not here" in b for b in overview.blocks
               if isinstance(b, str))
    detours = sections["detour"].blocks[0]
    assert detours.headers[:3] == ["rank", "node", "CPU"] and len(detours.rows) == 6
    node_vs_node = sections["nodes-0"]
    change = table(node_vs_node, "detour: change")
    assert {row[1] for row in change.rows} == {"f<1>/n1"}  # n1 against the baseline n0
    noise = next(row for row in change.rows if "noise" in row[0])
    assert noise[2].startswith("+")  # n1 is the noisier node
    system = sections["system"].blocks[1]
    cells = {row[0]: row[1] for row in system.rows}
    assert cells["isolcpus"] == ("ok: not isolated (advice: isolate) [rank 0 (n0)]; "
                                 "advice: not isolated (advice: isolate) [rank 1 (n1)]")
    assert cells["thp"] == "ok: madvise [all 2 ranks]"
    assert "f&lt;1&gt;" in render_markdown(report, "files")
