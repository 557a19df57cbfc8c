"""Bundles written with an older manifest schema still load, upgraded in memory."""

from __future__ import annotations

import json

import pytest

import noisescope
from noisescope.errors import UsageError
from noisescope.host import read_host_facts
from noisescope.manifest import SCHEMA_VERSION
from noisescope.render.terminal import detour_table, hourglass_table

from ..conftest import HOSTS
from .test_bundle import validate

CLOCK = {"counter": "tsc", "ticks_per_second": 2.6e9, "frequency_source": "kernel",
         "calibrated_ticks_per_second": None, "origin_ticks": 0, "origin_monotonic_raw_ns": 0,
         "origin_realtime_ns": 0}


def schema_1_scan(**changes) -> dict:
    """A scan manifest as noisescope wrote it with schema 1 (ticks named cycles)."""
    detour = {"cpu": 0, "tid": 1, "windows": 1, "measured_ns": 1_000_000_000, "run_delay_ns": 0,
              "involuntary_switches": 0, "minor_faults": 0, "major_faults": 0,
              "threshold_ns": 2000, "detours": 10, "stored": 10, "overflow": 0,
              "detours_per_s": 10.0, "lost_ns": 50_000, "noise_pct": 0.005, "p50_ns": 4000.0,
              "p99_ns": 9000.0, "p999_ns": 9000.0, "max_ns": 9000, "percentiles_from": "detours",
              "iterations": 40_000_000, "resolution_cycles": 26, "resolution_ns": 10.0,
              "mean_loop_cycles": 65.0, "max_gap_cycles": 23400, "gaps_over_1000_cycles": 123,
              **changes}
    host = read_host_facts(str(HOSTS / "kvm-guest")).to_dict()
    return {"schema_version": 1, "kind": "scan", "tool": {"name": "noisescope",
            "version": "0.1.0"}, "argv": [], "label": "old", "started_utc": "2026-01-01T00:00:00Z",
            "finished_utc": "2026-01-01T00:00:01Z", "complete": True, "host": host,
            "clock": CLOCK, "parameters": {
                "cpus": [0], "duration_ns": 10**9, "probes": ["detour"], "threshold_ns": 2000,
                "priority": 0, "schedule": {"runtime_ns": 10**9, "period_ns": 10**9,
                                            "windows": 1, "last_runtime_ns": 10**9},
                "hourglass_cycles": 1000},
            "summaries": {"detour": [detour]}, "warnings": [], "tables": {}}


def test_a_schema_1_scan_loads_with_ticks_named_ticks_and_the_cut_off_in_ns(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(schema_1_scan()))
    bundle = noisescope.load(tmp_path)
    assert bundle.manifest["schema_version"] == SCHEMA_VERSION == 4  # through 2 and 3
    s = bundle.summaries["detour"][0]
    assert s["resolution_ticks"] == 26 and s["hourglass_gaps"] == 123
    assert s["mean_gap_ns"] == pytest.approx(25.0)  # 1 s over 40 million reads
    # that scan's cut-off was 1000 ticks of a 2.6 GHz TSC
    assert s["hourglass_ns"] == 385 and bundle.parameters["hourglass_ns"] == 385
    assert not {k for k in s if "cycles" in k} and "hourglass_cycles" not in bundle.parameters
    validate(bundle.manifest)
    hourglass = hourglass_table(bundle.summaries["detour"])
    assert [c.header for c in hourglass.columns][-1] == "gaps > 385 ns"
    assert [c.header for c in detour_table(bundle.summaries["detour"]).columns][-2] == "loop ticks"


def test_a_damaged_schema_1_summary_is_a_clear_error(tmp_path):
    manifest = schema_1_scan()
    del manifest["summaries"]["detour"][0]["resolution_ns"]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UsageError, match="manifest.json is corrupt"):
        noisescope.load(tmp_path)
