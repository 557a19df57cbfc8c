"""`noisescope timerlat`: the cyclictest measurement on its own.

A timerlat run is a scan with only the timerlat probe, with cyclictest's
options: the wakeup interval, a loop count or a duration, a SCHED_FIFO
priority (0 for normal scheduling) and a histogram limit. The windows are
back to back and a whole number of intervals long, so that `loops` deadlines
are measured exactly. Where tracefs is usable the kernel's events are
recorded meanwhile, and every wakeup at least `trace_threshold_ns` late is
explained (trace/wakeups.py).
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from .bundle import Bundle, check_destination
from .errors import UsageError, option
from .host import HostFacts, live_host_facts
from .pmqos import MAX_US as MAX_DMA_LATENCY_US
from .pmqos import cpu_latency_request
from .probes import timerlat as timerlat_probe
from .scan import DEFAULT_RT_PRIORITY, ScanOptions, ScanProgress, scan
from .trace.scanning import TraceOptions
from .trace.wakeups import DEFAULT_THRESHOLD_NS
from .units import MAX_DURATION_NS, SECOND, format_duration

DEFAULT_DURATION_NS = 10 * SECOND


@dataclass(frozen=True)
class TimerlatOptions:
    cpus: tuple[int, ...] | None = None
    interval_ns: int = timerlat_probe.DEFAULT_INTERVAL_NS
    loops: int | None = None  # deadlines per CPU; else duration_ns
    duration_ns: int | None = None
    priority: int = DEFAULT_RT_PRIORITY  # SCHED_FIFO priority; 0: normal scheduling
    histogram_ns: int = timerlat_probe.DEFAULT_HISTOGRAM_NS
    keep_series: bool = True
    dma_latency_us: int | None = None  # hold /dev/cpu_dma_latency at this bound
    label: str | None = None
    trace: bool = True  # record kernel events (where tracefs is usable) ...
    trace_threshold_ns: int = DEFAULT_THRESHOLD_NS  # ... and explain wakeups at least this late

    def check(self) -> None:
        if not 0 <= self.priority <= 99:
            raise UsageError(f"priority {self.priority} is out of range",
                             "use 1-99 for SCHED_FIFO, or 0 for normal scheduling")
        if self.loops is not None and self.duration_ns is not None:
            raise UsageError(f"{option('loops')} and {option('duration_ns')} both given",
                             "give one of them")
        if self.loops is not None and self.loops <= 0:
            raise UsageError(f"{option('loops')} must be greater than zero, got {self.loops}",
                             f"e.g. {option('loops', '10000')}")
        if self.dma_latency_us is not None and not 0 <= self.dma_latency_us <= MAX_DMA_LATENCY_US:
            raise UsageError(f"{option('dma_latency_us')} must be 0 to {MAX_DMA_LATENCY_US} us "
                             f"(the kernel's "
                             f"default, no bound), got {self.dma_latency_us}",
                             f"e.g. {option('dma_latency_us', '0')} (as cyclictest does)")
        if self.trace_threshold_ns < 0:
            raise UsageError(f"{option('trace_threshold_ns')} must not be negative, got "
                             f"{self.trace_threshold_ns} ns",
                             f"e.g. {option('trace_threshold_ns', '50us')}")
        timerlat_probe.check_interval(self.interval_ns)
        timerlat_probe.check_histogram(self.histogram_ns)
        if self.measured_ns > MAX_DURATION_NS:
            raise UsageError(f"{option('loops', str(self.loops))} at an interval of "
                             f"{format_duration(self.interval_ns)} would run longer than 366 days",
                             f"give at most "
                             f"{option('loops', str(MAX_DURATION_NS // self.interval_ns))}")

    @property
    def measured_ns(self) -> int:
        if self.loops is not None:
            return self.loops * self.interval_ns
        return self.duration_ns or DEFAULT_DURATION_NS

    @property
    def window_ns(self) -> int:
        """About a second (progress and Ctrl-C stay responsive), in whole intervals."""
        return self.interval_ns * max(1, SECOND // self.interval_ns)

    def scan_options(self) -> ScanOptions:
        return ScanOptions(cpus=self.cpus, duration_ns=self.measured_ns, probes=("timerlat",),
                           rt=self.priority > 0, priority=self.priority or DEFAULT_RT_PRIORITY,
                           runtime_ns=self.window_ns, period_ns=self.window_ns,
                           interval_ns=self.interval_ns, histogram_ns=self.histogram_ns,
                           keep_series=self.keep_series, label=self.label,
                           trace=TraceOptions(enabled=self.trace,
                                              wakeup_threshold_ns=self.trace_threshold_ns))


def timerlat(options: TimerlatOptions, *, argv: list[str] | None = None,
             facts: HostFacts | None = None, progress: ScanProgress | None = None,
             destination: str | os.PathLike[str] | None = None) -> Bundle:
    """Measure timer latency; write the bundle to `destination` if given (checked first)."""
    options.check()
    if destination is not None:
        check_destination(Path(destination))
    facts = facts or live_host_facts()
    with ExitStack() as held:
        dma_latency = []

        def hold_dma_latency() -> int:
            """Once the scan has checked everything, just before it measures."""
            dma_latency.append(held.enter_context(cpu_latency_request(options.dma_latency_us)))
            return 0  # start as soon as ready

        def amend(bundle: Bundle) -> None:
            bundle.manifest["privileges"]["dma_latency"] = dma_latency[0]
            bundle.parameters.update(loops=options.loops, dma_latency_us=options.dma_latency_us)

        # Written by the scan: the trace goes to Parquet beside the bundle, not memory.
        return scan(options.scan_options(), argv=argv, facts=facts, progress=progress,
                    destination=destination, kind="timerlat", on_ready=hold_dma_latency,
                    amend=amend)
