"""Per-CPU explanation of detours (or late wakeups): the breakdown by cause
and the worst ones with the events inside them. Plain data (JSON-safe dicts), stored
in the manifest as summaries["attribution"] and rendered by render/."""

from __future__ import annotations

import numpy as np

from ..tables import SpooledTable, Table, cpu_batches, dictionary_codes, factorize, table_cpus
from .store import EventSource

WORST_PER_CPU = 3  # worst detours stored per CPU by a scan
MAX_CHAIN = 20  # events listed per detour (the rest are counted)


def breakdown(detours: Table | SpooledTable, causes: Table | SpooledTable, cpu: int
              ) -> list[dict]:
    """Cause rows of one CPU, largest total first: the number of detours the
    cause took part in, its total and largest time, and its share of all
    detour time on the CPU."""
    return CpuExplanation.of(detours, causes, cpu, worst=0).by_cause()


class CpuExplanation:
    """One CPU's detours and their cause rows, taken a batch at a time (a
    detour's cause rows come in one batch, after the batch of the detour or
    with it): their number and total time, the time by cause, and the
    `worst` longest detours (the earlier of equally long ones) with their
    cause rows. Fed as a table is read (`of`), or as the detours are
    explained (a part at a time: nothing read again)."""

    def __init__(self, worst: int = 0):
        self.worst = worst
        self.count = self.total = 0
        self.longest: Table | None = None  # the longest so far, with their place among the CPU's
        self._found: dict[tuple[str, str], list[int]] = {}  # (cause, detail): count, total, largest
        self._splits: list[Table] = []  # the cause rows of the longest so far

    @classmethod
    def of(cls, detours: Table | SpooledTable, causes: Table | SpooledTable, cpu: int,
           worst: int) -> CpuExplanation:
        """The explanation of the CPU's rows of both tables, each read once."""
        explanation = cls(worst)
        for batch in cpu_batches(detours, cpu, "start_ns"):
            explanation.add_detours(batch)
        for rows in cpu_batches(causes, cpu, "start_ns"):
            explanation.add_causes(rows)
        return explanation

    def add_detours(self, batch: Table) -> None:
        if self.worst:
            durations = batch["duration_ns"]
            # the rows as long as the worst-th longest at least (a partition, not a sort of
            # the part's thousands), then the longest of them, the earlier of equal ones
            rows = np.arange(batch.rows) if batch.rows <= self.worst else np.flatnonzero(
                durations >= np.partition(durations, batch.rows - self.worst)[-self.worst])
            picked = rows[np.argsort(-durations[rows], kind="stable")][:self.worst]
            candidates = Table({**batch.filter(picked), "place": picked + self.count})
            longest = (candidates if self.longest is None
                       else Table.concat([self.longest, candidates]))
            self.longest = longest.filter(
                np.lexsort((longest["place"], -longest["duration_ns"]))[:self.worst])
        self.count += batch.rows
        self.total += int(batch["duration_ns"].sum())

    def add_causes(self, rows: Table) -> None:
        if self.longest is not None and self.longest.rows:
            # the rows of the longest so far (a detour that is among the longest at
            # the end was among them when its rows came); none kept for the others
            wanted = self.longest["start_ns"]
            kept = (split.filter(np.isin(split["start_ns"], wanted))
                    for split in [*self._splits, rows])
            self._splits = [split for split in kept if split.rows]
        if not rows.rows:
            return
        # numbered by hash, the pairs as integers: sorting strings costs ~1 us each
        cause_codes, cause_names = dictionary_codes(rows["cause"])
        detail_codes, details = dictionary_codes(rows["detail"])
        pair_of_row = cause_codes.astype(np.int64) * len(details) + detail_codes
        inverse, first = factorize(pair_of_row)
        pairs = pair_of_row[first]
        durations = rows["duration_ns"]
        most = np.zeros(len(pairs), np.int64)
        np.maximum.at(most, inverse, durations)
        totals = np.bincount(inverse, weights=durations).astype(np.int64).tolist()
        for pair, count, total, largest in zip(pairs.tolist(), np.bincount(inverse).tolist(),
                                               totals, most.tolist(), strict=True):
            cause, detail = divmod(pair, len(details))
            known = self._found.setdefault((cause_names[cause], details[detail]), [0, 0, 0])
            known[0] += count
            known[1] += total
            known[2] = max(known[2], largest)

    def by_cause(self) -> list[dict]:
        """The breakdown by cause (see breakdown())."""
        found = self._found
        keys = sorted(found)  # by cause, then detail; then the largest total first
        order = sorted(range(len(keys)), key=lambda i: -found[keys[i]][1])
        return [{"cause": keys[i][0], "detail": keys[i][1], "count": found[keys[i]][0],
                 "total_ns": found[keys[i]][1],
                 "share_pct": 100.0 * found[keys[i]][1] / self.total if self.total else 0.0,
                 "max_ns": found[keys[i]][2]} for i in order]

    def row(self, cpu: int, trace: EventSource, count_key: str = "detours",
            total_key: str = "noise_ns") -> dict:
        """The CPU's row of summaries["attribution"] (its worst detours' events
        read from `trace`)."""
        splits = Table.concat(self._splits) if self._splits else None
        return {"cpu": int(cpu), count_key: self.count, total_key: self.total,
                "causes": self.by_cause(), "worst": _worst_rows(self.longest, splits, trace, cpu)}


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
    return [CpuExplanation.of(detours, causes, cpu, worst).row(cpu, trace, count_key, total_key)
            for cpu in (table_cpus(detours) if cpus is None else cpus)]
