"""A fleet bundle keeps its rows per rank and per CPU and its ranks' findings in tables
(schema 3), its manifest only what is about the fleet; read back they are the rows the
ranks sent. A fleet written before (schema 2, rows in the manifest) reads the same."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

import noisescope
from noisescope.bundle import FINDINGS_TABLE, SUMMARY_TABLE
from noisescope.errors import UsageError
from noisescope.manifest import SCHEMA_VERSION
from noisescope.render.fleet import fleet_blocks
from noisescope.render.terminal import print_blocks
from noisescope.tables import Table

from ..synthetic_fleet import OTHER_KERNEL, PROBES, SMALL, SMALL_NS, fleet_nodes, small_fleet

OLD_FLEET = Path(__file__).parents[1] / "fixtures" / "bundles" / "fleet-5728cd0"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet")
    small_fleet().write_into(directory)
    return directory


def test_the_rows_per_rank_and_cpu_are_tables_and_the_manifest_keeps_the_fleet(written):
    manifest = json.loads((written / "manifest.json").read_text())
    assert manifest["schema_version"] == SCHEMA_VERSION == 4
    assert sorted(manifest["summaries"]) == ["alignment", "differences", "distribution", "fleet"]
    assert "system" not in manifest
    assert sorted(manifest["tables"]) == sorted([FINDINGS_TABLE, "windows", SUMMARY_TABLE + "ranks",
                                                 *(SUMMARY_TABLE + p for p in PROBES)])
    assert manifest["summaries"]["fleet"] == [{"ranks": 3, "measured": 3, "nodes": 3}]
    records = [record for _, record in fleet_nodes(SMALL, SMALL_NS)]
    figures = sorted(r["figures"]["detour_noise_pct"] for r in records)
    noise = next(d for d in manifest["summaries"]["distribution"]
                 if d["what"] == "detour_noise_pct")
    assert (noise["ranks"], noise["min"], noise["p50"], noise["max"]) == (3, *figures)
    assert noise["p50"] < noise["p90"] < noise["p99"] < noise["max"]
    # the quiet node, the daemon's (~1 point in 50 ms) and the interrupt storm's (+1.5)
    assert figures[0] < 0.5 < figures[1] < 1.5 < figures[2]


def test_a_loaded_fleet_gives_back_the_rows_the_ranks_sent(written):
    records = [record for _, record in fleet_nodes(SMALL, SMALL_NS)]
    bundle = noisescope.load(written)  # the tables pass the footer checks
    for probe in PROBES:
        expected = [{**s, "rank": r["rank"], "node": r["node"]}
                    for r in records for s in r["summaries"][probe]]
        assert bundle.summaries[probe] == expected
    ranks = bundle.summaries["ranks"]
    assert [(r["rank"], r["node"], r["status"], r["cpus"]) for r in ranks] == \
        [(r["rank"], r["node"], "ok", r["cpus"]) for r in records]
    assert [{k: r[k] for k in rec["figures"]} for r, rec in zip(ranks, records, strict=True)] == \
        [rec["figures"] for rec in records]
    assert ranks[0]["reason"] is None and ranks[0]["offset_ns"] is None  # missing stays None
    assert [r["host_kernel_release"] for r in ranks] == \
        [OTHER_KERNEL if r["rank"] == SMALL.other_kernel else "6.6.30-rt30" for r in records]
    assert bundle.system == [{**f, "rank": r["rank"], "node": r["node"]}
                             for r in records for f in r["system"]]
    assert bundle.manifest["summaries"] is not bundle.summaries  # the manifest stays small


def test_a_schema_2_fleet_reads_as_the_same_fleet_written_now(written):
    old, new = noisescope.load(OLD_FLEET), noisescope.load(written)
    assert json.loads((OLD_FLEET / "manifest.json").read_text())["schema_version"] == 2
    assert old.manifest["schema_version"] == SCHEMA_VERSION  # upgraded in memory
    for kind in ("alignment", "differences"):
        assert old.summaries[kind] == new.summaries[kind], kind
    for kind in ("ranks", *PROBES):  # (the rows written now may have fields added since)
        assert [{k: r[k] for k in o} for o, r in zip(old.summaries[kind], new.summaries[kind],
                                                      strict=True)] == old.summaries[kind], kind
    host = next(d for d in old.summaries["differences"] if d["kind"] == "host")
    assert host["values"] == {"6.6.30-rt30": 2, OTHER_KERNEL: 1}  # counts since schema 3
    # (the checks made now: those of then and some added since)
    assert all(f in new.system for f in old.system) and {f["rank"] for f in old.system} == \
        {0, 1, 2}
    assert shown(old)[2:] == shown(new)[2:]  # (the first lines: when and how)


def shown(bundle) -> list[str]:
    console = Console(file=io.StringIO(), width=200)
    print_blocks(fleet_blocks(bundle), console)
    return console.file.getvalue().splitlines()


def test_a_fleet_of_this_schema_is_refused_by_a_reader_of_the_one_before_with_one_line(
        written, monkeypatch):
    import noisescope.bundle

    monkeypatch.setattr(noisescope.bundle, "SCHEMA_VERSION", SCHEMA_VERSION - 1)
    with pytest.raises(UsageError, match=f"written by a newer noisescope .schema {SCHEMA_VERSION}, "
                                         f"this one reads up to {SCHEMA_VERSION - 1}.") as error:
        noisescope.load(written)
    assert "\n" not in str(error.value)


def test_summary_rows_of_every_shape_come_back_from_a_bundle_table(tmp_path):
    """What per-CPU summaries hold: integers, floats, missing values, text, flags, lists
    and nested dicts (the injections a scan's detours found)."""
    found = {"injected": 500, "found": 498, "found_pct": 99.6, "injected_mean_ns": 200_000}
    rows = [{"rank": 0, "node": "a", "cpu": 2, "detours": 10, "noise_pct": 0.25, "p50_ns": None,
             "percentiles_from": "trace", "rt": True, "cpus": [2, 3], "injections": found},
            {"rank": 1, "node": None, "cpu": 3, "detours": 0, "noise_pct": None, "p50_ns": 7.5,
             "percentiles_from": None, "rt": None, "cpus": [], "injections": None}]
    manifest = small_fleet().manifest | {"summaries": {}, "tables": {}}
    noisescope.Bundle(manifest, {SUMMARY_TABLE + "detour": Table.from_rows(rows)}).write(
        tmp_path / "b")
    assert noisescope.load(tmp_path / "b").summaries["detour"] == rows
