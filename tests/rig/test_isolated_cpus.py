"""Isolated CPUs are measured (issue 12, item 1), by default and by name, in
scan, timerlat, bench, inject and cluster: isolcpus= only takes them out of
the default affinity; a thread can still be pinned there, and they are the
CPUs people tune and measure. The guest boots with isolcpus=2,3
nohz_full=2,3, so a plain process's affinity is 0-1,4-7."""

from __future__ import annotations

import json
import re

from noisescope.analysis.fleet import FleetBundle

ALL = list(range(8))
ISOLATED = [2, 3]


def test_a_plain_process_in_the_guest_cannot_run_on_the_isolated_cpus(rig_guest):
    """The premise: the guest's default affinity leaves the isolated CPUs out."""
    assert json.loads(rig_guest.succeeded("affinity").stdout) == [0, 1, 4, 5, 6, 7]


def test_scan_measures_every_cpu_by_default_isolated_ones_included(rig_guest):
    bundle = rig_guest.bundle("scan-all")
    assert bundle.parameters["cpus"] == ALL
    assert sorted(s["cpu"] for s in bundle.summaries["detour"]) == ALL
    for summary in bundle.summaries["detour"]:
        assert summary["measured_ns"] > 0 and summary["windows"] > 0


def test_scan_and_timerlat_measure_an_isolated_cpu_named_with_cpus(rig_guest):
    assert rig_guest.bundle("scan").parameters["cpus"] == [0, 2, 6]
    bundle = rig_guest.bundle("timerlat")
    assert bundle.parameters["cpus"] == [0, 2]
    summary = {s["cpu"]: s for s in bundle.summaries["timerlat"]}[2]
    assert summary["samples"] > 0


def test_inject_runs_on_an_isolated_cpu(rig_guest):
    step = rig_guest.succeeded("inject-isolated")
    assert "on CPU 3" in step.stderr and re.search(r"\b\d+ injections", step.stdout), step.describe()


def test_bench_places_a_workload_on_an_isolated_cpu_by_name_and_by_layout(rig_guest):
    seen = [json.loads(line) for line in rig_guest.path("reports.jsonl").read_text().splitlines()]
    isolated = {tuple(r["cpus"]) for r in seen if r["config"] == "isolated"}
    packed = {tuple(r["cpus"]) for r in seen if r["config"] == "packed"}
    assert isolated == {(3,)}
    # packed fills node 0 (CPUs 0-3), one thread per core first: 0 and 2, an isolated CPU
    assert packed == {(0, 2)}


def test_cluster_ranks_split_every_cpu_between_them_isolated_ones_included(rig_guest):
    """Two unbound ranks on one node share its CPUs; the isolated ones are not
    left out because the ranks' inherited affinity lacks them."""
    fleet = FleetBundle.of(rig_guest.bundle("cluster-default", "cluster"))
    assert len(fleet.nodes) == 2
    measured = sorted(cpu for node in fleet.nodes for cpu in node.parameters["cpus"])
    assert measured == ALL
