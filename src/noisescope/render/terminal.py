"""Terminal tables (rich) for bundles: what `scan` prints and `show` reprints."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from ..bundle import Bundle
from ..units import format_cpu_list, format_duration, format_rate
from .bench import bench_lines, occupancy_table, workloads_table
from .trace import causes_table, scan_worst_table, scan_worst_wakeups_table, trace_lines, wakeup_causes_table
from .tune import persistent_table, plan_table, trials_table


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _num(value: float | int | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _ns(value: float | int | None) -> str:
    return format_duration(value)


def header_lines(bundle: Bundle) -> list[str]:
    m = bundle.manifest
    host = m.get("host") or {}
    clock = m.get("clock") or {}
    lines = import_lines(m.get("source")) if m["kind"] == "import" else []
    virt = host.get("virtualization") or {}
    machine = f"{host.get('hostname', '?')}: {host.get('cpu_model', '?')}, kernel " \
              f"{host.get('kernel_release', '?')}"
    if virt.get("hypervisor"):
        machine += f", guest of {virt.get('vendor') or 'a hypervisor'}"
    if host:
        lines.append(machine)
    if clock:
        lines.append(f"clock: {clock['counter']} at {clock['ticks_per_second'] / 1e6:.3f} MHz "
                     f"({clock['frequency_source']})")
    p = m["parameters"]
    if "cpus" in p and "duration_ns" in p:
        mode = f"SCHED_FIFO {p['priority']}" if p.get("priority") else "SCHED_OTHER"
        span = f"{format_duration(p['duration_ns'])} per probe"
        if m["kind"] == "timerlat":
            span = f"every {format_duration(p['interval_ns'])} for " + (
                f"{p['loops']:,} loops" if p.get("loops") else format_duration(p["duration_ns"]))
        lines.append(f"CPUs {format_cpu_list(p['cpus'])}, {span}, {mode}"
                     + ("" if m["complete"] else "  [INCOMPLETE]"))
        if "timerlat" in m["summaries"]:
            lines.append(idle_states_line(p.get("dma_latency_us"),
                                          (m.get("privileges") or {}).get("dma_latency")))
    if host.get("hz_estimate", {}).get("hz"):
        lines.append(f"timer tick: about {host['hz_estimate']['hz']} Hz "
                     f"(CONFIG_HZ={host.get('config_hz') or '?'})")
    return lines + trace_lines(m)


def idle_states_line(requested_us: int | None, outcome: str | None) -> str:
    """Whether timer latencies were measured with the CPUs kept out of deep idle
    states (cyclictest holds /dev/cpu_dma_latency at 0 unless told --laptop)."""
    if requested_us is not None and outcome and not outcome.startswith("skipped"):
        like = ", as cyclictest" if requested_us == 0 else ""
        return (f"idle states: held at {requested_us} us exit latency (/dev/cpu_dma_latency, "
                f"while measuring{like})")
    why = outcome if outcome and outcome.startswith("skipped") else "not requested"
    return (f"idle states: not held (/dev/cpu_dma_latency {why}: CPUs may sleep deeply between "
            f"wakeups; cyclictest holds it at 0, as --dma-latency 0 does)")


def import_lines(source: dict | None) -> list[str]:
    source = source or {}
    version = f" {source['version']}" if source.get("version") else ""
    lines = [f"imported: {source.get('tool', '?')}{version} {source.get('format', '')} "
             f"from {source.get('file', '?')}"]
    if source.get("command"):
        lines.append(f"command: {source['command']}")
    details = source.get("details") or {}
    sysinfo = details.get("sysinfo") or {}
    if sysinfo:
        lines.append(f"recorded on {sysinfo.get('nodename', '?')}, kernel "
                     f"{sysinfo.get('release', '?')}, {details.get('start_time', '')}".rstrip(", "))
    return lines


def _cpu(s: dict) -> str:
    """The CPU, or the thread number where an imported file does not say the CPU."""
    return str(s["cpu"]) if s.get("cpu") is not None else f"T{s.get('thread', '?')}"


def _place_columns(t: RichTable, rows: list[dict]) -> None:
    """The CPU column; before it rank and node when the rows are a fleet's (every
    rank's CPUs in one table, nodes as rows)."""
    if any("rank" in s for s in rows):
        t.add_column("rank", justify="right")
        t.add_column("node", justify="left")
    t.add_column("CPU", justify="right")


def _place(s: dict) -> list[str]:
    return [str(s["rank"]), s.get("node") or "?", _cpu(s)] if "rank" in s else [_cpu(s)]


def detour_table(rows: list[dict]) -> RichTable:
    t = RichTable(title="Detours (CPU taken away for >= threshold)", title_justify="left")
    _place_columns(t, rows)
    for name in ("noise %", "detours/s", "p50", "p99", "p99.9", "max", "loop ticks", "loop ns"):
        t.add_column(name, justify="right")
    for s in rows:
        approx = "~" if s.get("percentiles_from") == "histogram" else ""
        t.add_row(
            *_place(s), _pct(s["noise_pct"]), _num(s["detours_per_s"], 1),
            approx + _ns(s["p50_ns"]), approx + _ns(s["p99_ns"]), approx + _ns(s["p999_ns"]),
            _ns(s["max_ns"]), _num(s.get("resolution_ticks")), _num(s.get("resolution_ns"), 1),
        )
    return t


def hourglass_table(rows: list[dict]) -> RichTable | None:
    rows = [s for s in rows if "iterations" in s]  # imported detour figures have none
    if not rows:
        return None
    t = RichTable(title="Hourglass (gaps between clock reads)", title_justify="left")
    _place_columns(t, rows)
    cut = {format_duration(s["hourglass_ns"]) for s in rows}
    for name in ("reads", "avg gap", "max gap", f"gaps > {' / '.join(sorted(cut))}"):
        t.add_column(name, justify="right")
    for s in rows:
        t.add_row(*_place(s), _num(s["iterations"]), _ns(s["mean_gap_ns"]),
                  _ns(s["max_ns"]), _num(s["hourglass_gaps"]))
    return t


def ftq_table(rows: list[dict]) -> RichTable:
    t = RichTable(title="FTQ (work units per quantum)", title_justify="left")
    _place_columns(t, rows)
    for name in ("quanta", "min", "mean", "max", "missed", "noise %"):
        t.add_column(name, justify="right")
    for s in rows:
        t.add_row(*_place(s), _num(s["quanta"]), _num(s["work_min"]), _num(s["work_mean"], 1),
                  _num(s["work_max"]), _num(s["missed_quanta"]), _pct(s["noise_pct"]))
    return t


def fwq_table(rows: list[dict]) -> RichTable:
    t = RichTable(title="FWQ (time per fixed work)", title_justify="left")
    _place_columns(t, rows)
    for name in ("samples", "min", "mean", "max", "noise %"):
        t.add_column(name, justify="right")
    for s in rows:
        t.add_row(*_place(s), _num(s["samples"]), _ns(s["duration_min_ns"]),
                  _ns(s["duration_mean_ns"]), _ns(s["duration_max_ns"]), _pct(s["noise_pct"]))
    return t


SOURCES_PER_SERIES = 3


def spectrum_table(rows: list[dict]) -> RichTable:
    t = RichTable(title="Periodic noise sources (spectrum of lost CPU time)", title_justify="left")
    for name in ("CPU", "from", "frequency", "lines", "share %", "dB", "known as"):
        t.add_column(name, justify="left" if name == "known as" else "right")
    for s in rows:
        sources = s["sources"][:SOURCES_PER_SERIES]
        if not sources:
            t.add_row(str(s["cpu"]), s["series"], "-", "-", "-", "-", "no periodic source found")
        for src in sources:
            t.add_row(str(s["cpu"]), s["series"], f"{src['frequency_hz']:.1f} Hz",
                      str(len(src["harmonics"])), f"{src['share_pct']:.1f}",
                      f"{src['strength_db']:.0f}", src["name"] or "")
    return t


def timerlat_table(rows: list[dict]) -> RichTable:
    t = RichTable(title="Timer latency (wakeup - deadline)", title_justify="left")
    _place_columns(t, rows)
    for name in ("interval", "samples", "missed", "min", "avg", "max", "p50", "p99",
                 "p99.9", "> hist"):
        t.add_column(name, justify="right")
    for s in rows:
        approx = "~" if s.get("percentiles_from") == "histogram" else ""
        t.add_row(*_place(s), _ns(s["interval_ns"]), _num(s["samples"]), _num(s["missed"]),
                  _ns(s["min_ns"]), _ns(s["avg_ns"]), _ns(s["max_ns"]),
                  *(approx + _ns(s[k]) if s[k] is not None else "-"
                    for k in ("p50_ns", "p99_ns", "p999_ns")),
                  _num(s["histogram_overflow"]))
    return t


def timer_irq_table(rows: list[dict]) -> RichTable | None:
    """The timer IRQ's own latency, where an imported rtla timerlat file has it."""
    rows = [s for s in rows if s.get("irq_samples") is not None]
    if not rows:
        return None
    t = RichTable(title="Timer IRQ latency (IRQ - deadline)", title_justify="left")
    _place_columns(t, rows)
    for name in ("samples", "min", "avg", "max"):
        t.add_column(name, justify="right")
    for s in rows:
        t.add_row(*_place(s), _num(s["irq_samples"]), _ns(s["irq_min_ns"]), _ns(s["irq_avg_ns"]),
                  _ns(s["irq_max_ns"]))
    return t


def oslat_table(rows: list[dict]) -> RichTable:
    t = RichTable(title="oslat (gaps between TSC reads, 1 us buckets)", title_justify="left")
    for name in ("CPU", "reads", "min", "avg", "max", "p50", "p99", "p99.9", "duration"):
        t.add_column(name, justify="right")
    for s in rows:
        t.add_row(_cpu(s), _num(s["samples"]), _ns(s["min_ns"]), _ns(s["avg_ns"]),
                  _ns(s["max_ns"]), *("~" + _ns(s[k]) if s[k] is not None else "-"
                                      for k in ("p50_ns", "p99_ns", "p999_ns")),
                  _ns(s["measured_ns"]))
    return t


def osnoise_table(rows: list[dict]) -> RichTable:
    t = RichTable(title="OS noise (osnoise tracer: noise in its runtime, interference counts)",
                  title_justify="left")
    _place_columns(t, rows)
    for name in ("periods", "runtime", "noise %", "max noise", "max single", "HW", "NMI", "IRQ",
                 "softirq", "thread"):
        t.add_column(name, justify="right")
    for s in rows:
        t.add_row(*_place(s), _num(s["periods"]), _ns(s["runtime_ns"]), _pct(s["noise_pct"]),
                  _ns(s["max_noise_ns"]), _ns(s["max_single_ns"]),
                  *(_num(s[f"{k}_count"]) for k in ("hw", "nmi", "irq", "softirq", "thread")))
    return t


SUMMARY_TABLES: dict[str, list[Callable[[list[dict]], RichTable | None]]] = {
    "detour": [detour_table, hourglass_table],
    "ftq": [ftq_table],
    "fwq": [fwq_table],
    "timerlat": [timerlat_table, timer_irq_table],
    "oslat": [oslat_table],
    "osnoise": [osnoise_table],
    "workloads": [workloads_table],
    "occupancy": [occupancy_table],
    "attribution": [causes_table, scan_worst_table],
    "late_wakeups": [wakeup_causes_table, scan_worst_wakeups_table],
    "spectrum": [spectrum_table],
    "plan": [plan_table],
    "trials": [trials_table],
    "persistent": [persistent_table],
}


def injection_lines(bundle: Bundle) -> list[str]:
    lines = []
    for spec in bundle.parameters.get("injections", []):
        lines.append(f"injected: {format_rate(spec['rate_hz'])} x "
                     f"{format_duration(spec['length_ns'])} on CPU {spec['cpu']} ({spec['mode']})")
    for s in bundle.summaries.get("detour", []):
        found = s.get("injections")
        if found and found["injected"]:
            lines.append(f"  CPU {s['cpu']}: detours cover {found['found']} of {found['injected']}"
                         f" injections in the windows ({found['found_pct']:.1f}%), mean detour "
                         f"{format_duration(found['detected_mean_ns'])} for "
                         f"{format_duration(found['injected_mean_ns'])} injected")
    return lines


# Bundle kinds that are not made of per-CPU summaries: what `show` prints for them
# (lines and tables; the report shows the same as the kind's overview section).
# module, function(bundle) -> blocks; imported when used.
OVERVIEWS: dict[str, tuple[str, str]] = {
    "fleet": (".fleet", "fleet_blocks"),
    "bsp": (".bsp", "bsp_blocks"),
    "prediction": (".prediction", "prediction_bundle_blocks"),
}
Block = str | RichTable


def overview_blocks(bundle: Bundle) -> list[Block] | None:
    """The lines and tables of a bundle kind listed in OVERVIEWS (None for other kinds)."""
    import importlib

    if bundle.kind not in OVERVIEWS:
        return None
    module, function = OVERVIEWS[bundle.kind]
    return getattr(importlib.import_module(module, __package__), function)(bundle)


def summary_blocks(bundle: Bundle) -> list[Block]:
    """Header lines, then the tables of every summary kind in SUMMARY_TABLES."""
    blocks: list[Block] = [*header_lines(bundle), *injection_lines(bundle), *bench_lines(bundle)]
    for probe, rows in bundle.summaries.items():
        for render in SUMMARY_TABLES.get(probe, []) if rows else []:
            table = render(rows)
            if table is not None:
                blocks.append(table)
    return blocks


def print_blocks(blocks: list[Block], console: Console) -> None:
    """Lines as they are; an empty line before each table and after it."""
    after_table = False
    for block in blocks:
        if isinstance(block, str):
            if after_table:
                console.print()
            console.print(block, highlight=False, markup=False)
        else:
            console.print()
            console.print(block)
        after_table = not isinstance(block, str)


def print_bundle(bundle: Bundle, console: Console) -> None:
    blocks = overview_blocks(bundle)
    print_blocks(summary_blocks(bundle) if blocks is None else blocks, console)
    print_warnings(bundle, console)


def print_warnings(bundle: Bundle, console: Console) -> None:
    system = system_line(bundle)
    if system:
        console.print()
        console.print(system, style="dim", highlight=False, markup=False)
    print_diagnostics(bundle.warnings, console)


def print_diagnostics(warnings, console: Console) -> None:
    if not warnings:
        return
    console.print()
    for w in warnings:
        console.print(f"warning: {w.message}", style="yellow", highlight=False, markup=False)
        console.print(f"  hint: {w.hint}", style="dim", highlight=False, markup=False)


FINDING_STYLES = {"ok": "green", "advice": "yellow", "error": "red"}


def findings_table(findings: list[dict]) -> RichTable:
    """`system show` findings: one row per check, the advice under the finding."""
    t = RichTable(box=None, show_header=False, pad_edge=False)
    t.add_column("state", no_wrap=True)
    t.add_column("check", no_wrap=True)
    t.add_column("finding")
    for f in findings:
        text = Text(f["message"])
        if f.get("advice"):
            text.append(f"\n-> {f['advice']}", style="dim")
        t.add_row(Text(f["state"], style=FINDING_STYLES.get(f["state"], "")), f["check"], text)
    return t


def system_line(bundle: Bundle) -> str | None:
    """One line naming the system checks that gave advice when the bundle was measured."""
    advised = list(dict.fromkeys(f["check"] for f in bundle.system
                                 if f["state"] != "ok"))  # a fleet: once for all its ranks
    if not advised:
        return None
    return f"system: advice on {', '.join(advised)} (details: noisescope system show)"
