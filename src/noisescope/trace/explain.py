"""Per-CPU explanation of detours (or late wakeups): the breakdown by cause
and the worst ones with the events inside them. Plain data (JSON-safe dicts), stored
in the manifest as summaries["attribution"] and rendered by render/."""

from __future__ import annotations

import numpy as np

from ..tables import Table
from .store import EventSource

WORST_PER_CPU = 3  # worst detours stored per CPU by a scan
MAX_CHAIN = 20  # events listed per detour (the rest are counted)


def breakdown(detours: Table, causes: Table, cpu: int) -> list[dict]:
    """Cause rows of one CPU, largest total first: the number of detours the
    cause took part in, its total and largest time, and its share of all
    detour time on the CPU."""
    rows = causes.where(cpu=cpu)
    noise = int(detours.where(cpu=cpu)["duration_ns"].sum())
    if rows.rows == 0:
        return []
    totals, counts, largest, pairs = [], [], [], []
    for cause in np.unique(rows["cause"]).tolist():  # a handful; details by numpy (no tuples per row)
        mine = rows["cause"] == cause
        details, inverse = np.unique(rows["detail"][mine], return_inverse=True)
        durations = rows["duration_ns"][mine]
        most = np.zeros(len(details), np.int64)
        np.maximum.at(most, inverse, durations)
        totals.append(np.bincount(inverse, weights=durations).astype(np.int64))
        counts.append(np.bincount(inverse))
        largest.append(most)
        pairs += [(cause, detail) for detail in details.tolist()]
    total, count, most = np.concatenate(totals), np.concatenate(counts), np.concatenate(largest)
    return [{"cause": pairs[i][0], "detail": pairs[i][1], "count": int(count[i]),
             "total_ns": int(total[i]), "share_pct": 100.0 * total[i] / noise if noise else 0.0,
             "max_ns": int(most[i])} for i in np.argsort(-total, kind="stable").tolist()]


def chain(trace: EventSource, cpu: int, start_ns: int, end_ns: int) -> tuple[list[dict], int]:
    """The events of one CPU inside [start, end], as offsets from start;
    returns at most MAX_CHAIN and the number left out."""
    items = []
    inside = trace.read(cpu, start_ns, end_ns)
    events = inside.events
    for ts, name, pid, number, text in zip(events["timestamp_ns"].tolist(), events["event"].tolist(),
                                           events["pid"].tolist(), events["number"].tolist(),
                                           events["name"].tolist(), strict=True):
        items.append({"offset_ns": ts - start_ns, "event": name, "pid": pid, "number": number,
                      "name": text})
    switches = inside.switches
    for row in zip(*(switches[c].tolist() for c in ("timestamp_ns", "prev_comm", "prev_pid",
                                                    "prev_state", "next_comm", "next_pid")),
                   strict=True):
        items.append({"offset_ns": row[0] - start_ns, "event": "sched_switch", "prev_comm": row[1],
                      "prev_pid": row[2], "prev_state": row[3], "next_comm": row[4],
                      "next_pid": row[5]})
    items.sort(key=lambda item: item["offset_ns"])
    return items[:MAX_CHAIN], max(0, len(items) - MAX_CHAIN)


def worst_detours(detours: Table, causes: Table, trace: EventSource, cpu: int,
                  count: int) -> list[dict]:
    """The `count` longest detours of a CPU with their split and event chain."""
    mine = detours.where(cpu=cpu)
    picked = np.argsort(-mine["duration_ns"], kind="stable")[:count]
    cpu_causes = causes.where(cpu=cpu)
    out = []
    for i in picked.tolist():
        start, length = int(mine["start_ns"][i]), int(mine["duration_ns"][i])
        split = cpu_causes.filter(cpu_causes["start_ns"] == start)
        order = np.argsort(-split["duration_ns"], kind="stable")
        events, more = chain(trace, cpu, start, start + length)
        out.append({
            "start_ns": start, "duration_ns": length,
            "cause": str(mine["cause"][i]), "detail": str(mine["cause_detail"][i]),
            "split": [{"cause": str(split["cause"][j]), "detail": str(split["detail"][j]),
                       "duration_ns": int(split["duration_ns"][j])} for j in order.tolist()],
            "chain": events, "more_events": more,
        })
    return out


def attribution_summary(detours: Table, causes: Table, trace: EventSource,
                        worst: int = WORST_PER_CPU, *, cpus: list[int] | None = None,
                        count_key: str = "detours", total_key: str = "noise_ns") -> list[dict]:
    """summaries["attribution"]: one row per CPU with detours (or per CPU of
    `cpus`, with or without). Late wakeups use the same rows with their own
    names for the count and the total time."""
    rows = []
    for cpu in (np.unique(detours["cpu"]).tolist() if cpus is None else cpus):
        mine = detours.where(cpu=cpu)
        rows.append({
            "cpu": int(cpu),
            count_key: int(mine.rows),
            total_key: int(mine["duration_ns"].sum()),
            "causes": breakdown(detours, causes, cpu),
            "worst": worst_detours(detours, causes, trace, cpu, worst),
        })
    return rows
