"""`noisescope cluster bsp`: the slowdown a bulk-synchronous loop really suffers,
beside the slowdown `predict` expects from the noise measured on the same ranks.

Every rank runs one CPU. The run is a series of rounds; each round, all ranks
together (a barrier before each part):

  1. sample: the detour sampler measures the CPU's noise for `sample_ns`;
  2. alone:  `block` iterations of the fixed work (FWQ units, the same number on
             every rank, calibrated on rank 0), no communication;
  3. bsp:    `block` iterations of the same work, each followed by the collective.

Interleaving the parts spreads drift on a shared machine evenly over them, and
makes the noise trace, the work alone and the synchronized work come from the
same minutes. With --rt each round ends with a pause, so that spinning
SCHED_FIFO ranks stay inside the kernel's RT budget.

From what the ranks measured, rank 0 computes (all per iteration):
  noise-free   = the slowest rank's fastest work-alone iteration + the fastest
                 collective (nobody waiting): the run without noise;
  local        = each rank's mean work-alone iteration over its fastest: the
                 noise one rank suffers on its own;
  measured     = the mean synchronized iteration over noise-free: the slowdown
                 the collective turns that noise into (the same definition as
                 predict's: run time with noise over run time without, minus 1);
  predicted    = predict() for the same number of ranks, compute time and
                 collective, replaying each rank's own detour trace.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .. import _native
from ..analysis.predict import predict
from ..analysis.predict.model import MAX_SEEDS
from ..analysis.predict.traces import traces_from_bundle
from ..bundle import Bundle, check_destination
from ..clock import measurement_clock
from ..diagnostics import Code, Diagnostic
from ..errors import UsageError, option
from ..host import live_host_facts, usable_cpus
from ..manifest import new_manifest, utc_now
from ..prechecks import injector_priority, sampler_priority
from ..probes import Injection, ProbeContext
from ..probes import detour as detour_probe
from ..probes.inject import BackgroundInjection
from ..probes.quantum import UNIT_ITERATIONS, unit_ticks
from ..probes.schedule import plan_windows
from ..system import check_system
from ..tables import Table, repeated
from .cpus import assign_cpus, own_injections
from .mpi import World
from .session import DEFAULT_TIMEOUT_NS, Session, rank_findings, start_up

COLLECTIVES = ("allreduce", "barrier")
RT_PAUSE_NS = 100_000_000  # per round with --rt: the RT budget is 95% of each second


# Each iteration's times are kept (40 bytes: 400 MB at this bound).
MAX_ITERATIONS = 10_000_000


@dataclass(frozen=True)
class BspOptions:
    compute_ns: int = 1_000_000
    iterations: int = 2000  # per part (alone, bsp)
    collective: str = "allreduce"
    block: int = 100  # iterations per part and round
    sample_ns: int = 100_000_000  # detour sampling per round
    threshold_ns: int = 1_000
    rt: bool = False
    priority: int = 95
    cpus: tuple[int, ...] | None = None  # candidates, split between ranks like cluster scan
    injections: tuple[Injection, ...] = ()
    inject_ranks: tuple[int, ...] | None = None
    seeds: int = 5
    label: str | None = None

    @property
    def rounds(self) -> int:
        return -(-self.iterations // self.block)

    def check(self) -> None:
        if self.collective not in COLLECTIVES:
            raise UsageError(f"unknown collective {self.collective!r}",
                             f"choose from {', '.join(COLLECTIVES)}")
        for name, value in (("compute_ns", self.compute_ns), ("iterations", self.iterations),
                            ("block", self.block), ("sample_ns", self.sample_ns),
                            ("seeds", self.seeds)):
            if value <= 0:
                raise UsageError(f"{option(name)} must be greater than zero",
                                 f"e.g. {option(name, '1000')}")
        if self.iterations > MAX_ITERATIONS:
            raise UsageError(f"{option('iterations', str(self.iterations))} is more than the "
                             f"{MAX_ITERATIONS:,} whose times a rank keeps",
                             f"give at most {option('iterations', str(MAX_ITERATIONS))}")
        if self.block > self.iterations:
            raise UsageError(f"{option('block', str(self.block))} is longer than "
                             f"{option('iterations', str(self.iterations))}",
                             f"give a block of at most the iterations, e.g. {option('block', '100')}")
        if self.seeds > MAX_SEEDS:
            raise UsageError(f"{option('seeds', str(self.seeds))} is too many",
                             f"give at most {MAX_SEEDS}")
        for injection in self.injections:
            if injection.mode != "thread":
                raise UsageError(f"injection {injection.describe()} needs a sampler thread to "
                                 f"signal, which bsp does not run",
                                 "inject in thread mode, e.g. 200Hz:300us@cpu1/thread")

    def to_dict(self) -> dict:
        data = asdict(self)
        data["cpus"] = list(self.cpus) if self.cpus is not None else None
        data["injections"] = [i.to_dict() for i in self.injections]
        data["inject_ranks"] = list(self.inject_ranks) if self.inject_ranks is not None else None
        return data


class _Collective:
    def __init__(self, world: World, name: str):
        self.comm = world.comm
        self.barrier = name == "barrier"
        self.MPI = world.MPI
        self.send = np.ones(1, np.float64)
        self.receive = np.zeros(1, np.float64)

    def __call__(self) -> None:
        if self.barrier:
            self.comm.Barrier()
        else:
            self.comm.Allreduce(self.send, self.receive, op=self.MPI.SUM)


@dataclass
class _Pinned:
    """The calling thread on one CPU, optionally SCHED_FIFO; restored on exit."""

    cpu: int
    priority: int

    def __enter__(self) -> _Pinned:
        self.affinity = os.sched_getaffinity(0)
        self.policy = os.sched_getscheduler(0)
        self.param = os.sched_getparam(0)
        os.sched_setaffinity(0, {self.cpu})
        if self.priority:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.priority))
        return self

    def __exit__(self, *exc) -> None:
        if self.priority:
            os.sched_setscheduler(0, self.policy, self.param)
        os.sched_setaffinity(0, self.affinity)


def run_bsp(options: BspOptions, *, destination: str | os.PathLike[str] | None = None,
            timeout_ns: int = DEFAULT_TIMEOUT_NS, argv: list[str] | None = None,
            world: World | None = None, progress=None) -> Bundle | None:
    """Run on every rank (same arguments); rank 0 returns the bsp bundle (written to
    `destination` if given), the others None."""
    options.check()
    world = world or World()
    if world.size < 2:
        raise UsageError("cluster bsp needs at least 2 ranks; it was started as one process",
                         "start it with mpirun -n 2 (or more) or srun")
    started = utc_now()
    placement = start_up(world, options.cpus, (lambda: check_destination(Path(destination)))
                         if destination is not None else None)
    facts = live_host_facts()
    priority, _ = sampler_priority(options.priority, options.rt)
    session = Session(world, timeout_ns)
    hello = {"node": placement.node, "cpus": []}
    failure, units = None, 0
    try:
        cpu = assign_cpus(placement)[0]
        hello["cpus"] = [cpu]
        if cpu not in usable_cpus(facts):
            raise UsageError(f"CPU {cpu} is outside rank {placement.rank}'s cpuset",
                             "bind ranks to distinct CPUs (mpirun --bind-to core)")
        clock = measurement_clock(facts.tsc_flags)
        with _Pinned(cpu, 0):
            units = round(clock.ticks(options.compute_ns) / unit_ticks())
    except UsageError as error:
        failure = str(error)
    units = world.share(units)  # rank 0's calibration: the same work on every rank
    session.ready(hello, failure, require_all=True)
    if failure:  # the others stop too (ready() refuses to start them)
        raise UsageError(failure)
    injections = own_injections(options.injections, (cpu,), placement.rank, options.inject_ranks)
    measured = _measure(world, options, cpu, priority, clock, units, injections, progress)
    record = {"rank": placement.rank, "node": placement.node, "cpu": cpu,
              "system": check_system("/", (cpu,), facts).to_list(), **measured}
    session.report(record)
    bundle = None
    if world.is_root:
        bundle = bsp_bundle(options, session, units, priority, started=started, argv=argv,
                            facts=facts)
        if destination is not None:
            bundle.write(destination)
    session.close()
    return bundle


def _measure(world: World, options: BspOptions, cpu: int, priority: int, clock, units: int,
             injections: tuple[Injection, ...], progress) -> dict:
    """The rounds (see the module's docstring); arrays of integer nanoseconds."""
    n = options.rounds * options.block
    alone_start = np.zeros(n + 1, np.uint64)
    alone_work = np.zeros(n, np.uint64)
    bsp_start = np.zeros(n + 1, np.uint64)
    bsp_work = np.zeros(n, np.uint64)
    bsp_collective = np.zeros(n, np.uint64)
    schedule = plan_windows(options.sample_ns, rt=False, runtime_ns=options.sample_ns,
                            period_ns=options.sample_ns)[0]
    context = ProbeContext((cpu,), schedule, clock, priority)
    collective = _Collective(world, options.collective)
    detours, windows, summaries = [], [], []
    block, ticks, work = options.block, _native.ticks, _native.timed_work
    round_ends = np.zeros((options.rounds, 2), np.uint64)  # last iteration's end, per part
    injector = BackgroundInjection(injections, clock, options.rounds * 2 * options.sample_ns
                                   + n * 4 * options.compute_ns, injector_priority())
    interrupted = False
    with _Pinned(cpu, priority), injector:
        for round_number in range(options.rounds):
            if progress:
                progress(round_number, options.rounds)
            world.comm.Barrier()
            sampled = detour_probe.run(context, threshold_ns=options.threshold_ns)
            detours.append(sampled.tables["detours"])
            windows.append(sampled.tables["windows"])
            summaries.extend(sampled.summaries)
            world.comm.Barrier()
            first = round_number * block
            for i in range(first, first + block):
                alone_start[i] = ticks()
                alone_work[i] = work(units, UNIT_ITERATIONS)
            round_ends[round_number, 0] = ticks()
            world.comm.Barrier()
            for i in range(first, first + block):
                bsp_start[i] = ticks()
                bsp_work[i] = work(units, UNIT_ITERATIONS)
                arrived = ticks()
                collective()
                bsp_collective[i] = ticks() - arrived
            round_ends[round_number, 1] = ticks()
            if priority:
                time.sleep(RT_PAUSE_NS / 1e9)
            if sampled.interrupted:
                interrupted = True
                break
    done = (round_number + 1) * block
    return {
        "iterations": _iteration_columns(clock, block, done, alone_start, alone_work, bsp_start,
                                         bsp_work, bsp_collective, round_ends),
        "detours": Table.concat(detours), "windows": Table.concat(windows),
        "detour_summaries": summaries, "interrupted": interrupted,
    }


def _iteration_columns(clock, block, done, alone_start, alone_work, bsp_start, bsp_work,
                       bsp_collective, round_ends) -> dict[str, np.ndarray]:
    """One row per iteration and part: its work, its collective (bsp) and its
    length (from its start to the next one's, or to the end of its block)."""
    parts = []
    for part, starts, work_ticks, collective_ticks in (
            ("alone", alone_start, alone_work, None), ("bsp", bsp_start, bsp_work,
                                                        bsp_collective)):
        start = starts[:done].astype(np.int64)
        following = np.append(start[1:], 0)
        ends = round_ends[:, 0 if part == "alone" else 1].astype(np.int64)
        last = np.arange(block - 1, done, block)
        following[last] = ends[:len(last)]
        parts.append({
            "part": repeated(part, done),
            "iteration": np.arange(done, dtype=np.int32),
            "work_ns": clock.duration_ns(work_ticks[:done]),
            "collective_ns": (clock.duration_ns(collective_ticks[:done]) if collective_ticks
                              is not None else np.zeros(done, np.int64)),
            "iteration_ns": clock.duration_ns(following - start),
        })
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


# -- rank 0: the numbers --------------------------------------------------------------

def bsp_bundle(options: BspOptions, session: Session, units: int, priority: int, *,
               started: str, argv: list[str] | None, facts) -> Bundle:
    records = [session.outcomes[r].record for r in sorted(session.outcomes)
               if session.outcomes[r].status == "ok"]
    size = session.world.size
    rows, iterations, detours, windows, traces = [], [], [], [], []
    for record in records:
        table = Table(record["iterations"])
        alone = table.filter(table["part"] == "alone")
        bsp = table.filter(table["part"] == "bsp")
        fastest = int(alone["iteration_ns"].min())
        trace_bundle = Bundle({"kind": "bsp", "label": f"rank {record['rank']}",
                               "summaries": {"detour": record["detour_summaries"]}},
                              {"detours": record["detours"], "windows": record["windows"]})
        traces.extend(traces_from_bundle(trace_bundle))
        lost = sum(s["lost_ns"] for s in record["detour_summaries"])
        sampled = sum(s["measured_ns"] for s in record["detour_summaries"])
        rows.append({"rank": record["rank"], "node": record["node"], "cpu": record["cpu"],
                     "alone_fastest_ns": fastest,
                     "alone_mean_ns": float(alone["iteration_ns"].mean()),
                     "local_slowdown": float(alone["iteration_ns"].mean()) / fastest - 1,
                     "bsp_mean_ns": float(bsp["iteration_ns"].mean()),
                     "collective_min_ns": int(bsp["collective_ns"].min()),
                     "noise_pct": 100.0 * lost / sampled if sampled else None,
                     "detours_per_s": sum(s["detours"] for s in record["detour_summaries"])
                     / (sampled / 1e9) if sampled else None})
        rank = np.int32(record["rank"])
        iterations.append(_with_rank(table, rank))
        detours.append(_with_rank(record["detours"], rank))
        windows.append(_with_rank(record["windows"], rank))
    compute_ns = max(r["alone_fastest_ns"] for r in rows)
    noise_free = compute_ns + min(r["collective_min_ns"] for r in rows)
    measured = float(np.mean([r["bsp_mean_ns"] for r in rows]))
    local = [r["local_slowdown"] for r in rows]
    prediction = predict(traces, [size], compute_ns=compute_ns, collective=options.collective,
                         iterations=options.iterations, seeds=options.seeds)
    point = prediction.point(size).to_dict()
    result = {"ranks": size, "compute_ns": compute_ns, "noise_free_ns": noise_free,
              "bsp_mean_ns": measured, "measured_slowdown": measured / noise_free - 1,
              "local_slowdown_mean": float(np.mean(local)),
              "local_slowdown_max": float(np.max(local)),
              "predicted_slowdown_mean": point["slowdown_mean"],
              "predicted_slowdown_min": point["slowdown_min"],
              "predicted_slowdown_max": point["slowdown_max"],
              "predicted_analytic_slowdown": point["analytic_slowdown"]}
    notes = [Diagnostic(Code(w["code"]), w["message"]) for w in
             (d.to_dict() for d in prediction.warnings)]
    if options.rt and not priority:
        notes.append(Diagnostic(Code.PRIVILEGES, "SCHED_FIFO not permitted: the ranks ran at "
                                "normal priority"))
    complete = not any(r.get("interrupted") for r in records)
    manifest = new_manifest(
        "bsp", label=options.label, started_utc=started, argv=argv, complete=complete,
        host=facts.to_dict(),
        parameters={**options.to_dict(), "ranks": size, "work_units": units,
                    "unit_iterations": UNIT_ITERATIONS, "priority": priority,
                    "predict": prediction.options.to_dict()},
        summaries={"bsp": [result], "ranks": rows, "prediction": [point]},
        warnings=[d.to_dict() for d in notes], system=rank_findings(records))
    return Bundle(manifest, {"iterations": Table.concat(iterations),
                             "detours": Table.concat(detours), "windows": Table.concat(windows)})


def _with_rank(table: Table, rank: np.int32) -> Table:
    return Table({"rank": np.full(table.rows, rank, np.int32), **dict(table.items())})

