"""Per-CPU explanation of detours (or late wakeups): the breakdown by cause
and the worst ones with the events inside them. Plain data (JSON-safe dicts), stored
in the manifest as summaries["attribution"] and rendered by render/."""

from __future__ import annotations

import numpy as np

from ..tables import SpooledTable, Table, cpu_batches, table_cpus
from .store import EventSource

WORST_PER_CPU = 3  # worst detours stored per CPU by a scan
MAX_CHAIN = 20  # events listed per detour (the rest are counted)


def breakdown(detours: Table | SpooledTable, causes: Table | SpooledTable, cpu: int
              ) -> list[dict]:
    """Cause rows of one CPU, largest total first: the number of detours the
    cause took part in, its total and largest time, and its share of all
    detour time on the CPU. Read a batch at a time (a detour's rows are in
    one batch)."""
    noise = sum(int(batch["duration_ns"].sum()) for batch in cpu_batches(detours, cpu, "start_ns"))
    found: dict[tuple[str, str], list[int]] = {}  # (cause, detail): count, total, largest
    for rows in cpu_batches(causes, cpu, "start_ns"):
        for cause in np.unique(rows["cause"]).tolist():  # a handful; details by numpy
            mine = rows["cause"] == cause
            details, inverse = np.unique(rows["detail"][mine], return_inverse=True)
            durations = rows["duration_ns"][mine]
            most = np.zeros(len(details), np.int64)
            np.maximum.at(most, inverse, durations)
            totals = np.bincount(inverse, weights=durations).astype(np.int64).tolist()
            for detail, count, total, largest in zip(details.tolist(), np.bincount(inverse).tolist(),
                                                     totals, most.tolist(), strict=True):
                known = found.setdefault((cause, detail), [0, 0, 0])
                known[0] += count
                known[1] += total
                known[2] = max(known[2], largest)
    pairs = sorted(found)  # by cause, then detail; then the largest total first
    order = sorted(range(len(pairs)), key=lambda i: -found[pairs[i]][1])
    return [{"cause": pairs[i][0], "detail": pairs[i][1], "count": found[pairs[i]][0],
             "total_ns": found[pairs[i]][1],
             "share_pct": 100.0 * found[pairs[i]][1] / noise if noise else 0.0,
             "max_ns": found[pairs[i]][2]} for i in order]


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


def worst_detours(detours: Table | SpooledTable, causes: Table | SpooledTable,
                  trace: EventSource, cpu: int, count: int) -> list[dict]:
    """The `count` longest detours of a CPU (the earlier of equally long ones)
    with their split and event chain, read a batch at a time."""
    worst, seen = None, 0  # the longest so far, with their place among the CPU's detours
    for batch in cpu_batches(detours, cpu, "start_ns"):
        picked = np.argsort(-batch["duration_ns"], kind="stable")[:count]
        candidates = Table({**batch.filter(picked), "place": picked + seen})
        seen += batch.rows
        worst = candidates if worst is None else Table.concat([worst, candidates])
        worst = worst.filter(np.lexsort((worst["place"], -worst["duration_ns"]))[:count])
    if worst is None or not worst.rows:
        return []
    splits = Table.concat([rows.filter(np.isin(rows["start_ns"], worst["start_ns"]))
                           for rows in cpu_batches(causes, cpu, "start_ns")])
    out = []
    for i in range(worst.rows):
        start, length = int(worst["start_ns"][i]), int(worst["duration_ns"][i])
        split = splits.filter(splits["start_ns"] == start)
        order = np.argsort(-split["duration_ns"], kind="stable")
        events, more = chain(trace, cpu, start, start + length)
        out.append({
            "start_ns": start, "duration_ns": length,
            "cause": str(worst["cause"][i]), "detail": str(worst["cause_detail"][i]),
            "split": [{"cause": str(split["cause"][j]), "detail": str(split["detail"][j]),
                       "duration_ns": int(split["duration_ns"][j])} for j in order.tolist()],
            "chain": events, "more_events": more,
        })
    return out


def attribution_summary(detours: Table | SpooledTable, causes: Table | SpooledTable,
                        trace: EventSource,
                        worst: int = WORST_PER_CPU, *, cpus: list[int] | None = None,
                        count_key: str = "detours", total_key: str = "noise_ns") -> list[dict]:
    """summaries["attribution"]: one row per CPU with detours (or per CPU of
    `cpus`, with or without). Late wakeups use the same rows with their own
    names for the count and the total time."""
    rows = []
    for cpu in (table_cpus(detours) if cpus is None else cpus):
        count = total = 0
        for batch in cpu_batches(detours, cpu, "start_ns"):
            count += batch.rows
            total += int(batch["duration_ns"].sum())
        rows.append({
            "cpu": int(cpu),
            count_key: count,
            total_key: total,
            "causes": breakdown(detours, causes, cpu),
            "worst": worst_detours(detours, causes, trace, cpu, worst),
        })
    return rows
