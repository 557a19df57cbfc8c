"""Checking measurements against injected noise (the ground truth).

An injection is found when a detour on the same CPU covers it entirely:
the sampler lost the CPU at least from the injection's start to its end.
Only injections that fall inside measured windows count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tables import Table, inside_windows

# Timestamps are rounded to whole nanoseconds independently; allow for it.
ROUNDING_NS = 1


@dataclass(frozen=True)
class InjectionMatch:
    cpu: int
    injected: int  # inside measured windows
    found: int
    injected_ns: np.ndarray  # length of every injection inside the windows
    detected_ns: np.ndarray  # length of the covering detour, -1 where none

    @property
    def fraction(self) -> float:
        return self.found / self.injected if self.injected else float("nan")

    def summary(self) -> dict:
        found = self.detected_ns >= 0
        return {
            "cpu": self.cpu,
            "injected": self.injected,
            "found": self.found,
            "found_pct": 100.0 * self.fraction if self.injected else None,
            "injected_mean_ns": float(self.injected_ns.mean()) if self.injected else None,
            "detected_mean_ns": float(self.detected_ns[found].mean()) if found.any() else None,
        }


def match_injections(detours: Table, injections: Table, windows: Table, cpu: int,
                     probe: str = "detour") -> InjectionMatch:
    inj = injections.where(cpu=cpu)
    win = windows.where(cpu=cpu, probe=probe)
    starts = inj["start_ns"]
    ends = starts + inj["duration_ns"]
    keep = inside_windows(starts, ends, win)
    starts, ends = starts[keep], ends[keep]
    det = detours.where(cpu=cpu)
    order = np.argsort(det["start_ns"])
    d_start, d_len = det["start_ns"][order], det["duration_ns"][order]
    i = np.searchsorted(d_start, starts + ROUNDING_NS, side="right") - 1
    valid = i >= 0
    i = np.clip(i, 0, None)
    covers = valid & (d_start[i] + d_len[i] + ROUNDING_NS >= ends) if len(d_start) else \
        np.zeros(len(starts), bool)
    detected = np.where(covers, d_len[i] if len(d_len) else -1, -1)
    return InjectionMatch(cpu, int(len(starts)), int(covers.sum()), ends - starts, detected)


def match_probe_injections(probe: str, tables: dict[str, Table], summaries: list[dict]) -> None:
    """Complete the `injections` section of each per-CPU summary that has one (the
    detour probe's, on CPUs with injections: what the injector counted) with what
    the probe's detours found."""
    for s in summaries:
        if "injections" in s:
            found = match_injections(tables["detours"], tables["injections"], tables["windows"],
                                     s["cpu"], probe)
            s["injections"] = {**found.summary(), **s["injections"]}
