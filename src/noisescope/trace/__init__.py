"""Kernel tracing: why each detour happened.

While a probe samples, a private tracefs instance records the kernel's
activity on the measured CPUs (`session`); the events become tables
(`events`); each detour's time is split into causes (`attribute`) and
summarised per CPU (`explain`).

For other analyses:

    >>> from noisescope.trace import event_source, load_trace, sched_switches
    >>> trace = load_trace(bundle)          # TraceEvents: .events, .switches
    >>> event_source(bundle).read(cpu, start_ns, end_ns)   # a slice, without loading it all
    >>> sched_switches(bundle).where(cpu=1) # cpu, timestamp_ns, prev_comm, prev_pid,
    ...                                     # prev_state, next_comm, next_pid, ...
    >>> attribute(spans, trace, coverage)   # any (cpu, start_ns, duration_ns) spans
    >>> attribute(spans, trace, coverage, owners={1: tid})  # spans of a sleeping thread
    >>> complete_switches(switches, events) # with the switches the trace missed put back
    >>> explain_detours(bundle, osnoise="prefer")  # again, from the osnoise tracer's events
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError
from ..tables import Table
from .attribute import CAUSES, Attribution, attribute
from .events import TraceEvents
from .session import Capture, TraceSession
from .store import EventSource, ParquetEvents
from .switches import complete_switches
from .tracefs import TracingUnavailable, cleanup

if TYPE_CHECKING:
    from ..bundle import Bundle

__all__ = ["CAUSES", "Attribution", "Capture", "EventSource", "TraceEvents", "TraceSession",
           "TracingUnavailable", "attribute", "cleanup", "complete_switches", "event_source",
           "explain_detours", "load_trace", "sched_switches"]


def _require_trace(bundle: Bundle) -> None:
    if not (bundle.has_table("events") and bundle.has_table("sched_switch")):
        reason = (bundle.manifest.get("trace") or {}).get("reason") or "it was not traced"
        raise UsageError(f"{bundle.name} has no kernel trace ({reason})",
                         "scan again as root on a kernel with tracefs (without --no-trace)")


def load_trace(bundle: Bundle) -> TraceEvents:
    """The kernel events stored in a bundle."""
    _require_trace(bundle)
    return TraceEvents(bundle.table("events"), bundle.table("sched_switch"))


def event_source(bundle: Bundle) -> EventSource:
    """The bundle's events, read by CPU and time range as needed (a written
    bundle's files are not loaded whole)."""
    _require_trace(bundle)
    files = bundle.manifest.get("tables", {})
    if bundle.path is not None and "events" in files and "sched_switch" in files:
        return ParquetEvents(bundle.path / files["events"]["file"],
                             bundle.path / files["sched_switch"]["file"])
    return load_trace(bundle)


def sched_switches(bundle: Bundle) -> Table:
    """Every context switch on the traced CPUs: cpu, timestamp_ns (the
    bundle's timeline), prev_comm, prev_pid, prev_prio, prev_state (the
    kernel's letters: 'R'/'R+' still runnable, i.e. preempted; 'S', 'D', ...
    blocked), next_comm, next_pid, next_prio; sorted by CPU, then time."""
    _require_trace(bundle)
    return bundle.table("sched_switch")


def explain_detours(bundle: Bundle, osnoise: str = "fallback") -> Attribution:
    """The causes of a traced bundle's detours, worked out again from its
    stored trace; with osnoise="prefer" from the osnoise tracer's noise events
    (scan --osnoise on) wherever they cover a class of activity: the kernel's
    own accounting, to cross-check the entry/exit events."""
    from .osnoise import OSNOISE_CLASSES
    from .scanning import invisible_to_the_kernel

    trace = event_source(bundle)
    if osnoise == "prefer" and not set(OSNOISE_CLASSES) & trace.event_names():
        raise UsageError(f"{bundle.name} holds no osnoise noise events",
                         "scan with --osnoise on, on a kernel with the osnoise tracer")
    injections = bundle.table("injections") if bundle.has_table("injections") else None
    return attribute(bundle.detours, trace, bundle.table("trace_coverage"),
                     injected=invisible_to_the_kernel(injections), osnoise=osnoise)
