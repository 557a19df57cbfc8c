"""Checking measurements against injected noise (the ground truth).

An injection is found when a detour on the same CPU covers it entirely:
the sampler lost the CPU at least from the injection's start to its end.
Only injections that fall inside measured windows count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tables import SpooledTable, Table, cpu_batches, inside_windows

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


def match_injections(detours: Table | SpooledTable, injections: Table, windows: Table, cpu: int,
                     probe: str = "detour") -> InjectionMatch:
    """Which injections on `cpu` a detour covers; the detours are read a batch
    at a time in order of their start (a spooled table is never whole in memory)."""
    inj = injections.where(cpu=cpu)
    win = windows.where(cpu=cpu, probe=probe)
    starts = inj["start_ns"]
    ends = starts + inj["duration_ns"]
    keep = inside_windows(starts, ends, win)
    order = np.argsort(starts[keep], kind="stable")
    starts, ends = starts[keep][order], ends[keep][order]
    # each injection's candidate: the last detour that starts by its start (+ rounding)
    keys = starts + ROUNDING_NS
    detected = np.full(len(starts), -1, np.int64)

    def resolve(d_start: np.ndarray, d_len: np.ndarray, lo: int, hi: int) -> None:
        i = np.searchsorted(d_start, keys[lo:hi], side="right") - 1
        valid = i >= 0
        i = np.clip(i, 0, None)
        covers = valid & (d_start[i] + d_len[i] + ROUNDING_NS >= ends[lo:hi])
        detected[lo:hi] = np.where(covers, d_len[i], -1)

    done = 0
    previous: tuple[np.ndarray, np.ndarray] | None = None  # a batch, after the last detour before it
    for batch in cpu_batches(detours, cpu, "start_ns"):
        if not batch.rows:
            continue
        if previous is not None:  # the keys before this batch's first detour are answered
            upto = int(np.searchsorted(keys, batch["start_ns"][0], side="left"))
            resolve(*previous, done, upto)
            done = upto
        carried = (previous[0][-1:], previous[1][-1:]) if previous is not None else ((), ())
        previous = (np.concatenate((carried[0], batch["start_ns"])).astype(np.int64),
                    np.concatenate((carried[1], batch["duration_ns"])).astype(np.int64))
    if previous is not None:
        resolve(*previous, done, len(keys))
    return InjectionMatch(cpu, int(len(starts)), int((detected >= 0).sum()), ends - starts,
                          detected)


def match_probe_injections(probe: str, tables: dict[str, Table | SpooledTable],
                           summaries: list[dict]) -> None:
    """Complete the `injections` section of each per-CPU summary that has one (the
    detour probe's, on CPUs with injections: what the injector counted) with what
    the probe's detours found."""
    for s in summaries:
        if "injections" in s:
            found = match_injections(tables["detours"], tables["injections"], tables["windows"],
                                     s["cpu"], probe)
            s["injections"] = {**found.summary(), **s["injections"]}
