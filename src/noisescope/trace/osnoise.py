"""The kernel's osnoise tracer, run without its own workload.

The osnoise tracer is two things: per-CPU sampling threads (its workload)
and hooks on interrupt, softirq, NMI and thread entry and exit that emit the
osnoise:* noise events (irq_noise, softirq_noise, nmi_noise, thread_noise)
with the kernel's own accounting of each one's length. With OSNOISE_WORKLOAD
off (`osnoise/options`; kernels 6.3 and later, and distribution kernels that
took the patch, such as Debian's 6.1), setting `current_tracer` to osnoise
in our private instance registers the hooks and starts no thread: the
samplers stay noisescope's own. `osnoise/options` is global, so it is
changed through a KnobJournal and restored when the session closes (or by
the next run after a SIGKILL). It is never touched while osnoise or timerlat
runs elsewhere (rtla, another instance): that run depends on it.
"""

from __future__ import annotations

from pathlib import Path

from ..knobs import KnobJournal
from .events import LOCAL_TIMER
from .tracefs import Instance

SYSTEM = "osnoise"  # its events' system in tracefs
OPTIONS = "osnoise/options"
WORKLOAD = "OSNOISE_WORKLOAD"
LATENCY_TRACERS = ("osnoise", "timerlat")
MODES = ("auto", "on", "off")

OSNOISE_CLASSES = {"irq_noise": "irq", "softirq_noise": "softirq", "nmi_noise": "nmi",
                   "thread_noise": "thread"}
# The events that give each class of activity its intervals directly.
NATIVE_CLASSES = {"irq": ("irq_handler_entry", f"{LOCAL_TIMER}_entry"), "softirq": ("softirq_entry",),
                  "nmi": ("nmi_handler",), "thread": ("sched_switch",)}


def osnoise_classes(present: set[str]) -> set[str]:
    """Classes of activity to take from osnoise events: those the trace
    (with these event names) has osnoise events for but no entry/exit events."""
    return {cls for name, cls in OSNOISE_CLASSES.items()
            if name in present and not present.intersection(NATIVE_CLASSES[cls])}


def preferred_osnoise_classes(present: set[str]) -> set[str]:
    """Every class the trace has osnoise events for, but threads: the
    timeline of who ran needs the switches."""
    return {cls for name, cls in OSNOISE_CLASSES.items() if name in present and cls != "thread"}


def unavailable(instance: Instance) -> str | None:
    """Why the osnoise tracer cannot run here without its workload (None: it can)."""
    tracefs = instance.tracefs
    if "osnoise" not in instance.read("available_tracers").split():
        return "this kernel has no osnoise tracer"
    options = tracefs / OPTIONS
    if not options.exists() or WORKLOAD not in options.read_text().replace("NO_", "").split():
        return "this kernel's osnoise tracer always starts its own workload (no OSNOISE_WORKLOAD option)"
    busy = [name for name, current in _current_tracers(tracefs, instance.name)
            if current in LATENCY_TRACERS]
    if busy:
        return f"osnoise/timerlat already runs in {', '.join(busy)} (rtla?)"
    return None


def _current_tracers(tracefs: Path, own: str) -> list[tuple[str, str]]:
    found = [("the top-level instance", (tracefs / "current_tracer").read_text().strip())]
    for folder in sorted((tracefs / "instances").iterdir()):
        if folder.name != own and (folder / "current_tracer").exists():
            found.append((f"instance {folder.name}", (folder / "current_tracer").read_text().strip()))
    return found


def start(instance: Instance, journal: KnobJournal) -> None:
    """Turn the workload off (journalled) and make osnoise the instance's tracer;
    it begins with the instance's tracing_on."""
    options = instance.tracefs / OPTIONS
    was_on = WORKLOAD in options.read_text().split()
    journal.change(options, f"NO_{WORKLOAD}", restore=WORKLOAD if was_on else f"NO_{WORKLOAD}")
    instance.write("current_tracer", "osnoise")


def stop(instance: Instance) -> None:
    """Unregister the hooks (before the instance goes and the options are restored)."""
    instance.write("current_tracer", "nop")
