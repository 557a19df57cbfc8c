"""Checks before a measurement that every command shares (scan, timerlat,
bench/run, inject, cluster): what the process may use, and what would
mislead the result. They decide values or return warnings; they never refuse.
"""

from __future__ import annotations

from collections.abc import Iterable

from .diagnostics import Code, Diagnostic
from .host import HostFacts
from .privileges import can_use_fifo

# Injectors preempt whatever runs on their CPU, the samplers included, so that
# the noise they inject is on time.
INJECTOR_PRIORITY = 99


def injector_priority() -> int:
    """The SCHED_FIFO priority of noise injectors: INJECTOR_PRIORITY where it
    is permitted, else 0 (normal priority)."""
    return INJECTOR_PRIORITY if can_use_fifo(INJECTOR_PRIORITY) else 0


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
