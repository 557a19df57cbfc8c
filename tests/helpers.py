"""Helpers for tests that measure on a shared, noisy machine."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ATTEMPTS = 4
BUSY_FRACTION = 0.02


def run_delay_fraction(bundle) -> float:
    """Largest share of measured time any sampler spent waiting for its CPU."""
    worst = 0.0
    for rows in bundle.summaries.values():
        for s in rows:
            if s.get("measured_ns"):
                worst = max(worst, s["run_delay_ns"] / s["measured_ns"])
    return worst


def measure_quietly(measure: Callable[[], T], good: Callable[[T], bool],
                    busy: Callable[[T], float]) -> T:
    """Run `measure` until `good` holds, retrying (a bounded number of times)
    only when another task took the sampler's CPU during the attempt."""
    result = measure()
    for _ in range(ATTEMPTS - 1):
        if good(result) or busy(result) < BUSY_FRACTION:
            break
        result = measure()
    return result
