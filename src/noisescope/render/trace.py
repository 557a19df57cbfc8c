"""Terminal rendering of the trace: what caused the detours (or late timer
wakeups), the worst ones with their kernel events, and the tracing line of
the header."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table as RichTable

from ..units import format_duration

SCAN_CAUSES_PER_CPU = 8  # the scan's table shows this many causes a CPU; `explain` all
SCAN_WORST = 3  # the scan shows the longest detours of all CPUs; `explain` N per CPU
SCAN_CHAIN_LINES = 12
BUSY_COST_PCT = 1.0  # above this run delay the traced/untraced comparison is swamped


@dataclass(frozen=True)
class Explained:
    """What the causes and worst tables explain, in words."""

    count_key: str  # the summary rows' count: "detours" or "wakeups"
    causes_title: str
    worst_title: str
    length: str  # column of a span's length


DETOURS = Explained("detours", "Causes of detours (from kernel trace events)",
                    "Worst detours (kernel events inside, time from the detour's start)", "length")
LATE_WAKEUPS = Explained("wakeups", "Causes of wakeups at least {threshold} late (from kernel "
                         "trace events)", "Worst late wakeups (kernel events from the deadline on)",
                         "latency")


def cause_label(cause: str, detail: str) -> str:
    """'tick', 'thread kworker/1:1', 'unexplained: no guest activity'."""
    if not detail:
        return cause
    return f"{cause}: {detail}" if cause == "unexplained" else f"{cause} {detail}"


def causes_table(rows: list[dict], limit: int | None = SCAN_CAUSES_PER_CPU,
                 explained: Explained = DETOURS) -> RichTable:
    threshold = format_duration(rows[0]["threshold_ns"]) if rows and "threshold_ns" in rows[0] else ""
    t = RichTable(title=explained.causes_title.format(threshold=threshold), title_justify="left")
    for name, justify in (("CPU", "right"), ("cause", "left"), (explained.count_key, "right"),
                          ("total", "right"), ("share %", "right"), ("max", "right")):
        t.add_column(name, justify=justify)
    for row in rows:
        causes = row["causes"]
        if not causes:
            t.add_row(str(row["cpu"]), f"(no {explained.count_key})", "0", "", "", "")
        shown = causes if limit is None else causes[:limit]
        for i, c in enumerate(shown):
            t.add_row(str(row["cpu"]) if i == 0 else "", cause_label(c["cause"], c["detail"]),
                      f"{c['count']:,}", format_duration(c["total_ns"]), f"{c['share_pct']:.1f}",
                      format_duration(c["max_ns"]))
        rest = causes[len(shown):]
        if rest:
            total = sum(c["total_ns"] for c in rest)
            t.add_row("", f"{len(rest)} other causes", "", format_duration(total),
                      f"{sum(c['share_pct'] for c in rest):.1f}",
                      format_duration(max(c["max_ns"] for c in rest)))
        t.add_section()
    return t


def chain_line(item: dict) -> str:
    """One kernel event inside a detour, at its offset from the detour's start."""
    event = item["event"]
    if event == "sched_switch":
        what = (f"sched_switch {item['prev_comm']}:{item['prev_pid']} [{item['prev_state']}] -> "
                f"{item['next_comm']}:{item['next_pid']}")
    elif event in ("sched_wakeup", "sched_process_fork"):
        what = f"{event} {item['name']}:{item['number']}"
    elif event == "irq_handler_entry":
        what = f"{event} {item['number']} {item['name']}"
    elif event == "nmi_handler" or event.endswith("_noise"):
        what = f"{event} {item['name']} {format_duration(item['number'])}".replace("  ", " ")
    elif event.startswith("page_fault"):
        what = f"{event} error {item['number']:#x}"
    else:
        what = f"{event} {item['name']}".rstrip()
    return f"{'+' + format_duration(item['offset_ns']):>10}  {what}"


def worst_table(rows: list[dict], chain_lines: int | None = None, longest: int | None = None,
                explained: Explained = DETOURS) -> RichTable | None:
    """The worst detours of each CPU, or only the `longest` ones of all CPUs
    (None when there are none)."""
    if not any(row["worst"] for row in rows):
        return None
    t = RichTable(title=explained.worst_title, title_justify="left")
    for name, justify in (("CPU", "right"), ("at", "right"), (explained.length, "right"),
                          ("causes / events", "left")):
        t.add_column(name, justify=justify)
    groups = [[(row["cpu"], d) for d in row["worst"]] for row in rows]
    if longest is not None:
        picked = sorted((item for group in groups for item in group),
                        key=lambda item: -item[1]["duration_ns"])[:longest]
        groups = [picked]
    for group in groups:
        for cpu, d in group:
            split = ", ".join(f"{cause_label(s['cause'], s['detail'])} {format_duration(s['duration_ns'])}"
                              for s in d["split"][:4])
            if len(d["split"]) > 4:
                split += f", +{len(d['split']) - 4} more"
            chain = d["chain"] if chain_lines is None else d["chain"][:chain_lines]
            lines = [split] + ["  " + chain_line(item) for item in chain]
            hidden = d["more_events"] + len(d["chain"]) - len(chain)
            if hidden:
                lines.append(f"  ... {hidden} more events")
            t.add_row(str(cpu), f"{d['start_ns'] / 1e9:.6f} s",
                      format_duration(d["duration_ns"]), "\n".join(lines))
        t.add_section()
    return t


def trace_lines(manifest: dict) -> list[str]:
    """What the trace was, and what it cost, for the header."""
    trace = manifest.get("trace")
    if not trace:
        return []
    if not trace.get("enabled"):
        return [f"trace: off ({trace.get('reason') or 'not recorded'})"]
    recordings = trace.get("recordings", [])
    events = sum(r["events"] + r["sched_switch"] for r in recordings)
    lost = sum(sum(r["lost_events"].values()) for r in recordings)
    lines = [f"trace: {trace['clock']} clock, {events:,} kernel events ({trace['reader']} reader), "
             + (f"{lost:,} lost" if lost else "none lost")]
    cost = trace.get("cost")
    if cost:
        busy = cost["max_run_delay_pct"]
        caveat = (f"; not meaningful: other tasks took {busy:.0f}% of a sampler's time"
                  if busy > BUSY_COST_PCT else "")
        noise, rate = cost["noise_pct_increase_interval"], cost["detours_per_s_increase_interval"]
        lines.append(f"tracing cost: noise {cost['noise_pct_increase']:+.3f} percentage points "
                     f"[{noise[0]:+.3f}, {noise[1]:+.3f}], detours "
                     f"{cost['detours_per_s_increase']:+.1f}/s [{rate[0]:+.1f}, {rate[1]:+.1f}] "
                     f"(traced - untraced: median of {cost['pairs']} interleaved pairs of "
                     f"{format_duration(cost['run_ns'])} runs, {cost['confidence']:.0%} "
                     f"interval{caveat})")
    return lines


def scan_worst_table(rows: list[dict]) -> RichTable | None:
    return worst_table(rows, chain_lines=SCAN_CHAIN_LINES, longest=SCAN_WORST)


def wakeup_causes_table(rows: list[dict]) -> RichTable:
    return causes_table(rows, explained=LATE_WAKEUPS)


def scan_worst_wakeups_table(rows: list[dict]) -> RichTable | None:
    return worst_table(rows, chain_lines=SCAN_CHAIN_LINES, longest=SCAN_WORST, explained=LATE_WAKEUPS)
