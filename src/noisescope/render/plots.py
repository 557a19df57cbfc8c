"""Figures for bundles (matplotlib, Agg backend: no display needed).

FIGURES maps a summary kind (as SUMMARY_TABLES in terminal.py does) to the
functions that draw it; each takes every bundle holding that kind and returns
Figures, putting several CPUs or configurations on one figure where that is
what a reader compares. COMPARISONS draw across bundles when several are
given. To add plots for a new kind: write `def my_plot(bundles) -> list[Figure]`
and list it under the kind in FIGURES.

Long series are reduced to a min/max envelope per pixel column, so every
spike stays visible; nothing is dropped or sampled.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.ticker import EngFormatter, FuncFormatter, NullFormatter  # noqa: E402

from ..bundle import Bundle  # noqa: E402
from ..tables import SpooledTable, Table, cpu_batches, table_cpus  # noqa: E402
from ..units import format_count, format_duration  # noqa: E402
from ..workers import run_parts, worker_count  # noqa: E402

COLUMNS = 1500  # envelope columns per panel: about one per pixel
SCATTER_LIMIT = 20_000  # up to this many detours per panel are drawn one by one
MAX_PANELS = 8
# what the figures read of a detour table (not its causes: strings, most of its memory)
DETOUR_COLUMNS = ("cpu", "start_ns", "duration_ns")
WIDTH_IN = 10.0
DPI = 100
STYLE = {
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.titleweight": "bold",
    "legend.fontsize": 8,
    "legend.frameon": False,
}
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
# One colour per cause of detours (trace.attribute.CAUSES), none shared; the
# causes the guest cannot explain in greys.
CAUSE_COLORS = {"tick": "#1f77b4", "timer": "#aec7e8", "irq": "#d62728", "ipi": "#ff9896",
                "softirq": "#2ca02c", "nmi": "#8c564b", "fault": "#e377c2", "thread": "#ff7f0e",
                "injected": "#9467bd", "unexplained": "#7f7f7f", "untraced": "#c7c7c7"}
SECOND = 1e9


@dataclass
class Figure:
    key: str  # file name stem, unique in a report
    title: str
    caption: str
    figure: MplFigure

    def png(self) -> bytes:
        out = io.BytesIO()
        with matplotlib.rc_context(STYLE):
            self.figure.savefig(out, format="png", dpi=DPI)
        return out.getvalue()


def new_figure(rows: int, columns: int = 1, row_height: float = 1.9, **kwargs):
    figure = MplFigure(figsize=(WIDTH_IN, 0.6 + row_height * rows), layout="constrained")
    return figure, figure.subplots(rows, columns, squeeze=False, **kwargs)


def styled(function):
    """Run a plot function under STYLE (rc settings apply when artists are made)."""
    def run(*args, **kwargs):
        with matplotlib.rc_context(STYLE):
            return function(*args, **kwargs)
    run.__name__ = function.__name__
    run.__doc__ = function.__doc__
    return run


Points = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]  # (x, y) batches, readable again


def envelope(x: np.ndarray, y: np.ndarray, columns: int = COLUMNS, log: bool = False,
             drop_empty: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Min and max of y in each of `columns` equal bins of x: NaN where a bin is
    empty (a gap in a time series), or left out with `drop_empty` (a curve whose
    points are sparse at one end of a log axis). Up to 2 x columns points are
    returned as they are, in order of x."""
    return batched_envelope(lambda: [(x, y)], columns, log, drop_empty)


def batched_envelope(points: Points, columns: int = COLUMNS, log: bool = False,
                     drop_empty: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """envelope() of the points of every batch together, never all in memory
    (an hour's series is millions of points a CPU): read until there are too
    many to return as they are, then for the range of x, then into the bins."""
    def scaled(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        return np.log10(x) if log else x

    every = gathered(points, 2 * columns)
    if every is None:
        lo, hi = np.inf, -np.inf
        for x, _ in points():
            if len(x):
                some = scaled(x)
                lo, hi = min(lo, float(some.min())), max(hi, float(some.max()))
        if hi <= lo:  # x never changes: the points as they are
            every = gathered(points, np.inf)
    if every is not None:
        x, y = every
        order = np.argsort(x, kind="stable")
        return x[order], y[order], y[order]
    low, high = np.full(columns, np.inf), np.full(columns, -np.inf)
    used = np.zeros(columns, bool)
    for x, y in points():
        index = np.minimum(((scaled(x) - lo) / (hi - lo) * columns).astype(np.int64), columns - 1)
        y = np.asarray(y, np.float64)
        np.minimum.at(low, index, y)
        np.maximum.at(high, index, y)
        used[index] = True
    low[~used] = high[~used] = np.nan
    edges = np.linspace(lo, hi, columns + 1)
    middle = (edges[:-1] + edges[1:]) / 2
    centers = 10 ** middle if log else middle
    if drop_empty:
        return centers[used], low[used], high[used]
    return centers, low, high


def draw_envelope(ax, shape: tuple[np.ndarray, np.ndarray, np.ndarray], color, label=None) -> None:
    """An envelope (`envelope`, `batched_envelope`): its band, or a line where it is one."""
    cx, low, high = shape
    if len(cx) and np.array_equal(low, high, equal_nan=True):
        ax.plot(cx, high, color=color, lw=0.8, label=label)
        return
    ax.fill_between(cx, low, high, color=color, alpha=0.35, lw=0, step="mid")
    ax.plot(cx, high, color=color, lw=0.6, label=label, drawstyle="steps-mid")
    ax.plot(cx, low, color=color, lw=0.6, drawstyle="steps-mid")


def cpu_points(bundle: Bundle, table: str, cpu: int, x: str, y: str, origin: float = 0.0
               ) -> Points:
    """One CPU's (x, y) of a bundle's table, a row group at a time (x: times
    in seconds from `origin` when it is a *_ns time, else as stored)."""
    def points() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for rows in cpu_batches(bundle.table_by_cpu(table, (x, y)), cpu, x):
            yield (_seconds(rows[x], origin) if x.endswith("_ns") else rows[x]), rows[y]
    return points


def gathered(points: Points, limit: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Every point, if there are at most `limit` (else None, having held no more)."""
    xs, ys, count = [], [], 0
    for x, y in points():
        count += len(x)
        if count > limit:
            return None
        xs.append(np.asarray(x, np.float64))
        ys.append(np.asarray(y, np.float64))
    return (np.concatenate(xs), np.concatenate(ys)) if xs else (np.array([]), np.array([]))


def plain(text: str) -> str:
    """Text from a bundle, shown literally (matplotlib reads $...$ as TeX)."""
    return str(text).replace("$", r"\$")


def _node_name(bundle: Bundle, with_fleet: bool) -> str | None:
    """'rank 1 (node7)' for a rank's bundle of a cluster scan (None for other bundles),
    after its fleet's name (label, else directory) when several fleets are drawn."""
    cluster = bundle.manifest.get("cluster")
    if not cluster:
        return None
    name = f"rank {cluster['rank']} ({cluster['node']})"
    if with_fleet:
        fleet = bundle.label or (bundle.path.parents[1].name if bundle.path else "fleet")
        name = f"{fleet} {name}"
    return name


def bundle_names(bundles: list[Bundle]) -> dict[int, str]:
    """Distinct display names (label, else directory name; a fleet's node bundles by
    rank and node) keyed by id(bundle)."""
    names: dict[int, str] = {}
    seen: dict[str, int] = {}
    fleets = {b.path.parents[1] if b.path else None for b in bundles if b.manifest.get("cluster")}
    first = {id(b): _node_name(b, len(fleets) > 1) or b.name for b in bundles}
    shared = {n for n in first.values() if list(first.values()).count(n) > 1}
    for b in bundles:
        name = first[id(b)]
        if name in shared and b.path and b.path.name != name:  # one label, e.g. a run's bundles
            name = f"{name} ({b.path.name})"
        seen[name] = seen.get(name, 0) + 1
        names[id(b)] = name if seen[name] == 1 else f"{name} #{seen[name]}"
    return names


def panels(bundles: list[Bundle], kind: str, table: str, noise_key: str = "noise_pct"
           ) -> tuple[list[tuple[Bundle, dict]], int]:
    """(bundle, per-CPU summary) pairs of the bundles holding `table` to draw, noisiest
    first when there are too many."""
    pairs = [(b, s) for b in bundles if b.has_table(table) for s in b.summaries.get(kind, [])]
    return noisiest_first(pairs, lambda pair: pair[1].get(noise_key))


def noisiest_first(items: list, noise: Callable[[Any], float | None], limit: int = MAX_PANELS
                   ) -> tuple[list, int]:
    """`items` to draw, in their order: all of them, or the `limit` with the
    most `noise` (None counts as none) when there are more; and how many are
    left out."""
    if len(items) <= limit:
        return items, 0
    ranked = sorted(range(len(items)), key=lambda i: -(noise(items[i]) or 0))[:limit]
    return [items[i] for i in sorted(ranked)], len(items) - limit


def noise_by_cpu(bundle: Bundle) -> dict[int, float]:
    """Each CPU's noise in a bundle: the largest noise_pct its probes measured."""
    noise: dict[int, float] = {}
    for kind in NOISE_PROBES:
        for summary in bundle.summaries.get(kind, []):
            cpu = summary["cpu"]
            noise[cpu] = max(noise.get(cpu, 0.0), summary.get("noise_pct") or 0.0)
    return noise


def panel_title(bundle: Bundle, cpu: int, names: dict[int, str], several: bool) -> str:
    return f"{plain(names[id(bundle)])}, CPU {cpu}" if several else f"CPU {cpu}"


def left_out(count: int, shown: int = MAX_PANELS, chosen: str = "noisiest", what: str = "CPUs"
             ) -> str:
    return f" {count} more {what} are not drawn (the {chosen} {shown} are)." if count else ""


def _seconds(ns: np.ndarray, origin: float) -> np.ndarray:
    return (np.asarray(ns, np.float64) - origin) / SECOND


def _probe_origin(bundle: Bundle, probe: str) -> float:
    windows = bundle.table("windows") if bundle.has_table("windows") else None
    if windows is not None and windows.rows:
        mine = windows["start_ns"][windows["probe"] == probe]
        if len(mine):
            return float(mine.min())
    return 0.0


def _duration_axis(ax, axis: str = "y") -> None:
    formatter = FuncFormatter(lambda v, _: format_duration(v) if v > 0 else "0")
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(formatter)


def _several(bundles: list[Bundle]) -> bool:
    return len(bundles) > 1


# -- FTQ / FWQ series ---------------------------------------------------------

def _series(bundles: list[Bundle], kind: str, table: str, column: str, key: str, title: str,
            ylabel: str, caption: str, as_duration: bool) -> list[Figure]:
    pairs, dropped = panels(bundles, kind, table)
    if not pairs:
        return []
    names = bundle_names(bundles)
    figure, axes = new_figure(len(pairs), sharex=True)
    for ax, (bundle, s), color in zip(axes[:, 0], pairs, _cycle(), strict=False):
        points = cpu_points(bundle, table, s["cpu"], "start_ns", column, _probe_origin(bundle, kind))
        draw_envelope(ax, batched_envelope(points), color)
        ax.set_title(panel_title(bundle, s["cpu"], names, _several(bundles)), loc="left")
        ax.set_ylabel(ylabel)
        if as_duration:
            _duration_axis(ax)
    axes[-1, 0].set_xlabel("time since the probe started (s)")
    return [Figure(key, title, caption + left_out(dropped), figure)]


@styled
def ftq_series(bundles: list[Bundle]) -> list[Figure]:
    return _series(bundles, "ftq", "ftq", "work", "ftq-series", "FTQ: work per quantum",
                   "work units", "Work done in each fixed time quantum. Dips are time taken by "
                   "the system; a quiet CPU draws a flat line. Band: min to max per pixel column.",
                   as_duration=False)


@styled
def fwq_series(bundles: list[Bundle]) -> list[Figure]:
    return _series(bundles, "fwq", "fwq", "duration_ns", "fwq-series",
                   "FWQ: time per fixed amount of work", "time",
                   "Time each fixed amount of work took. Spikes are time taken by the system. "
                   "Band: min to max per pixel column.", as_duration=True)


# -- detours ----------------------------------------------------------------------

@styled
def detour_timeline(bundles: list[Bundle]) -> list[Figure]:
    pairs, dropped = panels(bundles, "detour", "detours")
    if not pairs:
        return []
    names = bundle_names(bundles)
    figure, axes = new_figure(len(pairs), sharex=True)
    for ax, (bundle, s), color in zip(axes[:, 0], pairs, _cycle(), strict=False):
        points = cpu_points(bundle, "detours", s["cpu"], "start_ns", "duration_ns",
                            _probe_origin(bundle, "detour"))
        every = gathered(points, SCATTER_LIMIT)
        if every is not None:
            ax.scatter(*every, s=3, color=color, lw=0)
        else:
            cx, _, high = batched_envelope(points)
            ax.vlines(cx, s["threshold_ns"], high, color=color, lw=0.7)
        ax.set_yscale("log")
        _duration_axis(ax)
        ax.set_ylabel("detour length")
        ax.set_title(panel_title(bundle, s["cpu"], names, _several(bundles)), loc="left")
    axes[-1, 0].set_xlabel("time since the probe started (s)")
    return [Figure("detours-time", "Detours over time",
                   "Every detour (the CPU taken away for at least the threshold) at the time it "
                   f"began; with more than {SCATTER_LIMIT:,} per CPU, the longest detour of each "
                   "pixel column is drawn." + left_out(dropped), figure)]


HEATMAP_COLUMNS = 600  # time bins of the CPU x time map of lost time
HEATMAP_FLOOR_PCT = 0.01  # the colour scale's low end (log): less lost time looks the same


@dataclass
class LostTimeGrid:
    """Lost time per CPU and time bin: `lost_pct[row, bin]` is the share of
    the measured time of that bin that detours took on CPU `cpus[row]`
    (NaN where nothing was measured: between windows); bins of `bin_ns`
    from `begin_ns`."""

    cpus: list[int]
    begin_ns: int
    bin_ns: int
    lost_pct: np.ndarray


def lost_time_grid(detours: Table | SpooledTable, windows: Table, cpus: list[int],
                   columns: int = HEATMAP_COLUMNS) -> LostTimeGrid | None:
    """The detour probe's lost time as a CPU x time grid (exact overlaps of
    the detours with each bin, as the spectrum's series), the detours read a
    CPU and a batch at a time, the CPUs side by side in worker processes."""
    from ..analysis.spectrum import lost_time_series

    windows = windows.filter(windows["probe"] == "detour")
    if not windows.rows or not cpus:
        return None
    begin, end = int(windows["start_ns"].min()), int(windows["end_ns"].max())
    bin_ns = max(1, -(-(end - begin) // columns))
    end = begin + bin_ns * columns

    def row_of(cpu: int) -> np.ndarray:
        mine = windows.where(cpu=cpu)
        measured = lost_time_series(mine["start_ns"], mine["end_ns"] - mine["start_ns"],
                                    begin, end, bin_ns)
        share = np.zeros(columns)  # exact overlaps add up batch by batch
        for batch in cpu_batches(detours, cpu, "start_ns"):
            share += lost_time_series(batch["start_ns"], batch["duration_ns"], begin, end, bin_ns)
        lost = np.full(columns, np.nan)
        inside = measured > 0
        lost[inside] = 100.0 * share[inside] / measured[inside]
        return lost

    rows = run_parts(row_of, list(cpus), worker_count(len(cpus)))
    return LostTimeGrid(list(cpus), begin, bin_ns, np.vstack(rows))


@styled
def detour_heatmap(bundles: list[Bundle]) -> list[Figure]:
    """Every CPU's lost time over time, one row per CPU: drawn for bundles
    with more CPUs than the per-CPU panels show (those show the noisiest)."""
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm

    grids = []
    for bundle in bundles:
        cpus = sorted({s["cpu"] for s in bundle.summaries.get("detour", [])})
        if len(cpus) > MAX_PANELS and bundle.has_table("detours") and bundle.has_table("windows"):
            grid = lost_time_grid(bundle.table_by_cpu("detours", DETOUR_COLUMNS),
                                  bundle.table("windows"), cpus)
            if grid is not None:
                grids.append((bundle, grid))
    if not grids:
        return []
    names = bundle_names(bundles)
    heights = [1.0 + 0.02 * len(grid.cpus) for _, grid in grids]
    figure = MplFigure(figsize=(WIDTH_IN, 0.8 + sum(heights)), layout="constrained")
    axes = figure.subplots(len(grids), 1, squeeze=False, height_ratios=heights)[:, 0]
    cmap = colormaps["magma_r"].with_extremes(bad="#eeeeee")
    norm = LogNorm(vmin=HEATMAP_FLOOR_PCT, vmax=100)
    for ax, (bundle, grid) in zip(axes, grids, strict=True):
        seconds = grid.bin_ns * grid.lost_pct.shape[1] / SECOND
        origin = (grid.begin_ns - _probe_origin(bundle, "detour")) / SECOND
        image = ax.imshow(np.clip(grid.lost_pct, HEATMAP_FLOOR_PCT, None), aspect="auto",
                          interpolation="nearest", cmap=cmap, norm=norm,
                          extent=(origin, origin + seconds, len(grid.cpus) - 0.5, -0.5))
        ax.grid(False)
        rows = np.linspace(0, len(grid.cpus) - 1, min(len(grid.cpus), 16)).round().astype(int)
        ax.set_yticks(rows, [str(grid.cpus[r]) for r in rows])
        ax.set_ylabel("CPU")
        if _several(bundles):
            ax.set_title(plain(names[id(bundle)]), loc="left")
        figure.colorbar(image, ax=ax, label="time lost (%)", pad=0.01)
    axes[-1].set_xlabel("time since the probe started (s)")
    return [Figure("detours-heatmap", "Lost time on every CPU",
                   "The share of each CPU's measured time that detours took, one row per CPU, "
                   f"in {HEATMAP_COLUMNS} time bins (log colour scale; grey: not measured, "
                   f"between windows). The panels below show the noisiest {MAX_PANELS} CPUs.",
                   figure)]


def _log_bins(low: float, high: float, per_decade: int = 20) -> np.ndarray:
    low, high = max(low, 1.0), max(high, low * 1.01)
    return np.logspace(np.log10(low), np.log10(high), max(2, int(np.log10(high / low) * per_decade)))


def _bucket_stairs(ax, lower, upper, count, **style) -> None:
    """Histogram buckets [lower, upper) as stored (only the non-empty ones): the
    gaps between them are drawn as empty, not as wider buckets."""
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    order = np.argsort(lower)
    order = order[upper[order] > lower[order]]  # an empty range has nothing to draw
    lower, upper = lower[order], upper[order]
    edges = np.unique(np.r_[lower, upper])
    values = np.zeros(len(edges) - 1)
    values[np.searchsorted(edges, lower)] = np.asarray(count)[order]
    ax.stairs(values, edges, **style)


def _single_axes(bundles: list[Bundle]):
    figure, axes = new_figure(1, row_height=3.2)
    return figure, axes[0, 0], bundle_names(bundles)


def _finish_log_log(ax, drawn: int, xlabel: str, ylabel: str, durations: bool) -> bool:
    """Log scales, labels and legend of an overlay; False when nothing was drawn."""
    if not drawn:
        return False
    ax.set_xscale("log")
    ax.set_yscale("log")
    if durations:
        _duration_axis(ax, "x")
    else:
        ax.xaxis.set_major_formatter(EngFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())  # less than a decade: no 2x10^4 labels
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(ncols=min(drawn, 4))
    return True


@styled
def detour_histogram(bundles: list[Bundle]) -> list[Figure]:
    figure, ax, names = _single_axes(bundles)
    drawn = 0
    pairs, dropped = panels(bundles, "detour", "detours")
    for (bundle, s), color in zip(pairs, _cycle(), strict=False):
        by_cpu = bundle.table_by_cpu("detours", DETOUR_COLUMNS)

        def lengths(by_cpu=by_cpu, cpu=s["cpu"]) -> Iterator[np.ndarray]:
            return (rows["duration_ns"] for rows in cpu_batches(by_cpu, cpu, "start_ns")
                    if rows.rows)

        shortest, longest = np.inf, -np.inf
        for some in lengths():
            shortest, longest = min(shortest, some.min()), max(longest, some.max())
        if shortest > longest:  # none
            continue
        edges = _log_bins(shortest, longest * 1.001)
        counts = sum(np.histogram(some, edges)[0] for some in lengths())
        ax.stairs(counts, edges, color=color, lw=1.1,
                  label=panel_title(bundle, s["cpu"], names, _several(bundles)))
        drawn += 1
    if not _finish_log_log(ax, drawn, "detour length", "detours per bin", durations=True):
        return []
    return [Figure("detours-histogram", "Detour lengths",
                   "Histogram of stored detour lengths, 20 logarithmic bins per decade."
                   + left_out(dropped), figure)]


@styled
def hourglass_histogram(bundles: list[Bundle]) -> list[Figure]:
    figure, ax, names = _single_axes(bundles)
    drawn = 0
    pairs, dropped = panels(bundles, "detour", "gap_histogram")
    for (bundle, s), color in zip(pairs, _cycle(), strict=False):
        h = bundle.table("gap_histogram").where(cpu=s["cpu"])
        cut = s["hourglass_ns"]
        keep = h["upper_ns"] > cut
        if not keep.any():
            continue
        lower = np.maximum(h["lower_ns"][keep].astype(np.float64), cut)
        upper = np.minimum(h["upper_ns"][keep].astype(np.float64), lower * 2 ** 20)
        _bucket_stairs(ax, lower, upper, h["count"][keep], color=color, lw=1.1,
                       label=panel_title(bundle, s["cpu"], names, _several(bundles)))
        drawn += 1
    if not _finish_log_log(ax, drawn, "gap between two clock reads", "gaps per bucket",
                           durations=True):
        return []
    cuts = " / ".join(sorted({format_duration(s["hourglass_ns"]) for b in bundles
                              for s in b.summaries.get("detour", []) if "hourglass_ns" in s}))
    return [Figure("hourglass", f"Hourglass: gaps above {cuts}",
                   f"Every gap between two reads of the clock longer than {cuts}, counted in "
                   "the sampler's log-scale buckets (also those not stored as detours)."
                   + left_out(dropped), figure)]


# -- spectrum -------------------------------------------------------------------------

@styled
def spectrum_figure(bundles: list[Bundle]) -> list[Figure]:
    rows = [(b, cpu) for b in bundles
            for cpu in dict.fromkeys(s["cpu"] for s in b.summaries.get("spectrum", []))]
    if not rows:
        return []
    noise = {id(b): noise_by_cpu(b) for b in bundles}
    rows, dropped = noisiest_first(rows, lambda row: noise[id(row[0])].get(row[1]))
    # a column per series some bundle has (a detour-only scan's panels take the width)
    series = [name for name in ("detour", "ftq")
              if any(s["series"] == name for b in bundles for s in b.summaries.get("spectrum", []))]
    if not series:
        return []
    names = bundle_names(bundles)
    figure, axes = new_figure(len(rows), len(series), row_height=2.2)
    for (bundle, cpu), ax_row in zip(rows, axes, strict=False):
        table = bundle.table("spectrum").where(cpu=cpu)
        for ax, name in zip(ax_row, series, strict=False):
            summary = [s for s in bundle.summaries["spectrum"]
                       if s["cpu"] == cpu and s["series"] == name]
            mine = table.filter(table["series"] == name)
            if not summary or mine.rows == 0:
                ax.set_axis_off()
                continue
            _draw_spectrum(ax, mine["frequency_hz"], mine["power"], summary[0], log=name == "detour")
            ax.set_title(f"{panel_title(bundle, cpu, names, _several(bundles))}: {name}",
                         loc="left")
    for ax in axes[-1]:
        ax.set_xlabel("frequency (Hz)")
    described = {"detour": "the detour trace in 50 us bins",
                 "ftq": "the FTQ series (it folds frequencies above half the quantum rate)"}
    shown = [described[name] + (f" ({side})" if len(series) > 1 else "")
             for name, side in zip(series, ("left", "right"), strict=False)]
    return [Figure("spectrum", "Spectrum of the lost CPU time",
                   f"Power spectrum of the fraction of the CPU lost: {' and '.join(shown)}. "
                   "Marked: the strongest periodic sources and their names."
                   + left_out(dropped), figure)]


def _draw_spectrum(ax, frequency, power, summary: dict, log: bool) -> None:
    keep = frequency > 0
    f, p = frequency[keep], np.maximum(power[keep], np.finfo(float).tiny)
    cx, _, high = envelope(f, p, log=log, drop_empty=True)
    ax.plot(cx, high, color="#444444", lw=0.6)
    ax.set_yscale("log")
    if log:
        ax.set_xscale("log")
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.set_ylabel("power (1/Hz)")
    for source, color in zip(summary["sources"][:4], _cycle(), strict=False):
        ax.axvline(source["frequency_hz"], color=color, lw=0.9, ls="--")
        label = f"{source['frequency_hz']:.1f} Hz {plain(source['name'] or '')}".strip()
        ax.plot([], [], color=color, ls="--", label=f"{label} ({source['share_pct']:.0f}%)")
    if summary["sources"]:
        ax.legend(loc="upper left", frameon=True, framealpha=0.85, edgecolor="none")


# -- comparisons across bundles -----------------------------------------------------------

NOISE_PROBES = ("detour", "ftq", "fwq")
MAX_BARS = 40  # groups per bar chart; a larger fleet shows its noisiest ranks


def _noise_bars(groups: list[tuple[str, dict[str, list[dict]]]]):
    """Bars of the mean noise % per group (configuration or rank) and probe, error
    bars from the quietest to the noisiest CPU; None when nothing has noise figures."""
    probes = [k for k in NOISE_PROBES if any(g.get(k) for _, g in groups)]
    if not probes:
        return None
    figure, axes = new_figure(1, row_height=3.0)
    ax = axes[0, 0]
    width = 0.8 / len(probes)
    x = np.arange(len(groups))
    for i, (probe, color) in enumerate(zip(probes, _cycle(), strict=False)):
        values = [[s["noise_pct"] for s in g.get(probe, []) if s.get("noise_pct") is not None]
                  for _, g in groups]
        mean = np.array([np.mean(v) if v else np.nan for v in values])
        low = np.array([mean[j] - min(v) if v else 0 for j, v in enumerate(values)])
        high = np.array([max(v) - mean[j] if v else 0 for j, v in enumerate(values)])
        ax.bar(x + (i - (len(probes) - 1) / 2) * width, mean, width, yerr=[low, high], capsize=3,
               color=color, label=probe)
    ax.set_xticks(x, [plain(name) for name, _ in groups],
                  rotation=30 if len(groups) > 8 else 0, ha="right" if len(groups) > 8 else "center")
    ax.set_ylabel("noise (% of CPU time)")
    ax.legend()
    return figure


@styled
def noise_bars(bundles: list[Bundle]) -> list[Figure]:
    names = bundle_names(bundles)
    figure = _noise_bars([(names[id(b)], b.summaries) for b in bundles])
    if figure is None:
        return []
    return [Figure("compare-noise", "Noise per configuration",
                   "Mean noise over the measured CPUs of each bundle, per probe; the error bars "
                   "span the quietest to the noisiest CPU.", figure)]


@styled
def rank_noise_bars(fleets: list[Bundle]) -> list[Figure]:
    """A fleet's ranks side by side, from the per-CPU summaries the fleet gathered."""
    from ..analysis.fleet import noisiest, ranking_figure

    names = bundle_names(fleets)
    groups, left = [], 0
    for fleet in fleets:
        ranks = [r for r in fleet.summaries.get("ranks", []) if r["status"] == "ok"]
        key = ranking_figure(ranks)
        shown = noisiest(ranks, key, MAX_BARS // len(fleets)) if key else []
        left += len(ranks) - len(shown)
        by_rank: dict[tuple[str, int], list[dict]] = {}
        for probe in NOISE_PROBES:
            for s in fleet.summaries.get(probe, []):
                by_rank.setdefault((probe, s["rank"]), []).append(s)
        for r in sorted(shown, key=lambda r: r["rank"]):
            prefix = f"{names[id(fleet)]} " if len(fleets) > 1 else ""
            groups.append((f"{prefix}rank {r['rank']} ({r['node']})",
                           {probe: by_rank.get((probe, r["rank"]), []) for probe in NOISE_PROBES}))
    figure = _noise_bars(groups)
    if figure is None:
        return []
    more = f" {left} quieter ranks are not drawn." if left else ""
    return [Figure("fleet-noise", "Noise per rank",
                   "Mean noise over each rank's measured CPUs, per probe, all ranks measured at "
                   "the same time; the error bars span the rank's quietest to its noisiest CPU."
                   + more, figure)]


def _length_counts(detours: Table | SpooledTable) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct detour length of every CPU, and how many detours have it:
    counted a batch at a time and merged (the lengths repeat, the rows
    grow with the run)."""
    lengths, counts = np.array([], np.int64), np.array([], np.int64)
    for cpu in table_cpus(detours):
        for batch in cpu_batches(detours, cpu, "start_ns"):
            found, many = np.unique(batch["duration_ns"], return_counts=True)
            lengths, where = np.unique(np.concatenate([lengths, found]), return_inverse=True)
            counts = np.bincount(where, np.concatenate([counts, many]),
                                 minlength=len(lengths)).astype(np.int64)
    return lengths, counts


@styled
def detour_rate_curves(bundles: list[Bundle], key: str = "compare-detours",
                       title: str = "How often the CPU is taken away for at least a given time",
                       more: str = "") -> list[Figure]:
    figure, ax, names = _single_axes(bundles)
    drawn = 0
    for bundle, color in zip(bundles, _cycle(), strict=False):
        summaries = bundle.summaries.get("detour", [])
        if not summaries or not bundle.has_table("detours"):
            continue
        seconds = sum(s["measured_ns"] for s in summaries) / SECOND
        # each distinct length once, with the number of detours at least as long:
        # the curve's steps (millions of detours repeat far fewer lengths)
        lengths, counts = _length_counts(bundle.table_by_cpu("detours", DETOUR_COLUMNS))
        if len(lengths) == 0 or seconds <= 0:
            continue
        rate = np.cumsum(counts[::-1])[::-1] / seconds
        x, _, high = envelope(lengths.astype(np.float64), rate, log=True, drop_empty=True)
        ax.plot(x, high, color=color, lw=1.2, label=plain(names[id(bundle)]), drawstyle="steps-post")
        drawn += 1
    if not _finish_log_log(ax, drawn, "detour length at least", "detours per CPU-second",
                           durations=True):
        return []
    return [Figure(key, title, "Rate of detours at least as long as x, pooled over each bundle's "
                   "CPUs: lower and further left is quieter." + more, figure)]


# -- attribution, timer latency, workload runs, predictions -------------------------------

CAUSE_BARS = 3 * MAX_PANELS  # CPUs in the cause breakdown (a bar each)


@styled
def cause_breakdown(bundles: list[Bundle]) -> list[Figure]:
    rows = [(b, s) for b in bundles for s in b.summaries.get("attribution", []) if s["causes"]]
    if not rows:
        return []
    noise = {id(b): noise_by_cpu(b) for b in bundles}
    rows, dropped = noisiest_first(rows, lambda row: noise[id(row[0])].get(row[1]["cpu"]),
                                   CAUSE_BARS)
    names = bundle_names(bundles)
    figure, axes = new_figure(1, row_height=0.6 + 0.35 * len(rows))
    ax = axes[0, 0]
    labels = [panel_title(b, s["cpu"], names, _several(bundles)) for b, s in rows]
    left = np.zeros(len(rows))
    for cause, color in CAUSE_COLORS.items():
        share = np.array([sum(c["share_pct"] for c in s["causes"] if c["cause"] == cause)
                          for _, s in rows])
        if share.any():
            ax.barh(labels, share, left=left, color=color, label=cause)
            left += share
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the time lost to detours (%)")
    ax.legend(ncols=5, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return [Figure("causes", "What took the CPU away",
                   "Time lost to detours split by cause, from the kernel trace events recorded "
                   "during the scan (noisescope explain lists the details)."
                   + left_out(dropped, CAUSE_BARS),
                   figure)]


def _latency_histogram(bundles: list[Bundle], kind: str, table: str, key: str, title: str,
                       caption: str) -> list[Figure]:
    figure, ax, names = _single_axes(bundles)
    drawn = 0
    for (bundle, s), color in zip(((b, s) for b in bundles for s in b.summaries.get(kind, [])
                                   if b.has_table(table)), _cycle(), strict=False):
        h = bundle.table(table).where(cpu=-1 if s["cpu"] is None else s["cpu"])
        if h.rows == 0:
            continue
        _bucket_stairs(ax, h["lower_ns"], h["upper_ns"], h["count"], color=color, lw=1.1,
                       label=panel_title(bundle, s["cpu"] if s["cpu"] is not None else 0, names,
                                         _several(bundles)))
        drawn += 1
    if not _finish_log_log(ax, drawn, "latency", "samples per bucket", durations=True):
        return []
    return [Figure(key, title, caption, figure)]


@styled
def timerlat_histogram(bundles: list[Bundle]) -> list[Figure]:
    return _latency_histogram(bundles, "timerlat", "timerlat_histogram", "timerlat", "Timer latency",
                              "Wakeup minus deadline of a thread sleeping to absolute deadlines "
                              "(cyclictest's measurement), per CPU.")


@styled
def oslat_histogram(bundles: list[Bundle]) -> list[Figure]:
    return _latency_histogram(bundles, "oslat", "oslat_histogram", "oslat", "oslat gaps",
                              "Gaps between clock reads counted by oslat, per CPU.")


def _draw_cdf(ax, values, **style) -> None:
    """The empirical distribution of `values` (not empty) as a step curve from 0 to 1."""
    x = np.sort(np.asarray(values, np.float64))
    ax.step(np.r_[x[0], x], np.arange(len(x) + 1) / len(x), where="post", **style)


def _ok_runs(bundle: Bundle):
    runs = bundle.table("runs")
    keep = (runs["status"] == "ok") & ~runs["warmup"].astype(bool)
    return runs.filter(keep)


def _run_groups(bundles: list[Bundle]) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """workload -> configuration (bundle name and configuration) -> column -> values."""
    names = bundle_names(bundles)
    groups: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for bundle in bundles:
        if not bundle.has_table("runs"):
            continue
        runs = _ok_runs(bundle)
        for workload in dict.fromkeys(runs["workload"]):
            for configuration in dict.fromkeys(runs["configuration"]):
                mine = runs.filter((runs["workload"] == workload)
                                   & (runs["configuration"] == configuration))
                if mine.rows:
                    label = " ".join(x for x in (names[id(bundle)] if _several(bundles) else "",
                                                 configuration) if x) or names[id(bundle)]
                    groups.setdefault(str(workload), {})[label] = {
                        c: mine[c] for c in ("wall_ns", "user_ns", "sys_ns")}
    return groups


@styled
def run_time_cdfs(bundles: list[Bundle]) -> list[Figure]:
    groups = _run_groups(bundles)
    if not groups:
        return []
    workloads = list(groups)[:MAX_PANELS]
    figure, axes = new_figure(len(workloads), 3, row_height=2.4)
    for row, workload in zip(axes, workloads, strict=False):
        for ax, (column, what) in zip(row, (("wall_ns", "wall"), ("user_ns", "user"),
                                            ("sys_ns", "system")), strict=True):
            for (label, values), color in zip(groups[workload].items(), _cycle(), strict=False):
                _draw_cdf(ax, values[column], color=color, lw=1.2, label=plain(label))
            _duration_axis(ax, "x")
            ax.set_title(f"{plain(workload)}: {what} time", loc="left")
            ax.set_ylim(0, 1.02)
        row[0].set_ylabel("fraction of runs")
        row[0].legend()
    return [Figure("runs-cdf", "Run times per configuration",
                   "Cumulative distribution of each run's wall, user and system time (wait4 of "
                   "the workload), warm-up and failed runs left out. A curve further left is "
                   "faster; a long tail to the right is noise.", figure)]


@styled
def workload_bars(bundles: list[Bundle]) -> list[Figure]:
    groups = _run_groups(bundles)
    if not groups:
        return []
    labels = list(dict.fromkeys(label for g in groups.values() for label in g))
    figure, ax, _ = _single_axes(bundles)
    width = 0.8 / len(labels)
    x = np.arange(len(groups))
    for i, (label, color) in enumerate(zip(labels, _cycle(), strict=False)):
        medians, low, high = [], [], []
        for workload in groups:
            wall = groups[workload].get(label, {}).get("wall_ns")
            if wall is None or len(wall) == 0:
                medians.append(np.nan), low.append(0), high.append(0)
                continue
            q25, q50, q75 = np.percentile(wall.astype(np.float64), [25, 50, 75])
            medians.append(q50), low.append(q50 - q25), high.append(q75 - q50)
        ax.bar(x + (i - (len(labels) - 1) / 2) * width, medians, width, yerr=[low, high],
               capsize=3, color=color, label=plain(label))
    ax.set_xticks(x, [plain(w) for w in groups])
    _duration_axis(ax)
    ax.set_ylabel("wall time per run (median)")
    ax.legend()
    return [Figure("workloads", "Wall time per workload and configuration",
                   "Median wall time of the runs; the error bars span the middle half of the "
                   "runs (25th to 75th percentile).", figure)]


@styled
def slowdown_curves(bundles: list[Bundle]) -> list[Figure]:
    names = bundle_names(bundles)
    figure, ax, _ = _single_axes(bundles)
    drawn = 0
    for bundle, color in zip(bundles, _cycle(), strict=False):
        points = sorted(bundle.summaries.get("prediction", []), key=lambda p: p["procs"])
        if not points:
            continue
        procs = np.array([p["procs"] for p in points], np.float64)
        mean = 100 * np.array([p["slowdown_mean"] for p in points])
        ax.fill_between(procs, 100 * np.array([p["slowdown_min"] for p in points]),
                        100 * np.array([p["slowdown_max"] for p in points]), color=color,
                        alpha=0.25, lw=0)
        ax.plot(procs, mean, "o-", color=color, lw=1.3, ms=3, label=plain(names[id(bundle)]))
        estimate = [p.get("analytic_slowdown") for p in points]
        if all(e is not None for e in estimate):
            ax.plot(procs, 100 * np.array(estimate), "--", color=color, lw=1,
                    label=f"{plain(names[id(bundle)])}: order-statistics estimate")
        drawn += 1
    if not drawn:
        return []
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_count(int(round(v)))))
    ax.set_xlabel("processes (P)")
    ax.set_ylabel("slowdown (%)")
    ax.legend()
    return [Figure("slowdown", "Predicted slowdown vs process count",
                   "Simulated slowdown of the modelled application as the process count grows "
                   "(band: spread over seeds), and the order-statistics estimate (dashed).",
                   figure)]


@styled
def fleet_noise_distribution(fleets: list[Bundle]) -> list[Figure]:
    """The ranks' noise over a fleet too large for a bar each: its cumulative
    distribution, with the ranks that stand out on that figure marked and named."""
    from ..analysis.fleet import NODE_FIGURES, ranking_figure

    names = bundle_names(fleets)
    large = [f for f in fleets if sum(r["status"] == "ok" for r in f.summaries.get("ranks", []))
             > MAX_BARS]
    if not large:
        return []
    figure, axes = new_figure(1, row_height=3.0)
    ax = axes[0, 0]
    title = "noise"
    for fleet, color in zip(large, _cycle(), strict=False):
        ranks = [r for r in fleet.summaries["ranks"] if r["status"] == "ok"]
        key = ranking_figure(ranks)
        if key is None:
            continue
        title = next(t for probe, name, _, _, t in NODE_FIGURES if f"{probe}_{name}" == key)
        values = np.sort(np.array([r[key] for r in ranks if r.get(key) is not None], float))
        share = np.arange(1, len(values) + 1) / len(values)
        prefix = f"{names[id(fleet)]}: " if len(large) > 1 else ""
        ax.step(values, share, where="post", color=color,
                label=plain(f"{prefix}{len(values):,} ranks"))
        standing_out = {d["rank"] for d in fleet.summaries.get("differences", [])
                        if d["kind"] == "noise" and d["what"] == key}
        marked = sorted((r[key], r["rank"], r["node"]) for r in ranks if r["rank"] in standing_out)
        if marked:
            x = np.array([m[0] for m in marked])
            ax.scatter(x, np.searchsorted(values, x, side="right") / len(values), color=color,
                       marker="o", zorder=3)
            for value, rank, node in marked[-MAX_PANELS:]:
                ax.annotate(plain(f"rank {rank} ({node})"), (value, 1.0), rotation=90,
                            fontsize=7, va="top", ha="right")
    if not ax.lines:
        return []
    if values.min() > 0 and values.max() / values.min() > 20:
        ax.set_xscale("log")
    ax.set_xlabel(title)
    ax.set_ylabel("share of ranks at or below")
    ax.legend(loc="lower right")
    return [Figure("fleet-distribution", f"Distribution of {title} over the ranks",
                   f"Each rank's {title} (its CPUs combined), as a cumulative distribution over "
                   "the ranks; the dots are the ranks that stand out (at least twice the other "
                   "nodes' median, above its floor), named up to the noisiest "
                   f"{MAX_PANELS}.", figure)]


@styled
def fleet_detour_curves(fleets: list[Bundle]) -> list[Figure]:
    """The detour-length distributions of a fleet's ranks on one figure (their own bundles)."""
    from ..analysis.fleet import FleetBundle

    fleets = [f for f in fleets if isinstance(f, FleetBundle)]
    count = sum(f.node_count for f in fleets)
    nodes = [n for f in fleets for n in f.noisiest_nodes(MAX_PANELS // len(fleets) or 1)]
    if len(nodes) < 2:
        return []
    more = f" {count - len(nodes)} quieter ranks are not drawn." if count > len(nodes) else ""
    return detour_rate_curves(nodes, "fleet-detours", "How often each rank's CPUs are taken away",
                              more)


@styled
def bsp_slowdowns(bundles: list[Bundle]) -> list[Figure]:
    names = bundle_names(bundles)
    results = [(b, b.summaries["bsp"][0]) for b in bundles if b.summaries.get("bsp")]
    if not results:
        return []
    bars = (("work alone (mean over ranks)", "local_slowdown_mean", None, "local_slowdown_max"),
            ("work + collective, measured", "measured_slowdown", None, None),
            ("predicted", "predicted_slowdown_mean", "predicted_slowdown_min",
             "predicted_slowdown_max"))
    figure, axes = new_figure(1, row_height=0.9 + 0.8 * len(results))
    ax = axes[0, 0]
    height = 0.8 / len(bars)
    y = np.arange(len(results))
    for i, ((what, key, low_key, high_key), color) in enumerate(zip(bars, _cycle(), strict=False)):
        value = np.array([100 * r[key] for _, r in results])
        low = np.array([value[j] - 100 * r[low_key] if low_key else 0
                        for j, (_, r) in enumerate(results)])
        high = np.array([100 * r[high_key] - value[j] if high_key else 0
                         for j, (_, r) in enumerate(results)])
        ax.barh(y + (i - (len(bars) - 1) / 2) * height, value, height, xerr=[low, high],
                capsize=3, color=color, label=what)
    ax.set_yticks(y, [plain(f"{names[id(b)]} (P={r['ranks']})") for b, r in results])
    ax.invert_yaxis()
    ax.set_xlabel("slowdown per iteration (%)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3)
    return [Figure("bsp-slowdown", "Measured against predicted slowdown",
                   "Slowdown of the synchronized loop over its noise-free iteration, measured and "
                   "predicted from the detours sampled on the same ranks (error bar: the spread "
                   "over seeds), beside the work alone (error bar to the noisiest rank).", figure)]


@styled
def bsp_iterations(bundles: list[Bundle]) -> list[Figure]:
    drawn = [b for b in bundles if b.has_table("iterations") and b.summaries.get("bsp")]
    if not drawn:
        return []
    names = bundle_names(drawn)
    figure, axes = new_figure(len(drawn), row_height=2.8)
    for ax, bundle in zip(axes[:, 0], drawn, strict=False):
        table = bundle.table("iterations")
        ranks = sorted(bundle.summaries["ranks"], key=lambda r: -r["local_slowdown"])[:MAX_PANELS]
        for r, color in zip(sorted(ranks, key=lambda r: r["rank"]), _cycle(), strict=False):
            for part, style in (("alone", "--"), ("bsp", "-")):
                mine = table.filter((table["rank"] == r["rank"]) & (table["part"] == part))
                if mine.rows:
                    _draw_cdf(ax, mine["iteration_ns"], color=color, ls=style, lw=1.1,
                              label=f"rank {r['rank']} {'alone' if part == 'alone' else 'synchronized'}")
        ax.axvline(bundle.summaries["bsp"][0]["noise_free_ns"], color="#444444", lw=0.8, ls=":")
        ax.set_xscale("log")
        _duration_axis(ax, "x")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("fraction of iterations")
        ax.set_title(plain(names[id(bundle)]) if len(drawn) > 1 else "", loc="left")
        ax.legend(ncols=2)
    axes[-1, 0].set_xlabel("iteration time")
    return [Figure("bsp-iterations", "Iteration times per rank",
                   "Cumulative distribution of each rank's iteration times: the work alone "
                   "(dashed) and the work followed by the collective (solid); dotted: the "
                   "noise-free iteration. The synchronized curves move right together: every "
                   "rank waits for the slowest.", figure)]


# -- tune --measure: before and after each change ---------------------------------------

def _trial_panels(bundles: list[Bundle], table: str) -> list[tuple[Bundle, str, int]]:
    """(bundle, trial, CPU) of every measured trial, in bundles with the table `table`."""
    found = [(b, t["trial"], cpu) for b in bundles if b.has_table(table)
             for t in b.summaries.get("trials", []) if t["comparison"]
             for cpu in dict.fromkeys(r["cpu"] for r in t["comparison"])]
    return found


def _trials_left_out(found: list, shown: list) -> str:
    return left_out(len(found) - len(shown), chosen="first", what="trial CPUs")


def _phase_rows(bundle: Bundle, table: str, trial: str, cpu: int):
    rows = bundle.table(table)
    return {phase: rows.filter((rows["trial"] == trial) & (rows["cpu"] == cpu)
                               & (rows["phase"] == phase)) for phase in ("baseline", "changed")}


def _measured_s(bundle: Bundle, trial: str, cpu: int, phase: str) -> float:
    return sum(r["measured_ns"] for r in bundle.summaries.get("rounds", [])
               if r["trial"] == trial and r["cpu"] == cpu and r["phase"] == phase) / SECOND


@styled
def tune_lost_time(bundles: list[Bundle]) -> list[Figure]:
    found = _trial_panels(bundles, "round_causes")
    if not found:
        return []
    shown, several = found[:MAX_PANELS], _several(bundles)
    names = bundle_names(bundles)
    figure, axes = new_figure(len(shown), row_height=1.1)
    for ax, (bundle, trial, cpu) in zip(axes[:, 0], shown, strict=True):
        phases = _phase_rows(bundle, "round_causes", trial, cpu)
        left = np.zeros(2)
        for cause, color in CAUSE_COLORS.items():
            per_s = np.array([phases[p]["lost_ns"][phases[p]["cause"] == cause].sum() / 1e6
                              / max(_measured_s(bundle, trial, cpu, p), 1e-9)
                              for p in ("baseline", "changed")])
            if per_s.any():
                ax.barh(["before", "after"], per_s, left=left, color=color, label=cause)
                left += per_s
        ax.invert_yaxis()
        ax.set_title(plain((f"{names[id(bundle)]}: " if several else "") + f"{trial}, CPU {cpu}"),
                     loc="left")
    axes[-1, 0].set_xlabel("time lost to detours (ms per second), by cause")
    handles = {h.get_label(): h for ax in axes[:, 0] for h in ax.get_legend_handles_labels()[0]}
    figure.legend(list(handles.values()), list(handles), ncols=6, loc="outside upper center")
    return [Figure("tune-causes", "Before and after each change: lost time per cause",
                   "Time lost to detours on the CPU per second measured, by cause, in the "
                   "baseline rounds (before) and the changed rounds (after) of each trial of "
                   "tune --measure." + _trials_left_out(found, shown), figure)]


@styled
def tune_detour_cdfs(bundles: list[Bundle]) -> list[Figure]:
    found = _trial_panels(bundles, "round_histogram")
    if not found:
        return []
    shown, several = found[:MAX_PANELS], _several(bundles)
    names = bundle_names(bundles)
    figure, axes = new_figure(len(shown), row_height=1.9)
    for ax, (bundle, trial, cpu) in zip(axes[:, 0], shown, strict=True):
        for (phase, rows), color in zip(_phase_rows(bundle, "round_histogram", trial,
                                                    cpu).items(), COLORS, strict=False):
            if not rows.rows:
                continue
            uppers, inverse = np.unique(rows["upper_ns"], return_inverse=True)
            counts = np.bincount(inverse, weights=rows["count"])
            ax.step(np.r_[uppers[0], uppers], np.r_[0, np.cumsum(counts) / counts.sum()],
                    where="post", color=color, label="before" if phase == "baseline" else "after")
        ax.set_xscale("log")
        _duration_axis(ax, "x")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, 1.02)
        ax.set_title(plain((f"{names[id(bundle)]}: " if several else "") + f"{trial}, CPU {cpu}"),
                     loc="left")
        ax.legend(loc="lower right")
    axes[-1, 0].set_xlabel("detour length at most")
    return [Figure("tune-detours", "Before and after each change: detour lengths",
                   "Share of the detours up to a given length (from histograms of 10 bins a "
                   "decade), in the baseline and the changed rounds of each trial."
                   + _trials_left_out(found, shown), figure)]


def _cycle() -> Iterator[str]:
    while True:
        yield from COLORS


FigureBuilder = Callable[[list[Bundle]], list[Figure]]

FIGURES: dict[str, list[FigureBuilder]] = {
    "detour": [detour_heatmap, detour_timeline, detour_histogram, hourglass_histogram],
    "ftq": [ftq_series],
    "fwq": [fwq_series],
    "spectrum": [spectrum_figure],
    "attribution": [cause_breakdown],
    "timerlat": [timerlat_histogram],
    "oslat": [oslat_histogram],
    "workloads": [run_time_cdfs, workload_bars],
    "trials": [tune_lost_time, tune_detour_cdfs],
}

# Figures of the bundle kinds with an overview of their own (terminal.OVERVIEWS),
# drawn from every bundle of that kind in a report.
KIND_FIGURES: dict[str, list[FigureBuilder]] = {
    "fleet": [fleet_noise_distribution, rank_noise_bars, fleet_detour_curves],
    "bsp": [bsp_slowdowns, bsp_iterations],
    "prediction": [slowdown_curves],
}

COMPARISONS: list[FigureBuilder] = [noise_bars, detour_rate_curves]
