"""The acceptance checks of attribution, shared by the tests on a captured
trace (no root needed) and on live scans (root and tracefs)."""

from __future__ import annotations

import numpy as np

from noisescope.tables import Table, inside_windows


def local_timer_interrupts(events: Table, cpu: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(entry, exit, ran the tick's hrtimer) of every local timer interrupt on a CPU."""
    timer = events.filter((events["cpu"] == cpu) & np.isin(
        events["event"], ["local_timer_entry", "local_timer_exit", "hrtimer_expire_entry"]))
    pairs: list[tuple[int, int, bool]] = []
    pending: list | None = None  # [entry, ran the tick]
    for ts, name, function in zip(timer["timestamp_ns"].tolist(), timer["event"].tolist(),
                                  timer["name"].tolist(), strict=True):
        if name == "local_timer_entry":
            pending = [ts, False]
        elif name == "hrtimer_expire_entry" and pending is not None:
            pending[1] |= function.startswith("tick_")
        elif name == "local_timer_exit" and pending is not None:
            pairs.append((pending[0], ts, pending[1]))
            pending = None
    entries, exits, ticks = zip(*pairs, strict=True) if pairs else ((), (), ())
    return np.array(entries, np.int64), np.array(exits, np.int64), np.array(ticks, bool)


def cause_time(causes: Table) -> dict[int, dict[str, int]]:
    """Per detour start: time per cause."""
    out: dict[int, dict[str, int]] = {}
    for start, cause, ns in zip(causes["start_ns"].tolist(), causes["cause"].tolist(),
                                causes["duration_ns"].tolist(), strict=True):
        out.setdefault(start, {}).setdefault(cause, 0)
        out[start][cause] += ns
    return out


def local_timers_explained(events: Table, detours: Table, causes: Table, windows: Table,
                           cpu: int) -> tuple[np.ndarray, np.ndarray]:
    """For each local timer interrupt inside a window of `cpu`: whether a
    detour covers it and gives its cause ('tick' when it ran the tick, else
    'timer') at least its handler time, and at most the handler time of all
    the interrupts of that cause inside the detour (the kernel runs no
    handler of another kind inside the timer's, so none is counted twice);
    and whether it ran the tick."""
    entry, exit_, tick = local_timer_interrupts(events, cpu)
    inside = inside_windows(entry, exit_, windows.where(cpu=cpu))
    entry, exit_, tick = entry[inside], exit_[inside], tick[inside]
    mine = detours.where(cpu=cpu)
    i = np.searchsorted(mine["start_ns"], entry, side="right") - 1
    covered = (i >= 0) & (exit_ <= mine["start_ns"][i] + mine["duration_ns"][i])
    times = cause_time(causes.where(cpu=cpu))
    kind = np.where(tick, "tick", "timer")
    handlers: dict[tuple[int, str], int] = {}  # (detour start, cause): handler time inside
    for k in np.flatnonzero(covered).tolist():
        key = (int(mine["start_ns"][i[k]]), str(kind[k]))
        handlers[key] = handlers.get(key, 0) + int(exit_[k] - entry[k])
    ok = np.zeros(len(entry), bool)
    for k in np.flatnonzero(covered).tolist():
        start = int(mine["start_ns"][i[k]])
        named = times[start].get(str(kind[k]), 0)
        ok[k] = exit_[k] - entry[k] <= named <= handlers[(start, str(kind[k]))]
    return ok, tick


# The injecting thread's own time around its spin: it returns from
# clock_nanosleep (the kernel's path back to user space after the switch to
# it) and goes to sleep again (the syscall and the switch away). With tracing
# on this VM that is 3-25 us mostly (median ~12 us under load), yet up to
# 45 us in some runs (a host preemption lands on whichever thread runs);
# 60 us bounds it. A thread whose time was counted twice shows its spin again
# on top, more than the bound for spins longer than it.
INJECTOR_OVERHEAD_NS = 60_000


def injector_time(injections: Table, detours: Table, causes: Table, windows: Table,
                  cpu: int) -> tuple[np.ndarray, np.ndarray]:
    """For each injection inside a window: its recorded length, and the time
    the detour covering it gives to the thread `ns-inject/<cpu>` (0 if none)."""
    inj = injections.where(cpu=cpu)
    starts = inj["start_ns"]
    ends = starts + inj["duration_ns"]
    keep = inside_windows(starts, ends, windows.where(cpu=cpu))
    starts, ends = starts[keep], ends[keep]
    injector = causes.filter((causes["cpu"] == cpu) & (causes["cause"] == "thread")
                             & (causes["detail"] == f"ns-inject/{cpu}"))
    thread_ns = dict(zip(injector["start_ns"].tolist(), injector["duration_ns"].tolist(), strict=True))
    mine = detours.where(cpu=cpu)
    i = np.searchsorted(mine["start_ns"], starts, side="right") - 1
    named = np.array([thread_ns.get(int(mine["start_ns"][k]), 0) if k >= 0 else 0
                      for k in i.tolist()], np.int64)
    return ends - starts, named


def injections_attributed(injections: Table, detours: Table, causes: Table, windows: Table,
                          cpu: int, overhead_ns: int = INJECTOR_OVERHEAD_NS) -> np.ndarray:
    """For each injection inside a window: whether the detour covering it
    gives the thread `ns-inject/<cpu>` at least 95% of the injected time and
    at most the injected time plus the thread's own overhead around it."""
    injected, named = injector_time(injections, detours, causes, windows, cpu)
    return (named >= 0.95 * injected) & (named <= injected + overhead_ns)
