"""SMT sibling occupancy on real siblings, core scheduling's working path, the
baseline / nosmt / coresched study, and NUMA placement (issue 12, items 3-5).

The occupancy experiment (plan.occupancy_experiment) runs a spinning
workload on CPU 6 (sibling 7 idle), on CPU 6 forking its own second task
onto CPU 7, on CPU 4 (sibling 5 runs a foreign spinner throughout) and on
CPU 4 with a core-scheduling cookie. The workload reports its own affinity
and cookie (tests/rig/workload.c)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from noisescope.units import parse_cpu_list


def occupancy(bundle, workload: str, configuration: str) -> dict:
    rows = [r for r in bundle.summaries["occupancy"]
            if r["workload"] == workload and r["configuration"] == configuration]
    assert len(rows) == 1, rows
    assert rows[0]["runs"] >= 2 and rows[0]["workload_ns"] > 0, rows[0]
    return rows[0]


@pytest.fixture(scope="module")
def runs(rig_guest):
    return rig_guest.bundle("occupancy", "occupancy/runs")


@pytest.fixture(scope="module")
def reports(rig_guest) -> list[dict]:
    rig_guest.succeeded("occupancy")
    return [json.loads(line) for line in rig_guest.path("reports.jsonl").read_text().splitlines()]


def test_the_occupancy_was_traced_on_the_hosts_real_siblings(runs):
    section = runs.manifest["occupancy"]
    assert section["measured"] and section["source"] == "host"
    assert section["siblings"]["4"] == [5] and section["siblings"]["6"] == [7]


def test_an_idle_sibling_is_idle(runs):
    row = occupancy(runs, "spin", "idle-sibling")
    assert row["idle_pct"] >= 80 and row["unknown_pct"] == 0, row


def test_a_foreign_spinner_on_the_sibling_is_foreign(runs):
    row = occupancy(runs, "spin", "foreign-sibling")
    assert row["foreign_pct"] >= 90 and row["unknown_pct"] == 0, row


def test_the_workloads_own_second_task_on_the_sibling_is_same(runs):
    """The forked task spins on CPU 7 until the same moment as its parent on 6;
    they overlap but for the workload's start (exec from the 9p share, the
    report, the fork: under TCG up to ~40% of a 300 ms run, 39% once)."""
    row = occupancy(runs, "spin", "same-sibling")
    assert row["same_pct"] >= 50 and row["same_pct"] > row["idle_pct"], row
    assert row["foreign_pct"] <= 10 and row["unknown_pct"] == 0, row


def test_core_scheduling_gives_the_workload_a_cookie_it_can_read_back(reports):
    cookies = {c: {(r["cookie"], r["cookie_errno"]) for r in reports if r["config"] == c}
               for c in ("coresched", "foreign-sibling")}
    assert all(cookie != 0 and error == 0 for cookie, error in cookies["coresched"])
    assert cookies["foreign-sibling"] == {(0, 0)}  # no cookie, and the call itself works


def test_core_scheduling_keeps_the_foreign_spinner_off_the_sibling(runs):
    """Without a cookie the spinner on CPU 5 runs beside the workload all the
    time; with one, the core forces the sibling idle while the workload runs.
    TCG delivers the IPI that forces it only when the host next runs that
    vCPU's thread (8 vCPU threads on 2 host CPUs), so the spinner keeps the
    sibling a little after each core-wide switch: 12-19% foreign was seen,
    where real hardware shows microseconds per switch."""
    without = occupancy(runs, "spin", "foreign-sibling")
    with_cookie = occupancy(runs, "spin", "coresched")
    assert without["foreign_pct"] >= 90 and without["idle_pct"] <= 5, without
    assert with_cookie["foreign_pct"] <= 35, with_cookie
    assert with_cookie["idle_pct"] >= 60, with_cookie  # forced idle


def test_numa_spread_uses_both_nodes_and_packed_one(runs, reports):
    nodes = {cpu: node for node, cpus in runs.host.numa_nodes.items()
             for cpu in parse_cpu_list(cpus)}
    spread = {tuple(r["cpus"]) for r in reports if r["config"] == "spread"}
    packed = {tuple(r["cpus"]) for r in reports if r["config"] == "packed"}
    assert len(spread) == 1 and len(packed) == 1, (spread, packed)
    (spread_cpus,), (packed_cpus,) = spread, packed
    assert len(spread_cpus) == 2 and {nodes[c] for c in spread_cpus} == {"0", "1"}
    assert len(packed_cpus) == 2 and len({nodes[c] for c in packed_cpus}) == 1
    # both take one thread per core before any second thread
    assert {c // 2 for c in spread_cpus} != {spread_cpus[0] // 2}
    assert len({c // 2 for c in packed_cpus}) == 2


# -- the core-scheduling study: baseline / nosmt / coresched from one file ------

@pytest.fixture(scope="module")
def study(rig_guest):
    return rig_guest.bundle("study", "study/runs")


def test_the_study_ran_every_configuration_and_restored_smt(rig_guest, study):
    runs = study.table("runs")
    assert sorted(set(runs["configuration"].tolist())) == ["baseline", "coresched", "nosmt"]
    assert set(runs["status"].tolist()) == {"ok"}
    control, online = rig_guest.succeeded("smt-after").stdout.split()
    assert control == "on" and online == "0-7"
    configurations = {c["name"]: c for c in study.parameters["configurations"]}
    assert configurations["nosmt"]["smt"] == "off"


def test_nosmt_runs_had_no_sibling_and_the_others_did(study):
    rows = {r["configuration"]: r for r in study.summaries["occupancy"]}
    assert "nosmt" not in rows  # its sibling was offline: nothing to trace
    assert rows["baseline"]["foreign_pct"] > rows["coresched"]["foreign_pct"]


def test_compare_prints_the_study_table_with_sibling_statistics(rig_guest):
    done = subprocess.run([sys.executable, "-m", "noisescope", "compare",
                           str(rig_guest.path("study")), "--baseline", "runs/baseline",
                           "--format", "markdown"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    table = done.stdout
    for configuration in ("baseline", "nosmt", "coresched"):  # named after the runs bundle
        assert f"| runs/{configuration} " in table
    for column in ("mean", "sd", "change"):
        assert column in table
    assert "sibling foreign %" in table and "sibling idle %" in table
