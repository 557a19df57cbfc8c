"""predict(): simulate P processes computing and synchronizing under measured noise.

The bulk-synchronous model: every process computes for W, then joins a
collective; this repeats for a number of iterations. Each process's clock runs
on its own (a late process delays only those that wait for its messages),
exactly as in LogGOPSim; the run ends when the last process is done. The same
run without noise gives the reference; several seeds (offsets into the
traces) give the spread; the order-statistics estimate runs beside it where its
assumptions allow (no_estimate).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from ...bundle import Bundle
from ...diagnostics import Diagnostic
from ...errors import UsageError, option
from ...manifest import new_manifest, utc_now
from ...units import MAX_DURATION_NS, format_duration
from .loggp import COLLECTIVES, LogGP, SimulatedMachine, make_collective
from .orderstats import (
    DELAY_SAMPLES,
    Knee,
    expected_maximum,
    knees,
    processes_per_trace,
    spread_offsets,
    window_delays,
)
from .replay import NoiseReplay
from .traces import NoiseTrace, load_noise

MAX_PROCS = 1 << 24  # about 0.7 GB of per-process state (docs/benchmarks.md)
MAX_MESSAGE_BYTES = 1 << 40
MAX_SEEDS = 1000  # the spread over seeds is settled long before
Progress = Callable[[int, int, int], None]  # processes, seed number (1-based), seeds


@dataclass(frozen=True)
class PredictOptions:
    procs: tuple[int, ...]
    compute_ns: int = 1_000_000
    collective: str = "allreduce"
    message_bytes: int = 8
    iterations: int = 20
    sync_noise: bool = False
    seeds: int = 5
    seed: int = 1
    loggp: LogGP = field(default_factory=LogGP)

    def check(self) -> None:
        if not self.procs:
            raise UsageError("no process counts given", f"e.g. {option('procs', '1k,16k,1M')}")
        small = [p for p in self.procs if p < 2]
        if small:
            raise UsageError(f"process count {small[0]} is too small: a parallel run needs at "
                             f"least 2 processes", f"e.g. {option('procs', '2,1k,1M')}")
        if max(self.procs) > MAX_PROCS:
            raise UsageError(f"{max(self.procs)} processes would need more memory than this "
                             f"simulator allows", f"use at most {MAX_PROCS} (16M) processes")
        if self.compute_ns < 0:
            raise UsageError(f"compute time {self.compute_ns} ns is negative",
                             f"give {option('compute_ns', '0')} or more, e.g. 1ms")
        if self.collective not in COLLECTIVES:
            raise UsageError(f"unknown collective {self.collective!r}",
                             f"choose from {', '.join(COLLECTIVES)}")
        if not 1 <= self.message_bytes <= MAX_MESSAGE_BYTES:
            raise UsageError(f"message size {self.message_bytes} B is out of range",
                             f"give {option('message_bytes', '1')} to {MAX_MESSAGE_BYTES} (1 TiB)")
        for name, value in (("iterations", self.iterations), ("seeds", self.seeds)):
            if value < 1:
                raise UsageError(f"{name} must be at least 1, got {value}",
                                 f"e.g. {option(name, '5')}")
        if self.seeds > MAX_SEEDS:
            raise UsageError(f"{option('seeds', str(self.seeds))} is too many: each simulates every "
                             f"process "
                             f"count again", f"give at most {MAX_SEEDS}")
        if self.seed < 0:
            raise UsageError(f"seed must be 0 or more, got {self.seed}", f"e.g. {option('seed', '1')}")
        if self.longest_run_ns() > MAX_DURATION_NS:
            raise UsageError(f"the simulated run would last longer than 366 days "
                             f"({option('iterations')} times {option('compute_ns')} and the "
                             f"messages of a collective)",
                             f"give fewer {option('iterations')}, a shorter {option('compute_ns')} "
                             f"or smaller {option('message_bytes')}")
        if self.compute_ns == 0 and self.collective == "none":
            raise UsageError("nothing to simulate: no compute time and no collective",
                             f"give {option('compute_ns')} or a {option('collective')}")

    def longest_run_ns(self) -> int:
        """An upper bound of the noise-free run time: every round of the largest
        collective (at most 2 log2 P + 2 rounds) paying every LogGP cost in full."""
        rounds = 2 * max(self.procs).bit_length() + 2
        message = (self.loggp.latency_ns + 2 * self.loggp.overhead_ns + self.loggp.gap_ns
                   + self.loggp.transfer_ns(self.message_bytes))
        return self.iterations * (self.compute_ns + rounds * message)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["procs"] = list(self.procs)
        data["loggp"] = self.loggp.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> PredictOptions:
        return cls(**{**data, "procs": tuple(data["procs"]),
                      "loggp": LogGP.from_dict(data["loggp"])})


@dataclass(frozen=True)
class ScalePoint:
    """The prediction at one process count."""

    procs: int
    noise_free_ns: int
    runtimes_ns: tuple[int, ...]  # one per seed
    analytic_ns: float | None  # None without a compute window to estimate from

    @property
    def slowdowns(self) -> np.ndarray:
        """Run time with noise over run time without, minus one (0.05 = 5% slower)."""
        return np.array(self.runtimes_ns) / self.noise_free_ns - 1.0

    @property
    def analytic_slowdown(self) -> float | None:
        return None if self.analytic_ns is None else self.analytic_ns / self.noise_free_ns - 1.0

    def to_dict(self) -> dict:
        s = self.slowdowns
        runtimes = np.array(self.runtimes_ns)
        return {
            "procs": self.procs,
            "noise_free_ns": self.noise_free_ns,
            "runtimes_ns": list(self.runtimes_ns),
            "runtime_mean_ns": float(runtimes.mean()),
            "runtime_min_ns": int(runtimes.min()),
            "runtime_max_ns": int(runtimes.max()),
            "slowdown_mean": float(s.mean()),
            "slowdown_min": float(s.min()),
            "slowdown_max": float(s.max()),
            "analytic_ns": self.analytic_ns,
            "analytic_slowdown": self.analytic_slowdown,
        }

    @classmethod
    def from_dict(cls, data: dict) -> ScalePoint:
        return cls(data["procs"], data["noise_free_ns"], tuple(data["runtimes_ns"]),
                   data["analytic_ns"])


@dataclass(frozen=True)
class Prediction:
    options: PredictOptions
    sources: tuple[dict, ...]  # NoiseTrace.describe() of each trace
    points: tuple[ScalePoint, ...]
    knees: tuple[Knee, ...]
    warnings: tuple[Diagnostic, ...] = ()
    complete: bool = True
    simulated_seconds: float = 0.0  # wall time the simulations took
    source: str | None = None  # the SOURCE the traces came from, if given as text

    def point(self, procs: int) -> ScalePoint:
        return next(p for p in self.points if p.procs == procs)

    def to_dict(self) -> dict:
        return {
            "options": self.options.to_dict(),
            "source": self.source,
            "sources": list(self.sources),
            "points": [p.to_dict() for p in self.points],
            "knees": [k.to_dict() for k in self.knees],
            "warnings": [w.to_dict() for w in self.warnings],
            "complete": self.complete,
            "simulated_seconds": self.simulated_seconds,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Prediction:
        return cls(PredictOptions.from_dict(data["options"]), tuple(data["sources"]),
                   tuple(ScalePoint.from_dict(p) for p in data["points"]),
                   tuple(Knee.from_dict(k) for k in data["knees"]),
                   tuple(Diagnostic.from_dict(w) for w in data["warnings"]), data["complete"],
                   data.get("simulated_seconds", 0.0), data.get("source"))

    def to_bundle(self, *, argv: list[str] | None = None, started_utc: str | None = None
                  ) -> Bundle:
        """A bundle of kind 'prediction': the options and source in `parameters`, the
        results in `summaries` (prediction: one row per process count; knees;
        noise_sources); no tables."""
        manifest = new_manifest(
            "prediction", label=None, started_utc=started_utc or utc_now(), argv=argv,
            complete=self.complete,
            parameters={**self.options.to_dict(), "source": self.source,
                        "simulated_seconds": self.simulated_seconds},
            summaries={"prediction": [p.to_dict() for p in self.points],
                       "knees": [k.to_dict() for k in self.knees],
                       "noise_sources": list(self.sources)},
            warnings=[w.to_dict() for w in self.warnings])
        return Bundle(manifest)

    @classmethod
    def from_bundle(cls, bundle: Bundle) -> Prediction:
        if bundle.kind != "prediction":
            raise UsageError(f"bundle {bundle.name} holds a {bundle.kind}, not a prediction",
                             "give a bundle written by 'noisescope predict -o'")
        parameters = dict(bundle.parameters)
        source = parameters.pop("source", None)
        seconds = parameters.pop("simulated_seconds", 0.0)
        summaries = bundle.summaries
        return cls.from_dict({"options": parameters, "source": source,
                              "sources": summaries["noise_sources"],
                              "points": summaries["prediction"], "knees": summaries["knees"],
                              "warnings": bundle.manifest["warnings"],
                              "complete": bundle.complete, "simulated_seconds": seconds})


def simulate(procs: int, options: PredictOptions, traces: list[NoiseTrace],
             rng: np.random.Generator | None = None) -> int:
    """One run: the time (ns) at which the last of `procs` processes finishes.
    Without traces the run is noise-free."""
    collective = make_collective(options.collective, options.message_bytes)
    noise = None
    if traces:
        trace_of = (collective.slot_ranks(procs) % len(traces) if len(traces) > 1
                    else np.zeros(procs, np.int8))  # one trace: every rank replays it
        noise = NoiseReplay(traces, trace_of, rng or np.random.default_rng(options.seed),
                            synchronized=options.sync_noise)
    machine = SimulatedMachine(procs, options.loggp, noise)
    for _ in range(options.iterations):
        if options.compute_ns:
            machine.compute(options.compute_ns)
        collective.run(machine)
    return int(machine.ready.max())


def delay_samples(traces: list[NoiseTrace], options: PredictOptions) -> list[np.ndarray]:
    """Per trace, the delays of one compute window (of the whole run without a
    collective) at evenly spread offsets: what the estimate's order statistics use."""
    window = options.compute_ns * (options.iterations if options.collective == "none" else 1)
    offsets = spread_offsets(max(t.span_ns for t in traces), DELAY_SAMPLES,
                             np.random.default_rng([options.seed, 0]))
    return window_delays(traces, window, offsets)


ESTIMATE_ASSUMES = ("estimate: noise-free time + per step the expected largest delay of one "
                    "compute window among P processes; it leaves out noise in the collective and "
                    "the rest of detours processes resume into after waiting (the simulation "
                    "adds them, less what latency slack absorbs)")


def no_estimate(options: PredictOptions, longest_ns: int | None) -> str | None:
    """Why the order-statistics estimate is not given (None: it is). It charges each
    detour to the window it starts in: wrong, not just rough, when processes wait
    for each other and detours outlast a compute window (a process that waited
    resumes inside one, again and again); co-scheduled noise makes nobody wait."""
    if options.compute_ns == 0:
        return "no estimate without a compute window: it covers only the compute phase"
    if (options.collective != "none" and not options.sync_noise and longest_ns is not None
            and longest_ns >= options.compute_ns):
        return (f"no estimate: detours up to {format_duration(longest_ns)} outlast the "
                f"{format_duration(options.compute_ns)} compute window, and processes that "
                f"waited resume inside them, which only the simulation charges")
    return None


def analytic_runtime(procs: int, options: PredictOptions, noise_free_ns: int,
                     delays: list[np.ndarray]) -> float | None:
    """Order-statistics estimate: each step costs its noise-free time plus the expected
    largest per-window delay among the processes (the whole run is one window when
    there is no collective to synchronize them). None where no_estimate() says why."""
    if not delays:
        return None
    counts = processes_per_trace(procs, len(delays))
    if options.sync_noise:
        used = [d for d, n in zip(delays, counts, strict=True) if n]
        slowest = float(np.max(used, axis=0).mean())  # everyone draws the same offset
    else:
        slowest = expected_maximum(delays, counts)
    steps = 1 if options.collective == "none" else options.iterations
    return noise_free_ns + steps * slowest


def predict(noise: str | list[NoiseTrace], procs, compute_ns: int = 1_000_000,
            collective: str = "allreduce", *, message_bytes: int = 8, iterations: int = 20,
            sync_noise: bool = False, seeds: int = 5, seed: int = 1, loggp: LogGP | None = None,
            progress: Progress | None = None) -> Prediction:
    """Predict run time and slowdown at each process count in `procs`.

    noise: a list of NoiseTrace (rank r replays trace r mod len), or a SOURCE string
    as the CLI takes it (bundle directory, trace file, synthetic spec).
    A KeyboardInterrupt ends the run early; the Prediction then holds the process
    counts finished so far and says complete=False.
    """
    options = PredictOptions(tuple(sorted(set(int(p) for p in np.atleast_1d(procs)))),
                             int(compute_ns), collective, int(message_bytes), int(iterations),
                             bool(sync_noise), int(seeds), int(seed), loggp or LogGP())
    options.check()
    traces = load_noise(noise, seed=seed) if isinstance(noise, str) else list(noise)
    if not traces:
        raise UsageError("no noise traces given", "give a bundle, a trace file or a noise spec")
    longest = max((int(t.durations_ns.max()) for t in traces if t.detours), default=None)
    delays = [] if no_estimate(options, longest) else delay_samples(traces, options)
    points: list[ScalePoint] = []
    began = time.perf_counter()
    complete = True
    try:
        for count in options.procs:
            noise_free = simulate(count, options, [])
            runtimes = []
            for number in range(options.seeds):
                if progress:
                    progress(count, number + 1, options.seeds)
                rng = np.random.default_rng([seed, count, number])
                runtimes.append(simulate(count, options, traces, rng))
            points.append(ScalePoint(count, noise_free, tuple(runtimes),
                                     analytic_runtime(count, options, noise_free, delays)))
    except KeyboardInterrupt:
        complete = False
    return Prediction(options, tuple(t.describe() for t in traces), tuple(points),
                      tuple(knees(traces, options.compute_ns)),
                      tuple(d for t in traces for d in t.diagnostics), complete,
                      time.perf_counter() - began, noise if isinstance(noise, str) else None)
