"""A synthetic fleet with planted outliers: each node's scan bundle and the rank record
it sends rank 0 (the form cluster/scan.py's `rank_record` makes), from detour traces
generated per CPU. Used by tests/unit/test_fleet_outliers.py and bench/fleet_scale.py.

Every node: a 250 Hz tick (~2.5 us, its length varying a little from node to node)
and kworker wake-ups (10/s, 15-40 us) on each measured CPU. Planted:
- `noisy` nodes: an interrupt storm, 1 kHz x 15 us on every CPU (+1.5 points of
  noise, 1,000 interrupts/s of `45 eth0-rx-3` where the others have a few);
- the `daemon` node: a daemon waking 30 times a second for 200-400 us (a rate in the
  100us-1ms band that no other node has);
- the `other_kernel` node: a different kernel_release, and nothing else different.
The background is chosen so that no figure sits near an outlier threshold by chance
(the kworkers are 4% of the detours, so every node's p99 is a kworker's length).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from noisescope.analysis import fleet
from noisescope.analysis.spectrum import lost_time_series
from noisescope.bundle import Bundle
from noisescope.cluster.mpi import RankPlacement
from noisescope.cluster.scan import fleet_bundle, rank_directory
from noisescope.cluster.session import RankOutcome
from noisescope.diagnostics import Code, Diagnostic
from noisescope.host import read_host_facts
from noisescope.manifest import new_manifest
from noisescope.probes.summary import detour_summary, ftq_summary, fwq_summary
from noisescope.scan import ScanOptions
from noisescope.system import check_system
from noisescope.tables import Table

HOST_ROOT = Path(__file__).parent / "fixtures" / "hosts" / "tuned-node"
CPUS = (2, 3, 4, 5)  # isolated CPUs of the tuned-node fixture
PROBES = ("detour", "ftq", "fwq")
SECOND = 1_000_000_000
QUANTUM_NS = 1_000_000
PROBE_GAP_NS = 500_000_000  # between one probe's windows and the next (cluster scan's gap)
TICKS_PER_NS = 2.0
OTHER_KERNEL = "6.6.31-rt31"
STORM_IRQ = "45 eth0-rx-3"


@dataclass(frozen=True)
class Planted:
    nodes: int
    noisy: tuple[int, ...]
    daemon: int
    other_kernel: int

    @classmethod
    def spread(cls, nodes: int, noisy: int = 5) -> Planted:
        """The planted nodes spread over the fleet (ranks chosen by a fixed stride)."""
        picks = [(7 + 613 * i) % nodes for i in range(noisy + 2)]
        if len(set(picks)) < noisy + 2:
            raise ValueError(f"{nodes} nodes are too few for {noisy} noisy nodes and two others")
        return cls(nodes, tuple(sorted(picks[:noisy])), picks[noisy], picks[noisy + 1])

    @property
    def noise_outliers(self) -> set[int]:
        return {*self.noisy, self.daemon}


def node_name(rank: int) -> str:
    return f"node{rank:05d}"


def _pulses(rng, rate_hz: float, low_ns: float, high_ns: float, total_ns: int):
    # A fixed count at random times: a Poisson count would put the kworker band of a
    # short scan above twice the others' median by chance.
    count = round(rate_hz * total_ns / SECOND)
    return (np.sort(rng.integers(0, total_ns - 500_000, count)),
            rng.uniform(low_ns, high_ns, count).astype(np.int64))


def _cpu_detours(rng, rank: int, planted: Planted, scale: float, total_ns: int):
    tick = np.arange(rng.uniform(0, 4e6), total_ns - 500_000, 4e6).astype(np.int64)
    parts = [(tick, rng.normal(2_500 * scale, 200, len(tick)).clip(1_100).astype(np.int64)),
             _pulses(rng, 10, 15_000, 40_000, total_ns)]
    if rank in planted.noisy:
        parts.append(_pulses(rng, 1_000, 14_000, 16_000, total_ns))
    if rank == planted.daemon:
        parts.append(_pulses(rng, 30, 200_000, 400_000, total_ns))
    starts = np.concatenate([p[0] for p in parts])
    order = np.argsort(starts, kind="stable")
    starts, durations = starts[order], np.concatenate([p[1] for p in parts])[order]
    overlap = np.r_[False, starts[1:] < (starts + durations)[:-1]]  # measured detours are disjoint
    return starts[~overlap], durations[~overlap]


def _gap_histogram(cpu: int, durations: np.ndarray, iterations: int) -> Table:
    """The native loop's histogram of gaps (log2 bins of ticks): the detours, and every
    other iteration in the first bin."""
    bins = np.bincount(np.log2(durations * TICKS_PER_NS).astype(np.int64), minlength=64)[:64]
    bins[0] += iterations - len(durations)
    lower = 2 ** np.arange(64, dtype=np.uint64)
    upper = np.append(lower[1:], np.uint64(2**64 - 1))
    return Table({"cpu": np.full(64, cpu, np.int32), "lower_ticks": lower, "upper_ticks": upper,
                  "lower_ns": (lower / TICKS_PER_NS).astype(np.int64),
                  "upper_ns": np.minimum(upper / TICKS_PER_NS, 2**62).astype(np.int64),
                  "count": bins})


def node(rank: int, planted: Planted, facts: dict, findings: list[dict],
         total_ns: int) -> tuple[Bundle, dict]:
    """One node's scan bundle (in memory) and its rank record."""
    rng = np.random.default_rng(rank)
    scale = rng.lognormal(0, 0.1)  # how this node's tick handler differs from the others'
    name = node_name(rank)
    host = {**facts, "hostname": name}
    if rank == planted.other_kernel:
        host["kernel_release"] = OTHER_KERNEL
    tables: dict[str, list[Table]] = {t: [] for t in ("detours", "ftq", "fwq", "gap_histogram",
                                                      "windows")}
    summaries: dict[str, list[dict]] = {p: [] for p in PROBES}
    for cpu in CPUS:
        starts, durations = _cpu_detours(rng, rank, planted, scale, total_ns)
        lost = lost_time_series(starts, durations, 0, total_ns, QUANTUM_NS)
        work = np.rint(33_000 * (1 - lost) - rng.exponential(30, len(lost))).astype(np.int64)
        fwq_ns = (QUANTUM_NS / (1 - lost.clip(max=0.9)) + rng.exponential(500, len(lost)))
        stats = {"cpu": cpu, "windows": 1, "measured_ns": total_ns, "run_delay_ns": 0,
                 "involuntary_switches": 0, "minor_faults": 0, "major_faults": 0}
        iterations = total_ns // 20
        native = {"lost_ticks": int(durations.sum() * TICKS_PER_NS), "detours": len(durations),
                  "stored": len(durations), "overflow": 0, "stored_before_loss": len(durations),
                  "max_gap_ticks": int(durations.max() * TICKS_PER_NS),
                  "resolution_ticks": 40, "hourglass_gaps": len(durations)}
        histogram = _gap_histogram(cpu, durations, iterations)
        summaries["detour"].append(detour_summary(stats, native, durations, histogram, 1_000,
                                                  1_000, TICKS_PER_NS))
        summaries["ftq"].append(ftq_summary(stats, work))
        summaries["fwq"].append(fwq_summary(stats, fwq_ns.astype(np.int64)))
        tables["detours"].append(Table({"cpu": np.full(len(starts), cpu, np.int32),
                                        "start_ns": starts, "duration_ns": durations}))
        tables["ftq"].append(Table({"cpu": np.full(len(work), cpu, np.int32),
                                    "start_ns": np.arange(len(work), dtype=np.int64) * QUANTUM_NS,
                                    "work": work}))
        tables["fwq"].append(Table({"cpu": np.full(len(fwq_ns), cpu, np.int32),
                                    "start_ns": np.cumsum(fwq_ns).astype(np.int64),
                                    "duration_ns": fwq_ns.astype(np.int64)}))
        tables["gap_histogram"].append(histogram)
    # Each probe's window on every CPU, started within ~50 us of the agreed moment.
    probe_starts = np.arange(len(PROBES), dtype=np.int64) * (total_ns + PROBE_GAP_NS)
    begin = probe_starts.repeat(len(CPUS)) + rng.normal(0, 50_000, len(probe_starts) * len(CPUS))
    windows = Table({"cpu": np.tile(np.array(CPUS, np.int32), len(PROBES)),
                     "probe": np.repeat(np.array(PROBES, object), len(CPUS)),
                     "start_ns": begin.astype(np.int64), "end_ns": (begin + total_ns).astype(np.int64)})
    placement = RankPlacement(rank, planted.nodes, name, 0, 1, CPUS, (CPUS,))
    bundle_path = rank_directory(Path("."), placement)
    warnings = [Diagnostic(Code.CPU_NOT_ISOLATED, "CPUs 2-5 share their cores' timer "
                           "tick with the rest of the node").to_dict()]
    manifest = new_manifest(
        "scan", label=None, started_utc="2026-01-01T00:00:00.000000Z",
        finished_utc="2026-01-01T00:00:05.000000Z", complete=True,
        argv=["noisescope", "cluster", "scan"], host=host,
        clock={"counter": "tsc", "ticks_per_second": TICKS_PER_NS * 1e9,
               "frequency_source": "kernel", "calibrated_ticks_per_second": None,
               "origin_ticks": 0, "origin_monotonic_raw_ns": 0, "origin_realtime_ns": 0},
        parameters={"cpus": list(CPUS), "duration_ns": total_ns, "probes": list(PROBES),
                    "threshold_ns": 1_000, "priority": 0, "quantum_ns": QUANTUM_NS,
                    "injections": []},
        summaries=summaries, warnings=warnings, system=findings,
        cluster={**placement.to_dict(), "start_mono_ns": 0, "fleet": "../.."})
    all_tables = {name: Table.concat(parts) for name, parts in tables.items()}
    bundle = Bundle(manifest, all_tables)
    interrupts = {"LOC": 250.0 * len(CPUS) * rng.normal(1, 0.01),
                  STORM_IRQ: (1_000.0 if rank in planted.noisy else 2.0) * len(CPUS)}
    record = {
        "rank": rank, "node": name, "local_rank": 0, "cpus": list(CPUS), "failure": None,
        "complete": True, "bundle": str(bundle_path), "host": host, "privileges": {},
        "summaries": summaries, "warnings": warnings, "system": findings,
        "figures": fleet.node_figures(summaries),
        "bands": fleet.band_rates(all_tables["detours"]["duration_ns"], total_ns * len(CPUS)),
        "interrupts_per_s": interrupts,
        "windows": {"rank": np.full(windows.rows, rank, np.int32), "cpu": windows["cpu"],
                    "probe": windows["probe"], "window": np.zeros(windows.rows, np.int32),
                    "start_ns": windows["start_ns"], "end_ns": windows["end_ns"]},
    }
    return bundle, record


def fleet_of(planted: Planted, records: list[dict], measured_ns: int,
             label: str = "synthetic fleet") -> Bundle:
    """The fleet bundle (in memory) rank 0 of `cluster scan` makes of these records."""
    outcomes = {r["rank"]: RankOutcome(r["rank"], "ok", hello={"node": r["node"],
                                                               "cpus": r["cpus"]}, record=r)
                for r in records}
    session = SimpleNamespace(outcomes=outcomes, interrupted=False, start_ns=0,
                              world=SimpleNamespace(size=planted.nodes))
    options = ScanOptions(cpus=CPUS, duration_ns=measured_ns, probes=PROBES, label=label)
    return fleet_bundle(options, session, started="2026-01-01T00:00:00.000000Z",
                        argv=["noisescope", "cluster", "scan"], timeout_ns=60 * SECOND,
                        inject_ranks=None)


def fleet_nodes(planted: Planted, total_ns: int = SECOND,
                ranks: range | None = None) -> Iterator[tuple[Bundle, dict]]:
    """Each node's (bundle, record), rank by rank (one node's tables in memory at a time):
    every node of the fleet, or those of `ranks`."""
    facts = read_host_facts(HOST_ROOT)
    findings = check_system(str(HOST_ROOT), CPUS, facts).to_list()
    host = facts.to_dict()
    for rank in ranks if ranks is not None else range(planted.nodes):
        yield node(rank, planted, host, findings, total_ns)


SMALL = Planted.spread(3, noisy=1)  # tests/fixtures/bundles/fleet-*: a node of each kind
SMALL_NS = 50_000_000


def small_fleet() -> Bundle:
    """The fleet bundle (in memory) of SMALL's nodes, 50 ms per probe."""
    return fleet_of(SMALL, [record for _, record in fleet_nodes(SMALL, SMALL_NS)], SMALL_NS,
                    label="small fleet")
