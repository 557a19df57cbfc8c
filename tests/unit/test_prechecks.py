"""Pre-run checks shared by the commands: the injectors' and samplers' FIFO
priority, the frequency-scaling, isolation and too-short warnings, as scan and
bench/run see them."""

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


def test_samplers_get_the_requested_fifo_priority_only_where_permitted(monkeypatch):
    monkeypatch.setattr(prechecks, "can_use_fifo", lambda priority: priority <= 50)
    assert prechecks.sampler_priority(40, rt=True) == (40, "SCHED_FIFO priority 40")
    assert prechecks.sampler_priority(80, rt=True) == (
        0, "skipped: SCHED_FIFO not permitted (needs root or CAP_SYS_NICE)")
    assert prechecks.sampler_priority(40, rt=False) == (0, "not requested")
    # scan: the refused priority is also a warning
    refused = plan(ScanOptions(cpus=(0,), probes=("detour",), rt=True, priority=80),
                   read_host_facts(HOSTS / "laptop"))
    assert refused.priority == 0 and any(
        d.code == Code.PRIVILEGES and "priority 80 skipped" in d.message
        for d in refused.diagnostics)


def test_only_cpus_both_isolated_and_nohz_full_count_as_isolated():
    tuned = read_host_facts(HOSTS / "tuned-node")  # isolcpus and nohz_full 2-7,10-15
    assert prechecks.not_isolated(tuned, [2, 3, 10]) == []
    [shared] = prechecks.not_isolated(tuned, [0, 2, 8, 9])
    assert shared.code == Code.CPU_NOT_ISOLATED and shared.message.startswith("CPUs 0,8-9 ")
    half = replace(tuned, nohz_full_cpus="2-3")
    assert "CPUs 4 " in prechecks.not_isolated(half, [2, 4])[0].message


def test_a_measurement_under_five_seconds_per_probe_is_too_short():
    assert prechecks.too_short(5 * 10**9) == []
    [short] = prechecks.too_short(2 * 10**9)
    assert short.code == Code.TOO_SHORT and short.message == "each probe measures only 2 s"
