"""Comparison output: terminal tables, Markdown (like a paper's tables), CSV, JSON.

Every format shows the same numbers; only the layout differs. Units are
converted for display here and nowhere else.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import numpy as np
from rich.console import Console
from rich.table import Table as RichTable

from ..analysis.compare import PERTURBATION_METRICS, Change, Comparison, MetricInfo, Row
from ..units import format_duration
from .text import md_escape

FORMATS = ("terminal", "markdown", "csv", "json")
CSV_FIELDS = ("workload", "metric", "title", "unit", "better", "configuration", "baseline", "n",
              "mean", "std", "median", "min", "max", "p99", "change", "ci_low", "ci_high",
              "change_unit", "p_value", "q_value", "significant", "verdict")


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ns":
        return format_duration(value)
    if unit == "KiB":
        return f"{value / 1024:.1f} MiB" if abs(value) >= 1024 else f"{value:.0f} KiB"
    if unit == "/s":
        return f"{value:,.0f}/s" if abs(value) >= 100 else f"{value:.3g}/s"
    if unit == "%":
        return f"{value:.3f}%"
    if unit == "count":
        return f"{value:,.1f}" if value != int(value) else f"{int(value):,}"
    return f"{value:,.0f}" if abs(value) >= 1_000 else f"{value:.4g}"


def _signed(value: float) -> str:
    return f"{value:+.2f}" if abs(value) < 10 else f"{value:+.1f}"


def format_shift(value: float | None, unit: str = "%") -> str:
    """A change: '+5.12%' (relative), '+5.12 pp' (of a share), '+1.2 ms' (other units)."""
    if value is None:
        return "-"
    if unit in ("%", "pp"):
        return f"{_signed(value)}{' pp' if unit == 'pp' else '%'}"
    return ("+" if value > 0 else "") + format_value(value, unit)


def format_ci(change: Change | None) -> str:
    if change is None or change.change is None:
        return "-"
    if change.ci_low is None:  # too few runs for any bound at this level
        return "unbounded"
    if change.change_unit in ("%", "pp"):
        return f"[{_signed(change.ci_low)}, {_signed(change.ci_high)}]"
    return f"[{format_shift(change.ci_low, change.change_unit)}, " \
           f"{format_shift(change.ci_high, change.change_unit)}]"


def format_p(value: float | None) -> str:
    if value is None:
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def format_level(comparison: Comparison) -> str:
    """'95%', or '98.75%' when adjusted for several comparisons."""
    return f"{100 * comparison.confidence:.4g}%"


def format_change(change: Change | None) -> str:
    """'+5.12% [+3.90, +6.31] worse' or '... n.s.' (not significant)."""
    if change is None:
        return "baseline"
    if change.change is None:
        return change.verdict
    verdict = "n.s." if change.verdict == "not significant" else change.verdict
    return f"{format_shift(change.change, change.change_unit)} {format_ci(change)} {verdict}"


def method_lines(comparison: Comparison) -> list[str]:
    tests, significant = _tests(comparison), _significant(comparison)
    level = format_level(comparison)
    if tests > 1 and significant:
        level += (f" (= 1 - {comparison.alpha:g} x {significant}/{tests}: adjusted for the "
                  f"{significant} significant of {tests}, so an interval excludes 0 exactly "
                  f"where q < {comparison.alpha:g})")
    elif tests > 1:
        level += (f" (= 1 - {comparison.alpha:g}/{tests}: none of the {tests} is significant, "
                  f"and no interval excludes 0)")
    return [
        f"baseline: {comparison.baseline}; n = runs (bench), bundles (per-CPU summaries) "
        f"or nodes (fleets; CPUs with --by-node)",
        "change: Hodges-Lehmann estimate vs the baseline (the median over all pairs of runs of "
        "the ratio new/baseline; a difference for shares (pp) or where a value is <= 0); "
        f"CI: the Mann-Whitney interval of that change at {level}; unbounded where the runs "
        f"are too few for that level",
        f"p: Mann-Whitney U (two-sided); q: Benjamini-Hochberg over all {tests} comparisons; "
        f"significant when q < {comparison.alpha:g}",
    ]


def _significant(comparison: Comparison) -> int:
    return sum(1 for r in comparison.rows if r.change and r.change.significant)


def _tests(comparison: Comparison) -> int:
    return sum(1 for r in comparison.rows if r.change and r.change.p_value is not None)


# -- terminal -----------------------------------------------------------------------

def stats_table(comparison: Comparison, workload: str) -> RichTable:
    rows = [r for r in comparison.rows if r.workload == workload]
    with_p99 = any(r.stats.p99 is not None for r in rows)
    table = RichTable(title=f"{workload}: runs", title_justify="left")
    names = ["metric", "configuration", "n", "mean", "sd", "median", "min", "max"]
    for name in names + (["p99"] if with_p99 else []):
        table.add_column(name, justify="left" if name in ("metric", "configuration") else "right")
    previous = None
    for row in rows:
        s, unit = row.stats, row.metric.unit
        cells = [row.metric.title if row.metric != previous else "", row.configuration,
                 str(s.n), *(format_value(v, unit) for v in (s.mean, s.std, s.median, s.min,
                                                              s.max))]
        table.add_row(*cells, *([format_value(s.p99, unit)] if with_p99 else []))
        previous = row.metric
    return table


def change_table(comparison: Comparison, workload: str) -> RichTable | None:
    rows = [r for r in comparison.rows if r.workload == workload and r.change is not None]
    if not rows:
        return None
    table = RichTable(title=f"{workload}: change vs {comparison.baseline} (Hodges-Lehmann)",
                      title_justify="left")
    for name in ("metric", "configuration", "change", f"{format_level(comparison)} CI", "p", "q",
                 "verdict"):
        table.add_column(name, justify="left" if name in ("metric", "configuration", "verdict")
                         else "right")
    previous = None
    for row in rows:
        c = row.change
        table.add_row(row.metric.title if row.metric != previous else "", row.configuration,
                      format_shift(c.change, c.change_unit), format_ci(c), format_p(c.p_value),
                      format_p(c.q_value), c.verdict)
        previous = row.metric
    return table


def perturbation_rows(comparison: Comparison) -> list[tuple[str, str, list[Change | None]]]:
    """(workload, configuration, changes of wall/user/sys) where all three were measured."""
    out = []
    for workload in comparison.workloads:
        for config in comparison.configurations:
            if config == comparison.baseline:
                continue
            found = [comparison.row(workload, m, config) for m in PERTURBATION_METRICS]
            if all(found):
                out.append((workload, config, [r.change for r in found]))
    return out


def perturbation_table(comparison: Comparison) -> RichTable | None:
    rows = perturbation_rows(comparison)
    if not rows:
        return None
    table = RichTable(title=f"Perturbation: change of wall, user and system time vs "
                            f"{comparison.baseline}", title_justify="left")
    for name in ("workload", "configuration", "wall", "user", "sys"):
        table.add_column(name, justify="left" if name in ("workload", "configuration")
                         else "right")
    for workload, config, changes in rows:
        table.add_row(workload, config, *(format_change(c) for c in changes))
    return table


MAX_CONFIGURATION_ROWS = 40  # shown row by row; beyond (a fleet --by-node), the distribution
DISTRIBUTION = (("min", 0), ("median", 50), ("p90", 90), ("p99", 99), ("max", 100))


def comparison_blocks(comparison: Comparison) -> list[str | RichTable]:
    """The method lines, then per workload its tables: a row per configuration, or with
    more than MAX_CONFIGURATION_ROWS of them (the nodes of a fleet, --by-node) the
    distribution of their medians and only the significant changes (the outliers)."""
    blocks: list[str | RichTable] = list(method_lines(comparison))
    overview: dict[str, list[RichTable | None]] = {}
    if len(comparison.configurations) > MAX_CONFIGURATION_ROWS:
        overview = {w: [distribution_table(comparison, w), outliers_table(comparison, w)]
                    for w in comparison.workloads}
        comparison, line = significant_only(comparison)
        blocks.append(line)
    for workload in comparison.workloads:
        blocks += [t for t in (*overview.get(workload, []), stats_table(comparison, workload),
                               change_table(comparison, workload)) if t is not None]
    return blocks


def distribution_table(comparison: Comparison, workload: str) -> RichTable:
    """Per metric, the configurations' medians over the configurations, and how many
    changed significantly against the baseline."""
    table = RichTable(title=f"{workload}: the {len(comparison.configurations):,} "
                            f"configurations' medians", title_justify="left")
    for name in ("metric", "n", *(name for name, _ in DISTRIBUTION), "significant changes"):
        table.add_column(name, justify="left" if name == "metric" else "right")
    for metric in comparison.metrics(workload):
        rows = comparison.rows_of(workload, metric.name)
        points = np.percentile([r.stats.median for r in rows], [q for _, q in DISTRIBUTION])
        changed = sum(1 for r in rows if r.change and r.change.significant)
        table.add_row(metric.title, f"{len(rows):,}",
                      *(format_value(float(v), metric.unit) for v in points), f"{changed:,}")
    return table


def outliers_table(comparison: Comparison, workload: str) -> RichTable | None:
    """The configurations (a fleet's nodes) whose median stands out above the others'
    (analysis.fleet.outlying_rows), at most MAX_CONFIGURATION_ROWS of them."""
    from ..analysis.fleet import OUTLIER_RATIO, outlying_rows

    found = outlying_rows(comparison, workload)
    if not found:
        return None
    shown = found[:MAX_CONFIGURATION_ROWS]
    more = f" ({len(shown)} of {len(found):,})" if len(found) > len(shown) else ""
    table = RichTable(title=f"{workload}: standing out (at least {OUTLIER_RATIO:g}x the other "
                            f"configurations' median){more}", title_justify="left")
    for name in ("metric", "configuration", "median", "others' median", "ratio",
                 f"change vs {comparison.baseline}"):
        table.add_column(name, justify="left" if name in ("metric", "configuration") else "right")
    for row, others in shown:
        unit = row.metric.unit
        ratio = f"{row.stats.median / others:,.1f}x" if others > 0 else "none elsewhere"
        table.add_row(row.metric.title, row.configuration, format_value(row.stats.median, unit),
                      format_value(others, unit), ratio, format_change(row.change))
    return table


def significant_only(comparison: Comparison) -> tuple[Comparison, str]:
    """Of a comparison of many configurations, the baseline's rows and the significant
    changes (the nodes that differ), and a line saying what is left out."""
    kept = [r for r in comparison.rows if r.is_baseline or (r.change and r.change.significant)]
    changed = {r.configuration for r in kept if not r.is_baseline}
    line = (f"{len(comparison.configurations) - 1:,} configurations against "
            f"{comparison.baseline}: only the significant changes are shown "
            f"({len(kept) - sum(r.is_baseline for r in kept):,} of "
            f"{sum(not r.is_baseline for r in comparison.rows):,}, on {len(changed):,} "
            f"configurations); --format csv or json lists them all")
    return dataclasses.replace(comparison, rows=kept), line


def print_comparison(comparison: Comparison, console: Console) -> None:
    for block in comparison_blocks(comparison):
        if isinstance(block, str):
            console.print(block, highlight=False, markup=False)
        else:
            console.print()
            console.print(block)
    perturbation = perturbation_table(comparison)
    if perturbation is not None:
        console.print()
        console.print(perturbation)
        console.print("n.s. = not significant", highlight=False, markup=False)
    print_notes(comparison, console)


def print_notes(comparison: Comparison, console: Console) -> None:
    if comparison.warnings:
        console.print()
    for w in comparison.warnings:
        console.print(f"warning: {w.message}", style="yellow", highlight=False, markup=False)
        console.print(f"  hint: {w.hint}", style="dim", highlight=False, markup=False)


# -- Markdown --------------------------------------------------------------------------

def _md_table(header: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    """A Markdown table; cells of text from bundles come escaped (md_escape)."""
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _paper_cell(row: Row | None) -> str:
    if row is None:
        return "-"
    text = format_value(row.stats.median, row.metric.unit)
    change = row.change
    if change and change.change is not None:
        mark = "*" if change.significant else ", n.s."
        text += f" ({format_shift(change.change, change.change_unit)}{mark})"
    return text


def paper_table(comparison: Comparison, metric: MetricInfo) -> list[str]:
    """Workloads down, configurations across: the median (the change vs the baseline,
    the Hodges-Lehmann estimate, which the median of each group reads beside)."""
    workloads = [w for w in comparison.workloads
                 if any(comparison.row(w, metric.name, c) for c in comparison.configurations)]
    rows = [[md_escape(w)] + [_paper_cell(comparison.row(w, metric.name, c))
                              for c in comparison.configurations] for w in workloads]
    better = f", {metric.better} is better" if metric.better else ""
    return [f"**{md_escape(metric.title)}** (median; change vs "
            f"{md_escape(comparison.baseline)}: Hodges-Lehmann{better})",
            "", *_md_table(["workload", *map(md_escape, comparison.configurations)], rows)]


def markdown(comparison: Comparison) -> str:
    lines = ["## Comparison", "", *[f"- {md_escape(line)}" for line in method_lines(comparison)],
             ""]
    for metric in comparison.metrics():
        lines += [*paper_table(comparison, metric), ""]
    lines.append(f"\\* significant (q < {comparison.alpha:g}); n.s. = not significant.")
    lines.append("")
    perturbation = perturbation_rows(comparison)
    if perturbation:
        lines += [f"### Perturbation: change vs {md_escape(comparison.baseline)}", ""]
        lines += _md_table(["workload", "configuration", "wall", "user", "sys"],
                           [[md_escape(w), md_escape(c), *(format_change(x) for x in changes)]
                            for w, c, changes in perturbation], right_from=2)
        lines += ["", "n.s. = not significant", ""]
    for workload in comparison.workloads:
        lines += [f"### {md_escape(workload)}", ""]
        rows = []
        for row in (r for r in comparison.rows if r.workload == workload):
            s, c, unit = row.stats, row.change, row.metric.unit
            rows.append([md_escape(row.metric.title), md_escape(row.configuration), str(s.n),
                         format_value(s.mean, unit),
                         format_value(s.std, unit), format_value(s.median, unit),
                         format_value(s.min, unit), format_value(s.max, unit),
                         format_value(s.p99, unit),
                         format_shift(c.change, c.change_unit) if c else "", format_ci(c),
                         format_p(c.p_value) if c else "", format_p(c.q_value) if c else "",
                         c.verdict if c else "baseline"])
        lines += _md_table(["metric", "configuration", "n", "mean", "sd", "median", "min", "max",
                            "p99", "change", f"{format_level(comparison)} CI", "p", "q",
                            "verdict"], rows, right_from=2)
        lines.append("")
    if comparison.warnings:
        lines += ["### Warnings", ""]
        lines += [f"- {md_escape(w.message)} ({md_escape(w.hint)})" for w in comparison.warnings]
        lines.append("")
    return "\n".join(lines)


# -- CSV and JSON -------------------------------------------------------------------------

def to_csv(comparison: Comparison) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for row in comparison.rows:
        writer.writerow(row.to_dict(with_cdf=False))
    return out.getvalue()


def to_json(comparison: Comparison) -> str:
    # Compact: the C encoder is several times faster than an indented dump, and
    # the CDFs of big comparisons hold a value per run.
    return json.dumps(comparison.to_dict(), separators=(",", ":")) + "\n"
