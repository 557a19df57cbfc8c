"""Pre-run checks shared by the commands: the injectors' priority and the
frequency-scaling warning, as scan and bench/run see them."""

from __future__ import annotations

from dataclasses import replace

from noisescope import prechecks
from noisescope.diagnostics import Code
from noisescope.experiment import Configuration, Experiment, prepare
from noisescope.host import read_host_facts
from noisescope.placement import Placement
from noisescope.probes import Injection
from noisescope.scan import ScanOptions, plan
from noisescope.workload import Workload

from ..conftest import HOSTS

# CPUs 0 and 1 exist on every test machine (scan and bench check the affinity)
MIXED = {"0": "schedutil", "1": "performance", "2": "powersave", "3": "performance"}


def test_frequency_scaling_names_the_governors_of_the_given_cpus_only():
    facts = replace(read_host_facts(HOSTS / "laptop"), governors=MIXED)
    [found] = prechecks.frequency_scaling(facts, [2, 1, 3], "the CPUs", "it varies")
    assert found.code == Code.FREQUENCY_SCALING
    assert found.message == "frequency governor powersave on the CPUs: it varies"
    [both] = prechecks.frequency_scaling(facts, (2, 0), "the CPUs", "it varies")
    assert both.message.startswith("frequency governor powersave, schedutil on")
    assert prechecks.frequency_scaling(facts, [1, 3], "the CPUs", "it varies") == []


def test_scan_and_bench_warn_of_scaling_on_the_cpus_they_use():
    facts = replace(read_host_facts(HOSTS / "laptop"), governors=MIXED)

    def scaling(diagnostics):
        return [d.message for d in diagnostics if d.code == Code.FREQUENCY_SCALING]

    assert scaling(plan(ScanOptions(cpus=(0,), probes=("detour",)), facts).diagnostics) == [
        "frequency governor schedutil on measured CPUs: the work per quantum can change with "
        "the clock speed"]
    assert scaling(plan(ScanOptions(cpus=(1,), probes=("detour",)), facts).diagnostics) == []

    def bench_on(cpu: int) -> Experiment:
        return Experiment(workloads=(Workload("t", ("true",)),),
                          configurations=(Configuration("pinned", Placement(cpus=(cpu,))),))

    assert scaling(prepare(bench_on(0), facts).diagnostics) == [
        "frequency governor schedutil on the workload CPUs: run times follow the clock speed"]
    assert scaling(prepare(bench_on(1), facts).diagnostics) == []


def test_injectors_run_at_the_top_fifo_priority_where_permitted(monkeypatch):
    asked = []
    for permitted, expected in ((True, 99), (False, 0)):
        monkeypatch.setattr(prechecks, "can_use_fifo", lambda p, ok=permitted: asked.append(p) or ok)
        assert prechecks.injector_priority() == expected
    assert asked == [99, 99]
    # bench/run, SCHED_FIFO refused: the runs' injectors at normal priority, and a warning
    monkeypatch.setattr(prechecks, "can_use_fifo", lambda priority: False)
    facts = read_host_facts(HOSTS / "laptop")
    noisy = Configuration("noisy", injections=(Injection(1, 1000.0, 20_000, "thread"),))
    bench = Experiment(workloads=(Workload("t", ("true",)),), configurations=(noisy,))
    prepared = prepare(bench, facts)
    assert prepared.injector_priority == 0
    assert any(d.code == Code.PRIVILEGES and "injectors run at normal priority" in d.message
               for d in prepared.diagnostics)
