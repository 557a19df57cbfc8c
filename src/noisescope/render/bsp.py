"""Terminal output of `cluster bsp` bundles: measured against predicted slowdown."""

from __future__ import annotations

from rich.table import Table as RichTable

from ..bundle import Bundle
from ..units import format_duration


def _signed(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:+.2f}%"


def bsp_lines(bundle: Bundle) -> list[str]:
    p = bundle.parameters
    mode = f"SCHED_FIFO {p['priority']}" if p.get("priority") else "SCHED_OTHER"
    return [f"bsp: {p['ranks']} ranks, {p['iterations']:,} iterations of "
            f"{format_duration(p['compute_ns'])} work + {p['collective']} ({p['work_units']:,} "
            f"work units each), {mode}" + ("" if bundle.complete else "  [INCOMPLETE]"),
            f"interleaved in rounds of {p['block']} iterations alone, {p['block']} synchronized "
            f"and {format_duration(p['sample_ns'])} of detour sampling on every rank"]


def slowdown_table(result: dict) -> RichTable:
    t = RichTable(title="Slowdown per iteration", title_justify="left")
    for name in ("", "per iteration", "slowdown", "note"):
        t.add_column(name, justify="left" if name in ("", "note") else "right")
    noise_free = result["noise_free_ns"]
    t.add_row("noise-free", format_duration(noise_free), "",
              "slowest rank's fastest work + fastest collective")
    t.add_row("work alone", "", _signed(result["local_slowdown_mean"]),
              f"each rank's own noise, mean over ranks (max {_signed(result['local_slowdown_max'])})")
    t.add_row("work + collective, measured", format_duration(result["bsp_mean_ns"]),
              _signed(result["measured_slowdown"]), "what the synchronization costs")
    predicted = result["predicted_slowdown_mean"]
    t.add_row(f"predicted (predict, P={result['ranks']})",
              format_duration(noise_free * (1 + predicted)), _signed(predicted),
              f"seeds {_signed(result['predicted_slowdown_min'])} .. "
              f"{_signed(result['predicted_slowdown_max'])}, same noise traces")
    return t


def ranks_table(rows: list[dict]) -> RichTable:
    t = RichTable(title="Ranks", title_justify="left")
    for name in ("rank", "node", "CPU", "noise %", "detours/s", "fastest work", "mean alone",
                 "local", "mean synchronized"):
        t.add_column(name, justify="left" if name == "node" else "right")
    for r in rows:
        t.add_row(str(r["rank"]), r["node"], str(r["cpu"]),
                  "-" if r["noise_pct"] is None else f"{r['noise_pct']:.3f}",
                  "-" if r["detours_per_s"] is None else f"{r['detours_per_s']:,.1f}",
                  format_duration(r["alone_fastest_ns"]), format_duration(r["alone_mean_ns"]),
                  _signed(r["local_slowdown"]), format_duration(r["bsp_mean_ns"]))
    return t


def bsp_blocks(bundle: Bundle) -> list[str | RichTable]:
    """What `cluster bsp` and `show` print for a bsp bundle (terminal.OVERVIEWS)."""
    return [*bsp_lines(bundle), slowdown_table(bundle.summaries["bsp"][0]),
            ranks_table(bundle.summaries["ranks"])]
