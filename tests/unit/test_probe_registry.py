"""The probe interface: a probe is one `Probe` subclass and one registry line,
and `scan` runs whatever the registry holds (docs/architecture.md, "Adding a
probe", shows this same probe)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest

from noisescope import probes
from noisescope.errors import UsageError, option
from noisescope.probes.base import CpuRun, Probe
from noisescope.scan import ScanOptions, scan
from noisescope.tables import Table
from noisescope.trace.scanning import TraceOptions

DURATION_NS = 300_000_000
RUNTIME_NS = 100_000_000  # three windows


@dataclass(frozen=True)
class IdleSettings:
    duration_ns: int  # a ScanOptions field, taken by name


class IdleProbe(Probe):
    """Sleeps through every window on each CPU (the native core's `idle` sampler)
    and records how long each CPU was away."""

    name = "idle"
    Settings = IdleSettings
    sleeps = True
    default = False
    tables = ("idle",)
    constants = {"idle_version": 1}

    def check_duration(self, settings: IdleSettings, duration_ns: int) -> None:
        if duration_ns < 2 * RUNTIME_NS:
            raise UsageError("too short to sleep twice", f"use a longer {option('duration_ns')}")

    def expected_samples(self, settings, schedule, ncpus: int) -> int:
        return 0  # no samples, only windows

    def specs(self, ctx, settings) -> list[dict]:
        return [{"cpu": cpu} for cpu in ctx.cpus]

    def collect(self, run: CpuRun, settings: IdleSettings) -> tuple[dict[str, Table], dict]:
        table = Table({"cpu": np.array([run.cpu], np.int32),
                       "measured_ns": np.array([run.stats["measured_ns"]], np.int64)})
        return {"idle": table}, {**run.stats, "planned_ns": settings.duration_ns}


@pytest.fixture
def with_idle_probe(monkeypatch):
    monkeypatch.setitem(probes.REGISTRY, "idle", IdleProbe())  # the one registry line


def _options(duration_ns: int = DURATION_NS) -> ScanOptions:
    cpu = min(os.sched_getaffinity(0))
    return ScanOptions(cpus=(cpu,), duration_ns=duration_ns, probes=("idle",),
                       runtime_ns=RUNTIME_NS, period_ns=RUNTIME_NS,
                       trace=TraceOptions(enabled=False))


def test_a_registered_probe_is_checked_run_and_recorded_by_scan(with_idle_probe):
    bundle = scan(_options())
    cpu = min(os.sched_getaffinity(0))
    [summary] = bundle.summaries["idle"]
    assert summary["cpu"] == cpu and summary["planned_ns"] == DURATION_NS
    assert summary["windows"] == 3
    # The idle sampler sleeps to each window's end: the windows add up to the
    # duration, give or take the wakeup latency of three sleeps (bounded both ways).
    assert 0.9 * DURATION_NS <= summary["measured_ns"] <= 1.5 * DURATION_NS
    table = bundle.table("idle")
    assert table["cpu"].tolist() == [cpu] and table["measured_ns"].tolist() == [
        summary["measured_ns"]]
    assert bundle.table("windows")["probe"].tolist() == ["idle"] * 3
    assert bundle.parameters["idle_version"] == 1
    # The constants of the other probes are recorded as before.
    assert bundle.parameters["hourglass_ns"] == 1000 and bundle.parameters["unit_iterations"] == 32


def test_a_registered_probe_checks_before_measuring(with_idle_probe, monkeypatch):
    def no_measuring(*args, **kwargs):
        raise AssertionError("measured although a check failed")

    monkeypatch.setattr(IdleProbe, "specs", no_measuring)
    with pytest.raises(UsageError, match="too short to sleep twice"):
        scan(_options(duration_ns=RUNTIME_NS))


def test_an_unregistered_probe_is_refused():
    with pytest.raises(UsageError, match="unknown probe idle; choose from detour,ftq,fwq,timerlat"):
        scan(_options())


def test_the_registry_sets_the_choices_and_the_default_scan():
    assert probes.PROBES == ("detour", "ftq", "fwq", "timerlat")
    assert probes.DEFAULT_PROBES == ("detour", "ftq", "fwq")  # timerlat sleeps, has its command
    assert [name for name, p in probes.REGISTRY.items() if p.sleeps] == ["timerlat"]
