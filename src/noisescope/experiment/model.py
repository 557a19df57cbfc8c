"""What an experiment is (workloads x configurations x repetitions, in which
order), and the plain data running it decides and records."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ..diagnostics import Diagnostic
from ..errors import UsageError, option
from ..placement import Placement, ResolvedPlacement
from ..probes import Injection
from ..smt import SETTINGS as SMT_SETTINGS
from ..tables import Table
from ..trace.siblings import OccupancyOptions, OccupancyPlan
from ..units import SECOND
from ..workload import Metric, RunResult, Workload

DEFAULT_TIMEOUT_NS = 600 * SECOND
ORDERS = ("interleaved", "grouped")


@dataclass(frozen=True)
class Configuration:
    """What the tool applies around a workload; "" names the only configuration."""

    name: str = ""
    placement: Placement = Placement()
    injections: tuple[Injection, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    smt: str | None = None  # "on"/"off" switched at run time (smt.py); None: as the machine is

    def __post_init__(self) -> None:
        if self.smt not in (None, *SMT_SETTINGS):
            raise UsageError(f"unknown SMT setting {self.smt!r}", "use smt = \"on\" or \"off\"")
        if self.smt == "off" and self.placement.core_scheduling:
            raise UsageError("core scheduling needs SMT, and this configuration turns it off",
                             "drop core_scheduling or smt = \"off\" from it")

    def describe(self) -> str:
        parts = [self.placement.describe()] if self.placement != Placement() else []
        parts += [f"SMT {self.smt}"] if self.smt else []
        parts += [f"inject {i.describe()}" for i in self.injections]
        parts += [f"{k}={v}" for k, v in self.env]
        return "; ".join(parts) or "as is"

    def to_dict(self) -> dict:
        return {"name": self.name, "placement": self.placement.to_dict(),
                "injections": [i.to_dict() for i in self.injections], "env": dict(self.env),
                "smt": self.smt}


@dataclass(frozen=True)
class ProbePlan:
    """Noise probes (as in `scan`) run before and/or after the workloads."""

    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    duration_ns: int = 5 * SECOND
    cpus: tuple[int, ...] | None = None

    def to_dict(self) -> dict:
        return {"before": list(self.before), "after": list(self.after),
                "duration_ns": self.duration_ns,
                "cpus": list(self.cpus) if self.cpus is not None else None}


# Runs (and warm-up runs) per workload and configuration: the plan lists every
# run up front, and a stream of statistics this long says nothing more.
MAX_RUNS = 100_000


@dataclass(frozen=True)
class Experiment:
    workloads: tuple[Workload, ...]
    configurations: tuple[Configuration, ...] = (Configuration(),)
    runs: int = 10
    warmup: int = 1
    timeout_ns: int = DEFAULT_TIMEOUT_NS
    order: str = "interleaved"
    probes: ProbePlan = ProbePlan()
    name: str | None = None
    source: str | None = None  # the TOML file it came from
    occupancy: OccupancyOptions = OccupancyOptions()  # SMT sibling occupancy, traced live

    def __post_init__(self) -> None:
        if not self.workloads:
            raise UsageError("the experiment has no workload", "add a [[workload]] with a command")
        if not (1 <= self.runs <= MAX_RUNS and 0 <= self.warmup <= MAX_RUNS):
            raise UsageError(f"runs must be >= 1 and warmup >= 0, both at most {MAX_RUNS:,} "
                             f"(got {self.runs}, {self.warmup})",
                             f"e.g. {option('runs', '10')} {option('warmup', '1')}")
        if self.timeout_ns <= 0:
            raise UsageError("timeout must be greater than zero",
                             f"e.g. {option('timeout_ns', '10m')}")
        if self.order not in ORDERS:
            raise UsageError(f"unknown order {self.order!r}", "use interleaved or grouped")
        for what, items in (("workload", self.workloads), ("configuration", self.configurations)):
            names = [item.name for item in items]
            if len(set(names)) != len(names):
                raise UsageError(f"two {what}s share a name", f"give every {what} its own name")
        metrics = {m.name: m.better for w in self.workloads for m in w.metrics}
        for w in self.workloads:
            for m in w.metrics:
                if metrics[m.name] != m.better:
                    raise UsageError(f"metric {m.name} is higher-is-better in one workload and "
                                     f"lower-is-better in another", "rename one of them")

    @property
    def metrics(self) -> dict[str, Metric]:
        return {m.name: m for w in self.workloads for m in w.metrics}

    def to_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "runs": self.runs,
                "warmup": self.warmup, "timeout_ns": self.timeout_ns, "order": self.order,
                "workloads": [w.to_dict() for w in self.workloads],
                "configurations": [c.to_dict() for c in self.configurations],
                "probes": self.probes.to_dict(), "occupancy": self.occupancy.to_dict()}


@dataclass(frozen=True)
class Step:
    """One run to do."""

    order: int
    workload: Workload
    configuration: Configuration
    warmup: bool
    repetition: int


def plan_steps(experiment: Experiment) -> list[Step]:
    pairs = [(c, w) for c in experiment.configurations for w in experiment.workloads]
    todo = [(c, w, True, r) for c, w in pairs for r in range(experiment.warmup)]
    if experiment.order == "interleaved":
        todo += [(c, w, False, r) for r in range(experiment.runs) for c, w in pairs]
    else:
        todo += [(c, w, False, r) for c, w in pairs for r in range(experiment.runs)]
    return [Step(i, w, c, warm, r) for i, (c, w, warm, r) in enumerate(todo)]


@dataclass
class Record:
    step: Step
    result: RunResult
    injections: Table  # injected noise during this run (thread mode), if any
    injection_overflow: int = 0
    occupancy: Table = field(default_factory=Table)  # SMT sibling occupancy, if traced


# Called after every run: (runs done, runs planned, the step just finished, its result)
RunCallback = Callable[[int, int, Step, RunResult], None]


@dataclass
class Prepared:
    """Everything checked and decided before the first run."""

    placements: dict[str, ResolvedPlacement]
    injector_priority: int
    diagnostics: list[Diagnostic] = field(default_factory=list)
    occupancy: OccupancyPlan | None = None  # what to trace for sibling occupancy, if anything
    occupancy_note: str = ""  # ... in words, or why nothing


def override(experiment: Experiment, *, runs: int | None = None, warmup: int | None = None,
             configurations: Iterable[str] | None = None,
             occupancy: OccupancyOptions | None = None) -> Experiment:
    """The experiment with repetitions, the configurations to run or the
    sibling occupancy options replaced (from the command line)."""
    changes: dict = {k: v for k, v in (("runs", runs), ("warmup", warmup), ("occupancy", occupancy))
                     if v is not None}
    if configurations is not None:
        by_name = {c.name: c for c in experiment.configurations}
        wanted = [name.strip() for name in configurations if name.strip()]
        unknown = [name for name in wanted if name not in by_name]
        if unknown or not wanted:
            raise UsageError(f"no configuration {', '.join(unknown) or '(none given)'} in the "
                             f"experiment", f"choose from: {', '.join(by_name) or '(unnamed)'}")
        changes["configurations"] = tuple(by_name[name] for name in wanted)
    return replace(experiment, **changes) if changes else experiment
