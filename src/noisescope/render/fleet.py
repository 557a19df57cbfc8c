"""Terminal output of fleet bundles (`cluster scan`, `show`)."""

from __future__ import annotations

from rich.table import Table as RichTable

from ..analysis.fleet import DISTRIBUTION_POINTS, NODE_FIGURES, distribution, noisiest, ranking_figure
from ..bundle import Bundle
from ..units import format_cpu_list, format_duration

TOP_CPUS = 10
TOP_RANKS = 20
MAX_DIFFERENCES = 40  # lines of "How the nodes differ"; the bundle keeps them all
RANK_COLUMNS = (  # ranks-row field, heading, format
    ("detour_noise_pct", "noise %", "pct"),
    ("detour_detours_per_s", "detours/s", "rate"),
    ("detour_p99_ns", "p99", "ns"),
    ("detour_max_ns", "max", "ns"),
    ("ftq_noise_pct", "FTQ noise %", "pct"),
    ("fwq_noise_pct", "FWQ noise %", "pct"),
    ("timerlat_max_ns", "timerlat max", "ns"),
)


def _cell(value, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "pct":
        return f"{value:.3f}"
    if kind == "rate":
        return f"{value:,.1f}"
    return format_duration(value)


def fleet_lines(bundle: Bundle) -> list[str]:
    p = bundle.parameters
    rows = bundle.summaries.get("ranks", [])
    measured = [r for r in rows if r["status"] == "ok"]
    nodes = sorted({r["node"] for r in rows if r.get("node")})
    mode = f"SCHED_FIFO {p['priority']}" if p.get("rt") else "SCHED_OTHER"
    lines = [f"fleet: {p['ranks']} ranks on {len(nodes)} node{'s' if len(nodes) != 1 else ''}"
             f", {len(measured)} measured; started {p.get('start_utc') or '-'}"
             + ("" if bundle.complete else "  [INCOMPLETE]"),
             f"probes {','.join(p['probes'])}, {format_duration(p['duration_ns'])} each, {mode}"]
    aligned = [f"{a['probe']} within {format_duration(a['spread_ns'])}"
               for a in bundle.summaries.get("alignment", [])]
    if aligned:
        lines.append("first windows aligned: " + ", ".join(aligned))
    return lines


def ranks_table(rows: list[dict]) -> RichTable | None:
    key = ranking_figure(rows)
    if key is None:
        return None
    columns = [c for c in RANK_COLUMNS if any(r.get(c[0]) is not None for r in rows)]
    heading = next(title for probe, name, _, _, title in NODE_FIGURES
                   if f"{probe}_{name}" == key)
    t = RichTable(title=f"Noisiest ranks (by {heading})", title_justify="left")
    for name in ("rank", "node", "CPUs", *(title for _, title, _ in columns)):
        t.add_column(name, justify="left" if name == "node" else "right")
    for r in noisiest(rows, key, TOP_RANKS):
        t.add_row(str(r["rank"]), r["node"] or "?", format_cpu_list(r["cpus"]),
                  *(_cell(r.get(name), kind) for name, _, kind in columns))
    return t


def cpus_table(rows: list[dict]) -> RichTable | None:
    if not rows:
        return None
    t = RichTable(title=f"Noisiest CPUs (detour, top {TOP_CPUS})", title_justify="left")
    for name in ("rank", "node", "CPU", "noise %", "detours/s", "p99", "max"):
        t.add_column(name, justify="left" if name == "node" else "right")
    for s in noisiest(rows, "noise_pct", TOP_CPUS):
        t.add_row(str(s["rank"]), s["node"], str(s["cpu"]), _cell(s["noise_pct"], "pct"),
                  _cell(s["detours_per_s"], "rate"), _cell(s["p99_ns"], "ns"),
                  _cell(s["max_ns"], "ns"))
    return t


def distribution_lines(rows: list[dict]) -> list[str]:
    """Each rank figure over the ranks (min, median, p90, p99, max), for a fleet with
    more ranks than the noisiest-ranks table shows."""
    measured = [r for r in rows if r["status"] == "ok"]
    if len(measured) <= TOP_RANKS:
        return []
    columns = {name: (heading, kind) for name, heading, kind in RANK_COLUMNS}
    lines = [f"Over the {len(measured):,} measured ranks (min / median / p90 / p99 / max):"]
    for figure in distribution(rows):
        heading, kind = columns[figure["what"]]
        points = " / ".join(_cell(figure[p], kind) for p in DISTRIBUTION_POINTS)
        lines.append(f"  {heading}: {points}")
    return lines


def difference_lines(bundle: Bundle) -> list[str]:
    found = bundle.summaries.get("differences", [])
    if len([r for r in bundle.summaries.get("ranks", []) if r["status"] == "ok"]) < 2:
        return ["How the nodes differ: fewer than two ranks measured"]
    if not found:
        return ["How the nodes differ: no host fact or noise figure stands out"]
    lines = ["How the nodes differ:", *(f"  {d['message']}" for d in found[:MAX_DIFFERENCES])]
    if len(found) > MAX_DIFFERENCES:
        nodes = {d["node"] for d in found[MAX_DIFFERENCES:] if d.get("node")}
        lines.append(f"  ... and {len(found) - MAX_DIFFERENCES:,} more, on {len(nodes):,} "
                     f"node{'s' if len(nodes) != 1 else ''} (all in the bundle's "
                     f"summaries.differences)")
    return lines


def fleet_blocks(bundle: Bundle) -> list[str | RichTable]:
    """What `cluster scan` and `show` print for a fleet (terminal.OVERVIEWS)."""
    summaries = bundle.summaries
    measured = [r for r in summaries.get("ranks", []) if r["status"] == "ok"]
    tables = (ranks_table(measured), cpus_table(summaries.get("detour", [])))
    return [*fleet_lines(bundle), *distribution_lines(summaries.get("ranks", [])),
            *(t for t in tables if t is not None), *difference_lines(bundle)]
