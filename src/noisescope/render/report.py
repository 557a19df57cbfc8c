"""Reports on one or several bundles: one self-contained HTML file, Markdown
with PNG files beside it, or just the figures.

A report is a list of Sections built from what the bundles contain:
configuration and host facts, system check, warnings, then one section per
summary kind, whose tables come from terminal.SUMMARY_TABLES and whose
figures come from plots.FIGURES, and a comparison when several bundles are
given. A new summary kind gets a section as soon as it is listed there.
Everything that comes from a bundle is escaped (HTML autoescape, Markdown
escaping, no TeX in figure text).
"""

from __future__ import annotations

import base64
import html
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .. import __version__
from ..bundle import Bundle
from ..units import format_cpu_list, format_duration
from . import plots
from .terminal import SUMMARY_TABLES, injection_lines


@dataclass
class TableBlock:
    title: str
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Section:
    key: str
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[TableBlock] = field(default_factory=list)
    figures: list[plots.Figure] = field(default_factory=list)
    items: list[tuple[str, str]] = field(default_factory=list)  # (text, hint) lists: warnings


@dataclass
class Report:
    title: str
    bundles: list[str]
    sections: list[Section]

    @property
    def figures(self) -> list[plots.Figure]:
        return [f for s in self.sections for f in s.figures]


def rich_to_block(table, prefix: str = "") -> TableBlock:
    """A rich Table (terminal.SUMMARY_TABLES) as plain headers and rows."""
    headers = [str(c.header) for c in table.columns]
    columns = [[str(cell) for cell in c.cells] for c in table.columns]
    rows = [list(r) for r in zip(*columns, strict=False)] if columns else []
    return TableBlock(f"{prefix}{table.title or ''}", headers, rows)


# -- sections -----------------------------------------------------------------------

def _fact_rows(bundle: Bundle) -> dict[str, str]:
    m = bundle.manifest
    host = m.get("host") or {}
    p = m.get("parameters", {})
    clock = m.get("clock") or {}
    virt = host.get("virtualization") or {}
    rows = {
        "kind": m.get("kind", ""),
        "label": m.get("label") or "",
        "started (UTC)": m.get("started_utc", ""),
        "complete": "yes" if m.get("complete") else "no (interrupted)",
        "command": " ".join(m.get("argv", [])),
        "host": host.get("hostname", ""),
        "kernel": (f"{host.get('kernel_release', '')} ({host.get('preemption') or '?'} preemption)"
                   if host else ""),
        "kernel command line": host.get("kernel_cmdline", ""),
        "CPU model": host.get("cpu_model", ""),
        "topology": (f"{host.get('online_cpus', '?')} online; {host.get('sockets', '?')} sockets, "
                     f"{host.get('cores', '?')} cores, {host.get('threads_per_core', '?')} "
                     "threads per core") if host else "",
        "virtualization": (f"guest of {virt.get('vendor') or 'a hypervisor'}"
                           if virt.get("hypervisor") else "bare metal") if host else "",
        "timer tick": f"CONFIG_HZ={host.get('config_hz') or '?'}" if host else "",
        "isolated / nohz_full": (f"{host.get('isolated_cpus') or '-'} / "
                                 f"{host.get('nohz_full_cpus') or '-'}") if host else "",
        "clocksource": host.get("clocksource") or "",
        "measurement clock": (f"{clock['counter']} at {clock['ticks_per_second'] / 1e6:.3f} MHz "
                              f"({clock['frequency_source']})") if clock else "",
    }
    if "cpus" in p:
        mode = f"SCHED_FIFO {p['priority']}" if p.get("priority") else "SCHED_OTHER"
        rows["measured CPUs"] = format_cpu_list(p["cpus"])
        rows["per probe"] = (f"{format_duration(p.get('duration_ns'))}, probes "
                             f"{', '.join(p.get('probes', []))}, {mode}")
    if "threshold_ns" in p:
        rows["detour threshold"] = format_duration(p["threshold_ns"])
    injections = injection_lines(bundle)
    if injections:
        rows["injected noise"] = "; ".join(line.strip() for line in injections)
    return {k: v for k, v in rows.items() if v}


def configuration_section(bundles: list[Bundle], names: list[str]) -> Section:
    facts = [_fact_rows(b) for b in bundles]
    keys = list(dict.fromkeys(k for f in facts for k in f))
    rows = [[key, *(f.get(key, "") for f in facts)] for key in keys]
    return Section("configuration", "Configuration and host",
                   tables=[TableBlock("", ["", *names], rows)])


def system_section(bundles: list[Bundle], names: list[str]) -> Section | None:
    checks = list(dict.fromkeys(f["check"] for b in bundles for f in b.manifest.get("system", [])))
    if not checks:
        return None
    rows = []
    for check in checks:
        cells = []
        for b in bundles:
            found = [f for f in b.manifest.get("system", []) if f["check"] == check]
            if not found:
                cells.append("")
                continue
            f = found[0]
            cells.append(f"{f['state']}: {f['message']}"
                         + (f" (advice: {f['advice']})" if f.get("advice") else ""))
        rows.append([check, *cells])
    return Section("system", "System check",
                   ["What on the measured machine adds noise when the bundle was taken "
                    "(noisescope system show)."],
                   tables=[TableBlock("", ["check", *names], rows)])


def warnings_section(bundles: list[Bundle], names: list[str]) -> Section | None:
    items = [(f"{name}: {w.message}" if len(bundles) > 1 else w.message, w.hint)
             for b, name in zip(bundles, names, strict=True) for w in b.warnings]
    return Section("warnings", "Warnings", items=items) if items else None


def summary_sections(bundles: list[Bundle], names: list[str]) -> list[Section]:
    kinds = list(dict.fromkeys([*SUMMARY_TABLES, *plots.FIGURES,
                                *(k for b in bundles for k in b.summaries)]))
    sections = []
    for kind in kinds:
        having = [(b, n) for b, n in zip(bundles, names, strict=True) if b.summaries.get(kind)]
        if not having:
            continue
        drawn = [(render(b.summaries[kind]), n) for b, n in having
                 for render in SUMMARY_TABLES.get(kind, [])]
        tables = [rich_to_block(table, f"{n}: " if len(bundles) > 1 else "")
                  for table, n in drawn if table is not None]
        figures = [f for draw in plots.FIGURES.get(kind, []) for f in draw([b for b, _ in having])]
        if not tables and not figures:
            continue
        title = tables[0].title.split(": ", 1)[-1] if tables else figures[0].title
        sections.append(Section(kind, title, tables=tables, figures=figures))
    return sections


def comparison_section(bundles: list[Bundle], names: list[str]) -> Section | None:
    if len(bundles) < 2:
        return None
    figures = [f for draw in plots.COMPARISONS for f in draw(bundles)]
    probes = ("detour", "ftq", "fwq")
    if not any(b.summaries.get(p) for b in bundles for p in probes):
        return Section("comparison", "Comparison", figures=figures) if figures else None
    rows = []
    for b, name in zip(bundles, names, strict=True):
        row = [name]
        for probe in probes:
            values = [s["noise_pct"] for s in b.summaries.get(probe, [])
                      if s.get("noise_pct") is not None]
            row.append(f"{sum(values) / len(values):.3f}" if values else "-")
        detours = b.summaries.get("detour", [])
        row.append(f"{sum(s['detours_per_s'] for s in detours) / len(detours):,.1f}"
                   if detours else "-")
        row.append(format_duration(max(s["max_ns"] for s in detours)) if detours else "-")
        rows.append(row)
    table = TableBlock("Mean over the measured CPUs", ["bundle", "detour noise %", "FTQ noise %",
                                                       "FWQ noise %", "detours/s", "longest detour"],
                       rows)
    return Section("comparison", "Comparison", tables=[table], figures=figures)


SectionBuilder = Callable[[list[Bundle], list[str]], "Section | list[Section] | None"]
SECTIONS: list[SectionBuilder] = [configuration_section, system_section, warnings_section,
                                  summary_sections, comparison_section]


def prepare(bundle: Bundle) -> Bundle:
    """Add what older bundles lack and the report needs (the spectra of a scan)."""
    from ..analysis.spectrum import add_spectra

    if bundle.kind == "scan" and "spectrum" not in bundle.summaries:
        add_spectra(bundle)
    return bundle


def build_report(bundles: list[Bundle]) -> Report:
    bundles = [prepare(b) for b in bundles]
    names = list(plots.bundle_names(bundles).values())
    sections: list[Section] = []
    for build in SECTIONS:
        made = build(bundles, names)
        sections.extend(made if isinstance(made, list) else [made] if made else [])
    title = f"noisescope report: {', '.join(names)}"
    return Report(title, names, sections)


# -- writers -------------------------------------------------------------------------

def _atomic_write(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def render_html(report: Report) -> str:
    import jinja2

    template = resources.files("noisescope").joinpath("render/templates/report.html.j2").read_text()
    environment = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True,
                                     undefined=jinja2.StrictUndefined)
    images = {f.key: base64.b64encode(f.png()).decode("ascii") for f in report.figures}
    return environment.from_string(template).render(report=report, images=images,
                                                    version=__version__)


def figure_files(report: Report) -> list[tuple[str, plots.Figure]]:
    return [(f"{i:02d}-{f.key}.png", f) for i, f in enumerate(report.figures, 1)]


def md_escape(text: str) -> str:
    """Text from a bundle, safe inside Markdown (no HTML, no table breaks, no emphasis)."""
    escaped = html.escape(str(text), quote=False).replace("|", "\\|").replace("\n", " ")
    for mark in "\\`*_[]#":
        if mark == "\\":
            continue
        escaped = escaped.replace(mark, "\\" + mark)
    return escaped


def render_markdown(report: Report, figure_dir: str) -> str:
    files = {id(f): name for name, f in figure_files(report)}
    lines = [f"# {md_escape(report.title)}", ""]
    for section in report.sections:
        lines += [f"## {md_escape(section.title)}", ""]
        lines += [md_escape(p) + "\n" for p in section.paragraphs]
        for text, hint in section.items:
            lines.append(f"- {md_escape(text)}  \n  _{md_escape(hint)}_")
        if section.items:
            lines.append("")
        for table in section.tables:
            if table.title:
                lines += [f"**{md_escape(table.title)}**", ""]
            lines.append("| " + " | ".join(md_escape(h) for h in table.headers) + " |")
            lines.append("|" + "---|" * len(table.headers))
            lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in table.rows]
            lines.append("")
        for f in section.figures:
            lines += [f"![{md_escape(f.title)}]({figure_dir}/{files[id(f)]})", "",
                      f"_{md_escape(f.caption)}_", ""]
    return "\n".join(lines)


def write_report(bundles: list[Bundle], output: str | os.PathLike[str], fmt: str = "html") -> Path:
    """Build the report and write it; returns the file (or directory for png)."""
    out = Path(output)
    report = build_report(bundles)
    if fmt == "html":
        _atomic_write(out, render_html(report).encode())
    elif fmt == "md":
        figure_dir = out.with_name(out.stem + "_files")
        figure_dir.mkdir(exist_ok=True)
        for name, f in figure_files(report):
            _atomic_write(figure_dir / name, f.png())
        _atomic_write(out, render_markdown(report, figure_dir.name).encode())
    elif fmt == "png":
        out.mkdir(exist_ok=True)
        for name, f in figure_files(report):
            _atomic_write(out / name, f.png())
    else:
        raise ValueError(f"unknown report format {fmt!r}")
    return out
