"""The osnoise tracer's path (issue 12, item 6), on the rig kernel and on
Debian's PREEMPT_RT kernel: `scan --osnoise on` starts the tracer in the
private instance without its workload (OSNOISE_WORKLOAD off), records its
noise events beside the standard ones, and restores osnoise/options after.
The causes worked out from the osnoise events (the kernel's own accounting)
and from the entry/exit events agree in kind on every CPU."""

from __future__ import annotations

import pytest

from noisescope.trace import explain_detours
from noisescope.units import parse_cpu_list

HANDLERS = ("tick", "timer", "irq", "ipi", "softirq", "nmi")
NOTICEABLE = 0.005  # a cause with this share of a CPU's handler time must be seen by both


def handler_time(attribution, cpu: int) -> dict[tuple[str, str], int]:
    causes = attribution.causes.filter(attribution.causes["cpu"] == cpu)
    total: dict[tuple[str, str], int] = {}
    for cause, detail, ns in zip(causes["cause"].tolist(), causes["detail"].tolist(),
                                 causes["duration_ns"].tolist(), strict=True):
        if cause in HANDLERS:
            total[(cause, detail)] = total.get((cause, detail), 0) + ns
    return total


@pytest.fixture(scope="module", params=["rig", "rt"])
def osnoise_scan(request):
    guest = request.getfixturevalue("rig_guest" if request.param == "rig" else "rt_guest")
    return guest, guest.bundle("scan-all" if request.param == "rig" else "scan-rt")


def test_the_tracer_ran_without_its_workload_and_its_events_were_recorded(osnoise_scan):
    _, bundle = osnoise_scan
    assert bundle.manifest["trace"]["osnoise_tracer"] == "running without its workload"
    names = set(bundle.table("events")["event"].tolist())
    assert {"irq_noise", "thread_noise"} <= names
    # PREEMPT_RT runs softirqs in threads: the tracer counts them as thread noise there
    assert ("softirq_noise" in names) == (bundle.host.preemption != "rt")
    # no osnoise sampling thread ran: the samplers were noisescope's own
    switches = bundle.table("sched_switch")
    assert not any(name.startswith("osnoise/") for name in switches["next_comm"].tolist())


def test_osnoise_options_are_restored(rt_guest):
    options = rt_guest.succeeded("osnoise-options-after").stdout.split()
    assert "OSNOISE_WORKLOAD" in options and "NO_OSNOISE_WORKLOAD" not in options


def test_causes_from_osnoise_events_agree_in_kind_with_the_entry_exit_events(osnoise_scan):
    """On every CPU; a nohz_full CPU running only its sampler may have taken
    no interrupt at all in the scan's 2 s (its tick stopped), the others must
    have some."""
    _, bundle = osnoise_scan
    native = explain_detours(bundle, osnoise="fallback")
    kernel = explain_detours(bundle, osnoise="prefer")
    nohz_full = set(parse_cpu_list(bundle.host.nohz_full_cpus)) if bundle.host.nohz_full_cpus else set()
    for cpu in bundle.parameters["cpus"]:
        ours, theirs = handler_time(native, cpu), handler_time(kernel, cpu)
        assert ours or cpu in nohz_full, f"CPU {cpu}: no handler time explained"
        for one, other in ((ours, theirs), (theirs, ours)):
            total = sum(one.values())
            missing = {k for k, ns in one.items() if ns >= NOTICEABLE * total and k not in other}
            assert not missing, f"CPU {cpu}: {missing} only in one of {ours} / {theirs}"


def test_every_thread_the_switches_name_the_osnoise_tracer_names_too(osnoise_scan):
    """Threads stay with the sched_switch events in both attributions; the
    tracer's thread_noise events are the independent check of their names."""
    _, bundle = osnoise_scan
    native = explain_detours(bundle)
    events = bundle.table("events")
    for cpu in bundle.parameters["cpus"]:
        causes = native.causes.filter((native.causes["cpu"] == cpu)
                                      & (native.causes["cause"] == "thread"))
        named = events.filter((events["cpu"] == cpu) & (events["event"] == "thread_noise"))
        assert set(causes["detail"].tolist()) <= set(named["name"].tolist()), cpu
