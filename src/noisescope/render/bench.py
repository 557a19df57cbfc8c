"""Terminal tables of a bench bundle: workload summaries (medians per
configuration) and SMT sibling occupancy."""

from __future__ import annotations

from rich.table import Table as RichTable

from ..units import format_cpu_list, format_duration, format_rate
from .compare import format_value


def workloads_table(rows: list[dict]) -> RichTable:
    table = RichTable(title="Workloads (medians of the successful runs)", title_justify="left")
    metrics = list(dict.fromkeys(k for r in rows for k in r
                                 if k.startswith("metric_") and k.endswith("_median")))
    with_configuration = any(r["configuration"] for r in rows)
    names = ["workload"] + (["configuration"] if with_configuration else [])
    names += ["runs", "ok", "wall", "user", "sys", "max RSS", "system ctx sw/s"]
    names += [m[len("metric_"):-len("_median")] for m in metrics]
    for name in names:
        table.add_column(name, justify="left" if name in ("workload", "configuration") else "right")
    for r in rows:
        cells = [r["workload"]] + ([r["configuration"]] if with_configuration else [])
        cells += [str(r["runs"]), str(r["ok"]), format_duration(r["wall_ns_median"]),
                  format_duration(r["user_ns_median"]), format_duration(r["sys_ns_median"]),
                  format_value(r["maxrss_kib_median"], "KiB"),
                  format_value(r["system_context_switches_per_s_median"], "/s")]
        cells += [format_value(r.get(m), "") for m in metrics]
        table.add_row(*cells)
    return table


def bench_lines(bundle) -> list[str]:
    """What a bench bundle ran: label, repetitions and each configuration."""
    if bundle.kind != "bench":
        return []
    p = bundle.parameters
    lines = [f"label: {bundle.label or '-'}; {p['runs']} runs"
             + (f" after {p['warmup']} warm-up" if p["warmup"] else "")
             + f" per workload and configuration, {p['order']}, timeout "
             f"{format_duration(p['timeout_ns'])}" + ("" if bundle.complete else "  [INCOMPLETE]")]
    for config in p["configurations"]:
        placement = config["placement"]
        parts = [f"CPUs {format_cpu_list(config['cpus'])}" if config.get("cpus") else "any CPU"]
        if placement.get("ncpus"):
            parts[0] += f" ({placement['ncpus']} {placement['layout']})"
        if placement.get("fifo_priority"):
            parts.append(f"SCHED_FIFO {placement['fifo_priority']}")
        if placement.get("core_scheduling"):
            parts.append("core-scheduling cookie")
        parts += [f"inject {format_rate(i['rate_hz'])} x {format_duration(i['length_ns'])} on "
                  f"CPU {i['cpu']}" for i in config["injections"]]
        parts += [f"{k}={v}" for k, v in config.get("env", {}).items()]
        lines.append(f"configuration {config['name'] or '(default)'}: {', '.join(parts)}")
    occupancy = bundle.manifest.get("occupancy")
    if occupancy:
        lines.append(f"SMT sibling occupancy: {occupancy['note']}")
    return lines


def occupancy_table(rows: list[dict]) -> RichTable:
    table = RichTable(title="SMT sibling occupancy (while a CPU ran the workload, its sibling ran)",
                      title_justify="left")
    with_configuration = any(r["configuration"] for r in rows)
    names = ["workload"] + (["configuration"] if with_configuration else [])
    names += ["CPU", "sibling", "runs", "workload time", "same %", "idle %", "foreign %", "unknown %"]
    for name in names:
        table.add_column(name, justify="left" if name in ("workload", "configuration") else "right")
    for r in rows:
        cells = [r["workload"]] + ([r["configuration"]] if with_configuration else [])
        cells += [str(r["workload_cpu"]), str(r["sibling"]), str(r["runs"]),
                  format_duration(r["workload_ns"])]
        cells += [f"{r[f'{c}_pct']:.1f}" if r[f"{c}_pct"] is not None else "-"
                  for c in ("same", "idle", "foreign", "unknown")]
        table.add_row(*cells)
    return table

