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
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .. import __version__
from ..analysis.fleet import FleetBundle, counts, noisiest
from ..bundle import MANIFEST, Bundle
from ..errors import UsageError, option
from ..units import format_cpu_list, format_duration
from ..workers import run_parts, worker_count
from . import plots
from .bench import bench_lines
from .terminal import OVERVIEWS, SUMMARY_TABLES, import_lines, injection_lines, overview_blocks
from .text import md_escape


@dataclass
class TableBlock:
    title: str
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Section:
    key: str
    title: str
    blocks: list[str | TableBlock] = field(default_factory=list)  # paragraphs and tables, in order
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
        **({"imported": "; ".join(import_lines(m.get("source")))} if bundle.kind == "import" else {}),
        "workload runs": "; ".join(bench_lines(bundle)),
        "ranks": _ranks_fact(bundle),
        "host": host.get("hostname", "") + (" (rank 0)" if host and "ranks" in p else ""),
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
    if p.get("cpus") is not None:
        rows["measured CPUs"] = format_cpu_list(p["cpus"])
    if p.get("probes") and p.get("duration_ns"):
        priority = p.get("priority") if p.get("rt", True) else 0
        mode = f"SCHED_FIFO {priority}" if priority else "SCHED_OTHER"
        rows["per probe"] = (f"{format_duration(p['duration_ns'])}, probes "
                             f"{', '.join(p['probes'])}, {mode}")
    if "threshold_ns" in p:
        rows["detour threshold"] = format_duration(p["threshold_ns"])
    injections = injection_lines(bundle)
    if injections:
        rows["injected noise"] = "; ".join(line.strip() for line in injections)
    return {k: v for k, v in rows.items() if v}


def _ranks_fact(bundle: Bundle) -> str:
    """'4 ranks on 2 nodes, 3 measured' for fleet and bsp bundles."""
    ranks = bundle.summaries.get("ranks") if bundle.kind in ("fleet", "bsp") else None
    if not ranks:
        return ""
    found = counts(ranks)
    return (f"{bundle.parameters.get('ranks', found['ranks'])} ranks on {found['nodes']} "
            f"node{'s' if found['nodes'] != 1 else ''}, {found['measured']} measured")


def configuration_section(bundles: list[Bundle], names: list[str]) -> Section:
    facts = [_fact_rows(b) for b in bundles]
    keys = list(dict.fromkeys(k for f in facts for k in f))
    rows = [[key, *(f.get(key, "") for f in facts)] for key in keys]
    return Section("configuration", "Configuration and host",
                   [TableBlock("", ["", *names], rows)])


def _finding_text(finding: dict) -> str:
    return (f"{finding['state']}: {finding['message']}"
            + (f" (advice: {finding['advice']})" if finding.get("advice") else ""))


def _system_cells(bundle: Bundle, checks: list[str]) -> list[str]:
    """One bundle's finding for each check. Fleet and bsp bundles hold every rank's
    findings: ranks with the same finding share it ('all 64 ranks', 'ranks 3 (n2)')."""
    if bundle.kind == "import":
        return ["not checked: imported results; noisescope did not see the machine they were "
                "measured on"] * len(checks)
    by_check: dict[str, list[dict]] = {}
    for f in bundle.system:  # (a fleet of 10,000 ranks: 150,000 findings)
        by_check.setdefault(f["check"], []).append(f)
    ranks = {(f["rank"], f["node"]) for f in bundle.system if "rank" in f}
    return [_system_cell(by_check.get(check, []), len(ranks)) for check in checks]


def _system_cell(found: list[dict], ranks: int) -> str:
    if all("rank" not in f for f in found):
        return _finding_text(found[0]) if found else ""
    same: dict[str, list[str]] = {}
    for f in sorted(found, key=lambda f: f["rank"]):
        same.setdefault(_finding_text(f), []).append(f"{f['rank']} ({f['node']})")
    if len(same) == 1 and len(next(iter(same.values()))) == ranks:
        return f"{next(iter(same))} [all {ranks} ranks]"
    return "; ".join(f"{text} [rank{'s' if len(where) > 1 else ''} {', '.join(where)}]"
                     for text, where in same.items())


def system_section(bundles: list[Bundle], names: list[str]) -> Section | None:
    checks = list(dict.fromkeys(f["check"] for b in bundles for f in b.system))
    if not checks and any(b.kind == "import" for b in bundles):
        checks = ["(all)"]  # say why an import has none
    if not checks:
        return None
    cells = [_system_cells(b, checks) for b in bundles]
    rows = [[check, *(column[i] for column in cells)] for i, check in enumerate(checks)]
    return Section("system", "System check",
                   ["What on the measured machine adds noise when the bundle was taken "
                    "(noisescope system show); fleet and bsp bundles: on every rank's node.",
                    TableBlock("", ["check", *names], rows)])


def warnings_section(bundles: list[Bundle], names: list[str]) -> Section | None:
    items = [(f"{name}: {w.message}" if len(bundles) > 1 else w.message, w.hint)
             for b, name in zip(bundles, names, strict=True) for w in b.warnings]
    return Section("warnings", "Warnings", items=items) if items else None


OVERVIEW_TITLES = {"fleet": "Fleet: the ranks side by side",
                   "bsp": "Measured against predicted slowdown",
                   "prediction": "Predicted slowdown at scale"}
# Kinds whose overview shows every summary they hold: no per-summary sections for them.
# A fleet's per-CPU summaries do get them (rank and node columns, figures from its ranks).
WHOLLY_IN_OVERVIEW = {"bsp", "prediction"}
MAX_RANK_TABLES = plots.MAX_PANELS  # a fleet's tables per rank (spectrum, causes): the noisiest
MAX_FLEET_ROWS = 40  # a fleet's per-CPU rows in one table: beyond, the noisiest CPUs


def overview_sections(bundles: list[Bundle], names: list[str]) -> list[Section]:
    """One section per bundle kind listed in terminal.OVERVIEWS: the lines and tables
    `show` prints for it, and the kind's figures (plots.KIND_FIGURES)."""
    sections = []
    several = len(bundles) > 1
    for kind in dict.fromkeys(b.kind for b in bundles if b.kind in OVERVIEWS):
        having = [(b, n) for b, n in zip(bundles, names, strict=True) if b.kind == kind]
        blocks: list[str | TableBlock] = []
        for bundle, name in having:
            prefix = f"{name}: " if several else ""
            for block in overview_blocks(bundle) or []:
                blocks.append(prefix + block if isinstance(block, str)
                              else rich_to_block(block, prefix))
            if isinstance(bundle, FleetBundle) and bundle.absent:
                blocks.append(f"{prefix}{len(bundle.absent)} ranks' own bundles are not here (no "
                              "shared file system?): their figures are missing from this report")
        figures = [f for draw in plots.KIND_FIGURES.get(kind, [])
                   for f in draw([b for b, _ in having])]
        sections.append(Section(kind, OVERVIEW_TITLES[kind], blocks, figures))
    return sections


def _members(bundle: Bundle) -> list[Bundle]:
    """What a bundle's figures are drawn from: a fleet's rank bundles (its noisiest
    ones, beyond MAX_RANK_TABLES ranks), else itself."""
    return bundle.drawn_nodes(MAX_RANK_TABLES) if isinstance(bundle, FleetBundle) else [bundle]


def summary_sections(bundles: list[Bundle], names: list[str]) -> list[Section]:
    """One section per summary kind. A fleet's own per-CPU summaries make tables with
    its ranks as rows; its ranks' bundles make the figures (all ranks on one figure)
    and the tables of the kinds the fleet does not gather (spectrum, causes)."""
    shown = [(b, n) for b, n in zip(bundles, names, strict=True)
             if b.kind not in WHOLLY_IN_OVERVIEW]
    several = len(bundles) > 1
    node_names = plots.bundle_names([m for b, _ in shown if isinstance(b, FleetBundle)
                                     for m in _members(b)])
    kinds = dict.fromkeys([*SUMMARY_TABLES, *plots.FIGURES,
                           *(k for b, _ in shown for m in [b, *_members(b)] for k in m.summaries)])
    sections = []
    for kind in kinds:
        sources: list[tuple[list[dict], str]] = []  # (summary rows, table title prefix)
        drawn: list[Bundle] = []
        lines: list[str] = []
        for bundle, name in shown:
            prefix = f"{name}: " if several else ""
            rows = bundle.summaries.get(kind)
            if rows and isinstance(bundle, FleetBundle) and len(rows) > MAX_FLEET_ROWS:
                key = next((k for k in ("noise_pct", "max_ns") if k in rows[0]), None)
                rows = noisiest(rows, key, MAX_FLEET_ROWS) if key else rows[:MAX_FLEET_ROWS]
                lines.append(f"{prefix}{kind}: the {len(rows)} "
                             f"{'noisiest (by ' + key + ')' if key else 'first'} of "
                             f"{len(bundle.summaries[kind]):,} CPUs")
            if rows:
                sources.append((rows, prefix))
            elif isinstance(bundle, FleetBundle):  # per rank, the noisiest ones of a large fleet
                sources += [(m.summaries[kind], f"{prefix}{node_names[id(m)]}: ")
                            for m in bundle.noisiest_nodes(MAX_RANK_TABLES) if m.summaries.get(kind)]
            drawn += [m for m in _members(bundle) if m.summaries.get(kind)]
        made = [(render(rows), prefix) for rows, prefix in sources
                for render in SUMMARY_TABLES.get(kind, [])]
        tables = [rich_to_block(table, prefix) for table, prefix in made if table is not None]
        figures = [f for draw in plots.FIGURES.get(kind, []) for f in draw(drawn)] if drawn else []
        if not tables and not figures:
            continue
        title = next((t.title for t, _ in made if t is not None), None) or figures[0].title
        sections.append(Section(kind, title, [*lines, *tables], figures))
    return sections


NOISE_PROBES = ("detour", "ftq", "fwq")


def comparison_section(bundles: list[Bundle], names: list[str]) -> Section | None:
    """The noise of two or more bundles side by side (bench runs are compared in their
    own section: run-time CDFs and bars per configuration)."""
    compared = [(b, n) for b, n in zip(bundles, names, strict=True)
                if any(b.summaries.get(p) for p in NOISE_PROBES)]
    if len(compared) < 2:
        return None
    figures = [f for draw in plots.COMPARISONS for f in draw([b for b, _ in compared])]
    rows = []
    for b, name in compared:
        row = [name]
        for probe in NOISE_PROBES:
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
    return Section("comparison", "Comparison", [table], figures)


def node_comparison_sections(bundles: list[Bundle], names: list[str]) -> list[Section]:
    """Per fleet whose ranks ran on two nodes or more: every node against the others
    (`noisescope compare FLEET --by-node`: each node a configuration, its CPUs the units)."""
    from ..analysis.compare import compare
    from .compare import comparison_blocks

    sections = []
    several = len(bundles) > 1
    for bundle, name in zip(bundles, names, strict=True):
        if bundle.kind != "fleet":
            continue
        if len({r["node"] for r in bundle.summaries["ranks"] if r["status"] == "ok"}) < 2:
            continue
        try:
            comparison = compare([bundle], by_node=True)
        except UsageError:  # no per-CPU figures to compare
            continue
        blocks: list[str | TableBlock] = [b if isinstance(b, str) else rich_to_block(b)
                                          for b in comparison_blocks(comparison)]
        blocks += [f"warning: {w.message}" for w in comparison.warnings]
        sections.append(Section(f"nodes-{len(sections)}", "Node against node"
                                + (f": {name}" if several else ""), blocks))
    return sections


SectionBuilder = Callable[[list[Bundle], list[str]], "Section | list[Section] | None"]
SECTIONS: list[SectionBuilder] = [configuration_section, system_section, warnings_section,
                                  overview_sections, summary_sections, comparison_section,
                                  node_comparison_sections]


def prepare(bundle: Bundle) -> Bundle:
    """Add what older bundles lack and the report needs (the spectra of a scan); a
    fleet reaches its ranks' own bundles."""
    from ..analysis.spectrum import add_spectra

    if bundle.kind == "scan" and "spectrum" not in bundle.summaries:
        add_spectra(bundle)
    if bundle.kind == "fleet":
        return FleetBundle.of(bundle)
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
    images = {f.key: base64.b64encode(png).decode("ascii")
              for f, png in zip(report.figures, rendered(report.figures), strict=True)}
    return environment.from_string(template).render(report=report, images=images,
                                                    version=__version__)


def rendered(figures: list[plots.Figure]) -> list[bytes]:
    """Each figure as PNG, drawn side by side in worker processes where there
    are CPUs for them (matplotlib draws on one CPU: drawing took most of a
    256-CPU scan's report). Those with the most panels are handed out first:
    a worker takes the next figure when it is done, and the longest one
    (the spectra's panels, half of the drawing) taken last would be drawn
    while the other workers had nothing left to do."""
    order = sorted(range(len(figures)), key=lambda i: -len(figures[i].figure.axes))
    drawn = run_parts(plots.Figure.png, [figures[i] for i in order], worker_count(len(figures)))
    pngs: list[bytes] = [b""] * len(figures)
    for i, png in zip(order, drawn, strict=True):
        pngs[i] = png
    return pngs


def figure_files(report: Report) -> list[tuple[str, plots.Figure]]:
    return [(f"{i:02d}-{f.key}.png", f) for i, f in enumerate(report.figures, 1)]


def _write_figures(report: Report, directory: Path) -> None:
    files = figure_files(report)
    for (name, _), png in zip(files, rendered([f for _, f in files]), strict=True):
        _atomic_write(directory / name, png)


def render_markdown(report: Report, figure_dir: str) -> str:
    files = {id(f): name for name, f in figure_files(report)}
    lines = [f"# {md_escape(report.title)}", ""]
    for section in report.sections:
        lines += [f"## {md_escape(section.title)}", ""]
        for text, hint in section.items:
            lines.append(f"- {md_escape(text)}  \n  _{md_escape(hint)}_")
        if section.items:
            lines.append("")
        for block in section.blocks:
            if isinstance(block, str):
                lines += [md_escape(block) + "\n"]
                continue
            if block.title:
                lines += [f"**{md_escape(block.title)}**", ""]
            lines.append("| " + " | ".join(md_escape(h) for h in block.headers) + " |")
            lines.append("|" + "---|" * len(block.headers))
            lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in block.rows]
            lines.append("")
        for f in section.figures:
            lines += [f"![{md_escape(f.title)}]({figure_dir}/{files[id(f)]})", "",
                      f"_{md_escape(f.caption)}_", ""]
    return "\n".join(lines)


def check_output(output: str | os.PathLike[str], fmt: str = "html", *, replace: bool = False) -> None:
    """Refuse a report output that exists (unless `replace`) or lies inside a
    bundle (a bundle holds only its own report.html), before anything is drawn."""
    out = Path(output)
    written = [out, _figure_dir(out)] if fmt == "md" else [out]
    for path in written:
        inside = _bundle_around(path)
        own_report = fmt == "html" and path.name == "report.html" and path.parent.resolve() == inside
        if inside is not None and not own_report:
            raise UsageError(f"cannot write {path}: it is inside the bundle {inside}, which holds "
                             f"no other file than its report.html", f"choose another {option('output')}")
        if os.path.lexists(path) and not replace:
            raise UsageError(f"cannot write {path}: it already exists",
                             f"choose another {option('output')}, or add {option('replace')} to "
                             f"replace it")
    if not out.parent.is_dir():
        raise UsageError(f"cannot write {out}: directory {out.parent} does not exist",
                         "create it first or choose another -o")


def _figure_dir(out: Path) -> Path:
    """Where the PNG files of a Markdown report go."""
    return out.with_name(out.stem + "_files")


def _bundle_around(path: Path) -> Path | None:
    """The bundle directory `path` is inside (or is: a png directory), if any."""
    parent = path.parent.resolve()
    for directory in (path.resolve(), parent, *parent.parents):
        if _is_bundle(directory):
            return directory
    return None


def _is_bundle(directory: Path) -> bool:
    """Whether `directory` holds a noisescope manifest (a damaged one counts;
    another program's manifest.json does not)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return (directory / MANIFEST).is_file()
    tool = manifest.get("tool") if isinstance(manifest, dict) else None
    return not isinstance(tool, dict) or tool.get("name") == "noisescope"


def write_report(bundles: list[Bundle], output: str | os.PathLike[str], fmt: str = "html", *,
                 replace: bool = False) -> Path:
    """Build the report and write it; returns the file (or directory for png).
    An existing output is replaced only if `replace` (check_output)."""
    check_output(output, fmt, replace=replace)
    out = Path(output)
    report = build_report(bundles)
    if fmt == "html":
        _atomic_write(out, render_html(report).encode())
    elif fmt == "md":
        figure_dir = _figure_dir(out)
        figure_dir.mkdir(exist_ok=True)
        _write_figures(report, figure_dir)
        _atomic_write(out, render_markdown(report, figure_dir.name).encode())
    elif fmt == "png":
        out.mkdir(exist_ok=True)
        _write_figures(report, out)
    else:
        raise ValueError(f"unknown report format {fmt!r}")
    return out
