"""Per-CPU explanation of detours (or late wakeups): the breakdown by cause
and the worst ones with the events inside them. Plain data (JSON-safe dicts), stored
in the manifest as summaries["attribution"] and rendered by render/."""

from __future__ import annotations

import numpy as np

from ..tables import SpooledTable, Table, cpu_batches, dictionary_codes, table_cpus
from .store import EventSource

WORST_PER_CPU = 3  # worst detours stored per CPU by a scan
MAX_CHAIN = 20  # events listed per detour (the rest are counted)


def breakdown(detours: Table | SpooledTable, causes: Table | SpooledTable, cpu: int
              ) -> list[dict]:
    """Cause rows of one CPU, largest total first: the number of detours the
    cause took part in, its total and largest time, and its share of all
    detour time on the CPU."""
    _, noise, _ = _detour_pass(detours, cpu, 0)
    return _cause_pass(causes, cpu, noise, np.empty(0, np.int64))[0]


def _detour_pass(detours: Table | SpooledTable, cpu: int, worst: int) -> tuple[int, int, Table | None]:
    """One read of a CPU's detours, a batch at a time: their number, total
    time and the `worst` longest (the earlier of equally long ones)."""
    count = total = seen = 0
    longest = None  # the longest so far, with their place among the CPU's detours
    for batch in cpu_batches(detours, cpu, "start_ns"):
        count += batch.rows
        total += int(batch["duration_ns"].sum())
        if worst:
            picked = np.argsort(-batch["duration_ns"], kind="stable")[:worst]
            candidates = Table({**batch.filter(picked), "place": picked + seen})
            longest = candidates if longest is None else Table.concat([longest, candidates])
            longest = longest.filter(np.lexsort((longest["place"], -longest["duration_ns"]))[:worst])
        seen += batch.rows
    return count, total, longest


def _cause_pass(causes: Table | SpooledTable, cpu: int, noise: int, split_starts: np.ndarray
                ) -> tuple[list[dict], Table | None]:
    """One read of a CPU's cause rows, a batch at a time (a detour's rows are
    in one batch): the breakdown by cause (see breakdown()) and the rows of
    the detours that start at `split_starts`."""
    found: dict[tuple[str, str], list[int]] = {}  # (cause, detail): count, total, largest
    splits = []
    for rows in cpu_batches(causes, cpu, "start_ns"):
        if len(split_starts):
            splits.append(rows.filter(np.isin(rows["start_ns"], split_starts)))
        if not rows.rows:
            continue
        # numbered by hash, the pairs as integers: sorting strings costs ~1 us each
        cause_codes, cause_names = dictionary_codes(rows["cause"])
        detail_codes, details = dictionary_codes(rows["detail"])
        pairs, inverse = np.unique(cause_codes.astype(np.int64) * len(details) + detail_codes,
                                   return_inverse=True)
        durations = rows["duration_ns"]
        most = np.zeros(len(pairs), np.int64)
        np.maximum.at(most, inverse, durations)
        totals = np.bincount(inverse, weights=durations).astype(np.int64).tolist()
        for pair, count, total, largest in zip(pairs.tolist(), np.bincount(inverse).tolist(),
                                               totals, most.tolist(), strict=True):
            cause, detail = divmod(pair, len(details))
            known = found.setdefault((cause_names[cause], details[detail]), [0, 0, 0])
            known[0] += count
            known[1] += total
            known[2] = max(known[2], largest)
    keys = sorted(found)  # by cause, then detail; then the largest total first
    order = sorted(range(len(keys)), key=lambda i: -found[keys[i]][1])
    rows = [{"cause": keys[i][0], "detail": keys[i][1], "count": found[keys[i]][0],
             "total_ns": found[keys[i]][1],
             "share_pct": 100.0 * found[keys[i]][1] / noise if noise else 0.0,
             "max_ns": found[keys[i]][2]} for i in order]
    return rows, Table.concat(splits) if splits else None


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


def _worst_rows(worst: Table | None, splits: Table | None, trace: EventSource, cpu: int
                ) -> list[dict]:
    """The worst detours with their split and event chain."""
    if worst is None or not worst.rows:
        return []
    out = []
    for i in range(worst.rows):
        start, length = int(worst["start_ns"][i]), int(worst["duration_ns"][i])
        split = (splits.filter(splits["start_ns"] == start) if splits is not None
                 else Table({"cause": [], "detail": [], "duration_ns": np.empty(0, np.int64)}))
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
        count, total, longest = _detour_pass(detours, cpu, worst)
        by_cause, splits = _cause_pass(causes, cpu, total, np.empty(0, np.int64) if longest is None
                                       else longest["start_ns"])
        rows.append({
            "cpu": int(cpu),
            count_key: count,
            total_key: total,
            "causes": by_cause,
            "worst": _worst_rows(longest, splits, trace, cpu),
        })
    return rows
