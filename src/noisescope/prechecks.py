"""Checks before a measurement that every command shares (scan, timerlat,
bench/run, inject, cluster): what the process may use, and what would
mislead the result. They decide values or return warnings; they never refuse
(refusals are UsageErrors where the options are checked).
"""

from __future__ import annotations

from collections.abc import Iterable

from .diagnostics import Code, Diagnostic
from .host import HostFacts
from .privileges import can_use_fifo
from .units import SECOND, format_cpu_list, format_duration

# Injectors preempt whatever runs on their CPU, the samplers included, so that
# the noise they inject is on time.
INJECTOR_PRIORITY = 99
# Shorter measurements than this miss rare detours; their tails are not stable.
SHORT_MEASUREMENT_NS = 5 * SECOND


def injector_priority() -> int:
    """The SCHED_FIFO priority of noise injectors: INJECTOR_PRIORITY where it
    is permitted, else 0 (normal priority)."""
    return INJECTOR_PRIORITY if can_use_fifo(INJECTOR_PRIORITY) else 0


def sampler_priority(requested: int, rt: bool) -> tuple[int, str]:
    """The SCHED_FIFO priority of the measuring threads (0: normal priority)
    when `rt` asks for `requested`, and how the manifest's privileges say it."""
    if not rt:
        return 0, "not requested"
    if can_use_fifo(requested):
        return requested, f"SCHED_FIFO priority {requested}"
    return 0, "skipped: SCHED_FIFO not permitted (needs root or CAP_SYS_NICE)"


def not_isolated(facts: HostFacts, cpus: Iterable[int]) -> list[Diagnostic]:
    """A warning naming the measured CPUs that are not both isolcpus and nohz_full."""
    quiet = set(facts.isolated) & set(facts.nohz_full)
    shared = [c for c in cpus if c not in quiet]
    if not shared:
        return []
    return [Diagnostic(Code.CPU_NOT_ISOLATED,
                       f"CPUs {format_cpu_list(shared)} are not isolated "
                       f"(isolcpus/nohz_full): the result includes housekeeping noise")]


def too_short(duration_ns: int) -> list[Diagnostic]:
    """A warning when each probe measures less than SHORT_MEASUREMENT_NS."""
    if duration_ns >= SHORT_MEASUREMENT_NS:
        return []
    return [Diagnostic(Code.TOO_SHORT, f"each probe measures only {format_duration(duration_ns)}")]


def frequency_scaling(facts: HostFacts, cpus: Iterable[int], where: str,
                      effect: str) -> list[Diagnostic]:
    """A warning when a governor other than 'performance' drives `cpus`:
    "frequency governor G on WHERE: EFFECT"."""
    wanted = set(cpus)
    scaled = sorted({g for c, g in facts.governors.items() if int(c) in wanted} - {"performance"})
    if not scaled:
        return []
    return [Diagnostic(Code.FREQUENCY_SCALING,
                       f"frequency governor {', '.join(scaled)} on {where}: {effect}")]
