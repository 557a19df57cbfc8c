"""Terminal output of a prediction: the model, run time and slowdown per process
count (simulation beside the order-statistics estimate), and the knees."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable

from ..analysis.predict import Prediction, PredictOptions
from ..analysis.predict.model import ESTIMATE_ASSUMES, no_estimate
from ..bundle import Bundle
from ..units import format_count, format_duration, format_rate

MAX_SOURCE_LINES = 8
COLLECTIVE_NAMES = {"allreduce": "allreduce (recursive doubling)",
                    "barrier": "barrier (dissemination)", "none": "no collective"}


def slowdown(value: float | None) -> str:
    """0.0123 -> '1.23%', 64.8 -> '6,477%'."""
    if value is None:
        return "-"
    percent = 100.0 * value
    return f"{percent:,.0f}%" if abs(percent) >= 100 else f"{percent:.3g}%"


def model_lines(options: PredictOptions, traces: int) -> list[str]:
    p = options.loggp
    step = f"compute {format_duration(options.compute_ns)}" if options.compute_ns else "no compute"
    if options.collective != "none":
        size = f" of {options.message_bytes} B" if options.collective == "allreduce" else ""
        step += f" + {COLLECTIVE_NAMES[options.collective]}{size}"
    offsets = ("co-scheduled (one offset into the trace for all processes)" if options.sync_noise
               else "independent (each process from its own random offset into the trace)")
    seeds = f"{options.seeds} seed{'s' if options.seeds > 1 else ''} from {options.seed}"
    lines = [f"model: {options.iterations} iterations of {step}",
             f"LogGP: L={format_duration(p.latency_ns)}, o={format_duration(p.overhead_ns)}, "
             f"g={format_duration(p.gap_ns)}, G={p.gap_per_byte_ns} ns/B",
             f"noise: {offsets}; {seeds}"]
    if traces > 1:
        lines.append(f"{traces} noise traces, assigned to ranks round-robin (rank r replays "
                     f"trace r mod {traces})")
    return lines


def source_lines(sources: tuple[dict, ...]) -> list[str]:
    lines = []
    for s in sources[:MAX_SOURCE_LINES]:
        lines.append(f"noise: {s['name']}: {s['detours']:,} detours in "
                     f"{format_duration(s['span_ns'])} ({format_rate(s['rate_hz'])}, "
                     f"{100 * s['noise_fraction']:.3g}% of the time, longest "
                     f"{format_duration(s['max_ns'])})")
    if len(sources) > MAX_SOURCE_LINES:
        lines.append(f"noise: ... and {len(sources) - MAX_SOURCE_LINES} more traces")
    return lines


def prediction_table(points: list[dict], options: PredictOptions, sources: tuple[dict, ...]
                     ) -> RichTable:
    seeds = options.seeds
    t = RichTable(title="Predicted run time (simulation, and the order-statistics estimate)",
                  title_justify="left", caption_justify="left")
    missing = no_estimate(options, max((s["max_ns"] for s in sources if s["max_ns"] is not None),
                                       default=None))
    for name in ("processes", "noise-free", "with noise", "slowdown",
                 f"spread ({seeds} seeds)" if seeds > 1 else "spread", "estimate",
                 "est. slowdown"):
        t.add_column(name, justify="right")
    for p in points:
        t.add_row(format_count(p["procs"]), format_duration(p["noise_free_ns"]),
                  format_duration(p["runtime_mean_ns"]), slowdown(p["slowdown_mean"]),
                  f"{slowdown(p['slowdown_min'])} - {slowdown(p['slowdown_max'])}",
                  *(("-", "-") if missing else (format_duration(p["analytic_ns"]),
                                                slowdown(p["analytic_slowdown"]))))
    t.caption = missing or ESTIMATE_ASSUMES
    return t


def knee_table(knees: list[dict], compute_ns: int) -> RichTable:
    t = RichTable(title=f"Knee P* = 1 / (rate x W) with W = {format_duration(compute_ns)}: beyond "
                        f"it nearly every step waits for one such detour", title_justify="left")
    for name in ("source", "detours", "rate", "mean length", "noise %", "knee P*"):
        t.add_column(name, justify="left" if name in ("source", "detours") else "right")
    for k in knees:
        which = (f"periodic, {format_duration(k['length_ns'])}" if k["detours"] == "periodic"
                 else f">= {format_duration(k['length_ns'])}")
        t.add_row(k["source"], which, format_rate(k["rate_hz"]), format_duration(k["mean_ns"]),
                  f"{100 * k['noise_fraction']:.3g}",
                  _knee(k["procs"]))
    return t


def _knee(procs: float | None) -> str:
    if procs is None:
        return "-"
    return f"{procs:,.0f}" if procs >= 100 else f"{procs:.3g}"


def prediction_blocks(prediction: Prediction) -> list[str | RichTable]:
    options = prediction.options
    blocks: list[str | RichTable] = [*source_lines(prediction.sources),
                                     *model_lines(options, len(prediction.sources))]
    if not prediction.complete:
        blocks.append(f"[INCOMPLETE] interrupted after {len(prediction.points)} of "
                      f"{len(options.procs)} process counts")
    data = prediction.to_dict()
    if data["points"]:
        blocks.append(prediction_table(data["points"], options, prediction.sources))
    if data["knees"]:
        blocks.append(knee_table(data["knees"], options.compute_ns))
    return blocks


def prediction_bundle_blocks(bundle: Bundle) -> list[str | RichTable]:
    """What `show` prints for a prediction bundle (terminal.OVERVIEWS)."""
    return prediction_blocks(Prediction.from_bundle(bundle))


def print_prediction(prediction: Prediction, console: Console) -> None:
    from .terminal import print_blocks, print_diagnostics

    print_blocks(prediction_blocks(prediction), console)
    print_diagnostics(prediction.warnings, console)
