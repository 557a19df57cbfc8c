"""Why the detours (and late timer wakeups) of a stored scan happened: the
library side of `noisescope explain`, also `noisescope.explain(...)`.

    >>> result = noisescope.explain("noisescope-node17-20261130T063836Z", cpus="3", worst=10)
    >>> result.detours[0]["causes"][0]   # the largest cause on the first CPU
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .bundle import Bundle, load
from .errors import UsageError, option
from .tables import Table, table_cpus
from .trace import event_source, explain_detours
from .trace.explain import attribution_summary
from .trace.store import EventSource
from .trace.wakeups import explain_late_wakeups, wakeup_summary
from .units import format_cpu_list, parse_cpu_list, parse_duration

WORST = 5  # longest detours (late wakeups) given per CPU


@dataclass(frozen=True)
class Explanation:
    """Per-CPU rows (as `trace.explain.attribution_summary`: the causes, and the
    worst detours or wakeups with their events) of the detours and of the late
    timer wakeups; None where the bundle holds none."""

    bundle: Bundle
    detours: list[dict] | None
    late_wakeups: list[dict] | None


DETOUR_COLUMNS = ("start_ns", "duration_ns", "cause", "cause_detail")  # what the summary reads
CAUSE_COLUMNS = ("start_ns", "cause", "detail", "duration_ns")


def explain(bundle: Bundle | str | os.PathLike[str], *, cpus: str | Sequence[int] | None = None,
            worst: int = WORST, trace_threshold: str | int | None = None,
            osnoise: bool = False) -> Explanation:
    """Explain a traced bundle's detours and late wakeups, only on `cpus` (a CPU
    list such as "2-3", or numbers) if given, with the `worst` longest per CPU.
    Late wakeups are those explained when measuring, or, with `trace_threshold`
    (a duration such as "20us", a plain number in us; an int in ns), those at
    least that late, attributed again from the bundle's trace. With `osnoise`,
    the detours are explained again from the osnoise tracer's noise events
    (scan --osnoise on): the kernel's own accounting."""
    bundle = bundle if isinstance(bundle, Bundle) else load(bundle)
    trace = event_source(bundle)
    has_detours, has_wakeups = bundle.has_table("detour_causes"), bundle.has_table("timerlat")
    if not (has_detours or has_wakeups):
        raise UsageError(f"{bundle.name} has no explained detours or timer wakeups (neither the "
                         f"detour nor the timerlat probe ran while tracing)",
                         "scan with --probes detour or --probes timerlat")
    if trace_threshold is not None and not has_wakeups:
        raise UsageError(f"{option('trace_threshold')} explains timer wakeups, and {bundle.name} "
                         f"has none",
                         "use it with bundles of noisescope timerlat or scan --probes timerlat")
    if worst < 0:
        raise UsageError(f"{option('worst')} must be 0 or more", f"e.g. {option('worst', '5')}")
    wanted = _cpus(cpus)
    measured = bundle.parameters["cpus"]
    if wanted is not None and not set(wanted) & set(measured):
        raise UsageError(f"{bundle.name} did not measure CPUs "
                         f"{cpus if isinstance(cpus, str) else format_cpu_list(wanted)}",
                         f"it measured CPUs {','.join(map(str, measured))}")
    if osnoise and not has_detours:
        raise UsageError(f"{option('osnoise')} explains detours, and {bundle.name} has none",
                         "use it with bundles of noisescope scan --probes detour --osnoise on")
    detours = late = None
    if has_detours:
        if osnoise:
            attribution = explain_detours(bundle, osnoise="prefer")
            spans, causes = attribution.annotate(bundle.detours), attribution.causes
        else:  # a CPU and a row group at a time: an hour's are tens of millions of rows
            spans = bundle.table_by_cpu("detours", DETOUR_COLUMNS)
            causes = bundle.table_by_cpu("detour_causes", CAUSE_COLUMNS)
        detours = attribution_summary(spans, causes, trace, worst=worst, cpus=[
            cpu for cpu in table_cpus(spans) if wanted is None or cpu in wanted])
    if has_wakeups:
        late = _late_wakeup_rows(bundle, trace, wanted, worst, trace_threshold)
    return Explanation(bundle, detours, late)


def _cpus(cpus: str | Sequence[int] | None) -> list[int] | None:
    if not cpus:
        return None
    return list(parse_cpu_list(cpus) if isinstance(cpus, str) else cpus)


def _only(table: Table, cpus: list[int] | None) -> Table:
    return table if cpus is None else table.filter(np.isin(table["cpu"], cpus))


def _late_wakeup_rows(bundle: Bundle, trace: EventSource, cpus: list[int] | None, worst: int,
                      threshold: str | int | None) -> list[dict]:
    """Summary rows of the late wakeups: those explained when measuring, or
    attributed again at another threshold from the bundle's trace."""
    summaries = [s for s in bundle.summaries.get("timerlat", []) if cpus is None or s["cpu"] in cpus]
    if threshold is None:
        if not bundle.has_table("late_wakeup_causes"):
            raise UsageError(f"{bundle.name} has no explained late wakeups",
                             f"give {option('trace_threshold')}, e.g. "
                             f"{option('trace_threshold', '50us')}")
        stored = bundle.summaries["late_wakeups"][0]["threshold_ns"]
        return wakeup_summary(_only(bundle.late_wakeups, cpus), _only(bundle.late_wakeup_causes, cpus),
                              trace, [s["cpu"] for s in summaries], stored, worst)
    threshold_ns = (threshold if isinstance(threshold, int)
                    else parse_duration(threshold, what=option("trace_threshold"), default_unit="us"))
    return explain_late_wakeups(_only(bundle.timerlat, cpus), threshold_ns, summaries, trace,
                                bundle.trace_coverage, worst).summary
