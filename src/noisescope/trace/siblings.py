"""SMT sibling occupancy of workload runs, recorded live.

While each run of a `bench` or `run` experiment executes, a private tracefs
instance records sched_switch, sched_wakeup and sched_process_fork on the
CPUs the workload may use and on their SMT siblings. After the run the
buffers are read (never during it), the run's tasks are found (the process
the launcher started and every task forked from it), the switches the trace
misses are put back (`switches.complete_switches`), and for each workload
CPU and sibling `occupancy` splits the time the CPU ran the
workload by what the sibling ran meanwhile: a task of the same run, nothing
(idle), a foreign task, or unknown.

Sibling groups come from the host's topology (thread_siblings_list), or are
declared (`OccupancyOptions.siblings`), e.g. to try it on a machine without
SMT. Mode "auto" collects where tracing works and a workload CPU has a
sibling; "on" asks for it (a usage error without siblings, a warning without
tracing); "off" never traces.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..clock import MeasurementClock
from ..diagnostics import Code, Diagnostic
from ..errors import UsageError, option
from ..host import HostFacts
from ..tables import Table
from ..units import format_cpu_list, parse_cpu_list
from .events import HRTIMER_EXPIRE, SCHED_FORK, SCHED_SWITCH, SCHED_WAKEUP, TraceEvents
from .occupancy import CATEGORIES, occupancy, sibling_pairs
from .session import Recording, TraceSession
from .switches import complete_switches
from .tracefs import TracingUnavailable

MODES = ("auto", "on", "off")
# The hrtimer expiries (the tick, at least, on every busy CPU) tell which task
# was running even on a sibling that never switched during a run.
TRACEPOINTS = (SCHED_WAKEUP, SCHED_FORK, SCHED_SWITCH, HRTIMER_EXPIRE)
RECORDING_NS = 1_000_000_000  # sizes the default buffers: the session's minimum, 8 MiB per CPU
OCCUPANCY_COLUMNS = ("order", "cpu", "sibling", "traced_ns", "tasks", "workload_ns",
                     *(f"{c}_ns" for c in CATEGORIES))


@dataclass(frozen=True)
class OccupancyOptions:
    mode: str = "auto"
    siblings: tuple[tuple[int, ...], ...] = ()  # declared sibling groups, instead of the host's
    buffer_kb: int | None = None  # per traced CPU; None: 8 MiB (about 100,000 switches a run),
    # less where the CPUs' buffers would take over a quarter of the available memory

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"unknown occupancy mode {self.mode!r}", "use auto, on or off")
        for group in self.siblings:
            if len(set(group)) < 2:
                raise UsageError(f"sibling group {format_cpu_list(group)} has fewer than two CPUs",
                                 f"declare a group of two or more CPUs, e.g. "
                                 f"{option('siblings', '0,1')}")

    @classmethod
    def parse(cls, mode: str, groups: tuple[str, ...]) -> OccupancyOptions:
        """From the command line: --occupancy/--no-occupancy and --siblings (repeated)."""
        siblings = tuple(parse_cpu_list(group) for group in groups)
        return cls("on" if siblings and mode == "auto" else mode, siblings)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "siblings": [list(g) for g in self.siblings],
                "buffer_kb": self.buffer_kb}


@dataclass(frozen=True)
class OccupancyPlan:
    """What to trace: each configuration's workload CPUs that have siblings."""

    siblings: dict[int, tuple[int, ...]]  # cpu -> its siblings
    source: str  # "host" (topology) or "declared"
    cpus: dict[str, tuple[int, ...]]  # configuration name -> its workload CPUs with siblings

    @property
    def traced(self) -> tuple[int, ...]:
        cpus = {c for group in self.cpus.values() for c in group}
        return tuple(sorted(cpus | {s for c in cpus for s in self.siblings[c]}))


def plan_occupancy(options: OccupancyOptions, facts: HostFacts,
                   workload_cpus: Mapping[str, tuple[int, ...] | None]) -> tuple[OccupancyPlan | None, str]:
    """The plan, or None, and in words what will be measured or why not
    (checked before any run). `workload_cpus`: configuration -> CPUs (None: any)."""
    if options.mode == "off":
        return None, "turned off (--no-occupancy)"
    declared = bool(options.siblings)
    groups = options.siblings or facts.sibling_groups
    offline = sorted({c for g in options.siblings for c in g} - set(facts.online))
    if offline:
        raise UsageError(f"declared sibling CPU {offline[0]} is offline or does not exist",
                         f"pick from {facts.online_cpus}")
    siblings = {c: s for c, s in sibling_pairs(groups).items() if s}
    cpus = {name: tuple(c for c in (chosen if chosen is not None else facts.online) if c in siblings)
            for name, chosen in workload_cpus.items()}
    if not any(cpus.values()):
        smt = facts.smt_control or "unknown"
        why = ("no workload CPU is in a declared sibling group" if declared else
               f"no SMT siblings on the workload CPUs (SMT: {smt})")
        if options.mode == "on":
            raise UsageError(f"cannot measure sibling occupancy: {why}",
                             f"declare siblings to try it without SMT, e.g. "
                             f"{option('siblings', '0,1')}")
        return None, why
    plan = OccupancyPlan(siblings, "declared" if declared else "host", cpus)
    return plan, f"CPUs {format_cpu_list(plan.traced)} traced ({plan.source} siblings)"


@dataclass
class SiblingRecorder:
    """A tracing session over the plan's CPUs, one recording per run."""

    plan: OccupancyPlan
    session: TraceSession
    workdir: Path
    lost_runs: list[int] = field(default_factory=list)  # runs whose trace ended early
    started: bool = False

    @classmethod
    def open(cls, plan: OccupancyPlan, clock: MeasurementClock,
             options: OccupancyOptions) -> SiblingRecorder:
        """Set up the session (TracingUnavailable if it cannot be)."""
        session = TraceSession(plan.traced, clock, buffer_kb=options.buffer_kb,
                               recording_ns=RECORDING_NS, tracepoints=TRACEPOINTS)
        session.open()
        return cls(plan, session, Path(tempfile.mkdtemp(prefix="noisescope-occupancy-")))

    def close(self) -> None:
        """Restore the kernel's tracing state and remove the buffer copies."""
        self.session.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SiblingRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Record (from empty buffers: the last stop read them out)."""
        self.session.start(clear=not self.started)
        self.started = True

    def stop(self) -> Recording:
        """Stop recording; the buffers are copied to files."""
        return self.session.stop(self.workdir, "run")

    def measure(self, recording: Recording, order: int, configuration: str, root_pid: int,
                start_ns: int, end_ns: int) -> Table:
        """The occupancy rows of one run (its order, configuration, first
        process and time on the bundle's timeline) from its recording."""
        capture = self.session.decode(recording)
        recording.remove_files()
        trace = capture.events or TraceEvents.empty()
        coverage = capture.coverage
        end = min(end_ns, int(coverage["end_ns"].min()))
        if end < end_ns:
            self.lost_runs.append(order)
        tasks = run_tasks(root_pid, trace.events)
        switches = complete_switches(trace.switches, trace.events)
        cpus = self.plan.cpus.get(configuration, ())
        rows = occupancy(switches, {c: self.plan.siblings[c] for c in cpus}, workload_pids=tasks,
                         cpus=cpus, start_ns=start_ns, end_ns=max(end, start_ns),
                         observed=trace.events)
        columns: dict[str, list] = {name: [] for name in OCCUPANCY_COLUMNS}
        for row in rows:
            values = {"order": order, "traced_ns": max(0, end - start_ns), "tasks": len(tasks),
                      **row.to_dict()}
            for name in OCCUPANCY_COLUMNS:
                columns[name].append(values[name])
        return Table({name: np.array(values, np.int64) for name, values in columns.items()})

    def diagnostics(self) -> list[Diagnostic]:
        if not self.lost_runs:
            return []
        return [Diagnostic(Code.TRACE_EVENTS_LOST, f"sibling occupancy: the trace buffer filled "
                                                   f"during {len(self.lost_runs)} runs; their "
                                                   f"occupancy covers only the time before")]


def run_tasks(root_pid: int, events: Table) -> set[int]:
    """The run's first process and every task forked from it (or from its
    tasks), as the trace saw them."""
    tasks = {root_pid}
    forks = events.filter(events["event"] == SCHED_FORK.name) if events.rows else events
    if forks.rows:
        order = np.argsort(forks["timestamp_ns"], kind="stable")
        for parent, child in zip(forks["pid"][order].tolist(), forks["number"][order].tolist(),
                                 strict=True):
            if parent in tasks:
                tasks.add(child)
    return tasks


def shares(table: Table) -> dict[str, float]:
    """Pooled shares (%) of each category over the rows of an occupancy
    table (NaN where the workload never ran on a CPU with a sibling)."""
    total = int(table["workload_ns"].sum()) if table.rows else 0
    return {c: 100.0 * int(table[f"{c}_ns"].sum()) / total if total else float("nan")
            for c in CATEGORIES}


def unavailable(why: TracingUnavailable) -> Diagnostic:
    return Diagnostic(Code.TRACING_UNAVAILABLE, f"SMT sibling occupancy not measured: {why}")
