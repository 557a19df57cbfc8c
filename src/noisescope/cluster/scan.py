"""`noisescope cluster scan`: the same scan on every rank, aligned, and one fleet bundle.

Output directory (on a shared file system, so that rank 0 sees every node's
bundle; otherwise each node keeps its own under the same path):

    DIR/manifest.json, *.parquet          the fleet bundle (kind "fleet"), by rank 0
    DIR/nodes/rank0000-NODE/               each rank's own scan bundle

The fleet bundle keeps its rows per rank and per CPU in tables (a manifest of
10,000 ranks' rows would be 100 MB of JSON): `summary_ranks` (one row per rank:
status, node, CPUs, clock offset, its noise figures), `summary_detour`,
`summary_ftq`, ... (the per-CPU summaries of every probe with `rank` and `node`
added) and `system_findings` (every rank's `system show` findings); a loaded
bundle's `summaries` and `system` give them back as rows. Its manifest's
summaries: `fleet` (how many ranks, measured, nodes), `distribution` (each rank
figure over the ranks), `alignment` (per probe, when the ranks' first windows
began on the fleet timeline) and `differences` (what sets nodes apart: the
outliers). Its `windows` table holds every rank's windows on the fleet timeline:
nanoseconds from the agreed start of the first probe, in rank 0's clock.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .. import _native
from ..analysis import fleet
from ..bundle import FINDINGS_TABLE, SUMMARY_TABLE, Bundle, check_destination
from ..diagnostics import Code, Diagnostic
from ..errors import UsageError
from ..host import live_host_facts, read_interrupts
from ..manifest import new_manifest, utc_now
from ..probes import PROBES
from ..scan import ScanOptions, scan
from ..tables import Table
from ..units import format_duration
from .cpus import assign_cpus, own_injections
from .mpi import RankPlacement, World
from .session import DEFAULT_TIMEOUT_NS, Session, rank_findings, start_up

NODES = "nodes"
ALIGNMENT_TOLERANCE_NS = 1_000_000


@dataclass
class RankRun:
    """What one rank ends with: its own bundle (if it measured), why it failed
    (if it did), and on rank 0 the fleet bundle."""

    rank: int
    bundle: Bundle | None
    failure: str | None
    fleet: Bundle | None = None


def prepare_directory(directory: Path) -> None:
    check_destination(directory)
    (directory / NODES).mkdir(parents=True, exist_ok=True)


def rank_directory(directory: Path, placement: RankPlacement) -> Path:
    width = max(4, len(str(placement.size - 1)))
    node = re.sub(r"[^A-Za-z0-9_.-]", "_", placement.node) or "node"
    return directory / NODES / f"rank{placement.rank:0{width}d}-{node}"


def cluster_scan(options: ScanOptions, directory: str | os.PathLike[str], *,
                 timeout_ns: int = DEFAULT_TIMEOUT_NS, inject_ranks: tuple[int, ...] | None = None,
                 argv: list[str] | None = None, progress=None, world: World | None = None,
                 on_fleet: Callable[[Bundle], None] | None = None) -> RankRun:
    """Run on every rank (all ranks call it with the same arguments). On rank 0,
    `on_fleet` gets the written fleet bundle before the job ends (if a rank never
    answered, rank 0 then ends the whole job)."""
    world = world or World()
    directory = Path(directory)
    started = utc_now()
    placement = start_up(world, options.cpus, lambda: prepare_directory(directory))
    session = Session(world, timeout_ns)
    destination = rank_directory(directory, placement)
    hello = {"node": placement.node, "local_rank": placement.local_rank, "cpus": []}
    marks: dict[str, object] = {}
    bundle, failure, crash = None, None, None

    def on_ready() -> int:
        marks["interrupts"], marks["begun"] = read_interrupts(), time.monotonic_ns()
        return session.ready(hello)

    try:
        cpus = assign_cpus(placement)
        hello["cpus"] = list(cpus)
        # Measuring tracing's own cost would push the first probe off the agreed
        # start, so aligned scans go without it.
        mine = replace(options, cpus=cpus,
                       injections=own_injections(options.injections, cpus, placement.rank,
                                                 inject_ranks),
                       trace=replace(options.trace, cost_ns=0))
        destination.parent.mkdir(parents=True, exist_ok=True)  # a node without the shared DIR
        check_destination(destination)
        bundle = scan(mine, facts=live_host_facts(), argv=argv,
                      progress=progress if world.is_root else None, on_ready=on_ready)
        bundle.manifest["cluster"] = {**placement.to_dict(), "start_mono_ns": session.start_ns,
                                      "fleet": "../.."}
        bundle.write(destination)
    except UsageError as error:
        failure = str(error)
    except Exception as error:  # a bug: report it to rank 0 first, then raise it
        failure, crash = f"internal error: {type(error).__name__}: {error}", error
    if not session.said_hello:
        session.ready(hello, failure)
    record = {"rank": placement.rank, "node": placement.node, "failure": failure}
    if bundle is not None and failure is None:
        record = rank_record(placement, bundle, directory, session.start_ns, marks)
    session.report(record)
    run = RankRun(placement.rank, bundle if failure is None else None, failure)
    if world.is_root:
        run.fleet = fleet_bundle(options, session, started=started, argv=argv,
                                 timeout_ns=timeout_ns, inject_ranks=inject_ranks)
        run.fleet.write_into(directory)
        if on_fleet:
            on_fleet(run.fleet)
    session.close()
    if crash is not None:
        raise crash
    return run


# -- what a rank sends rank 0 ---------------------------------------------------------

def rank_record(placement: RankPlacement, bundle: Bundle, directory: Path, start_ns: int,
                marks: dict) -> dict:
    summaries = bundle.summaries
    elapsed_s = (time.monotonic_ns() - marks["begun"]) / 1e9
    detour_ns = sum(s["measured_ns"] for s in summaries.get("detour", []))
    return {
        "rank": placement.rank,
        "node": placement.node,
        "local_rank": placement.local_rank,
        "cpus": bundle.parameters["cpus"],
        "failure": None,
        "complete": bundle.complete,
        "bundle": str(bundle.path.relative_to(directory)) if bundle.path else None,
        "host": bundle.manifest["host"],
        "privileges": bundle.manifest.get("privileges", {}),
        "summaries": summaries,
        "warnings": bundle.manifest["warnings"],
        "system": bundle.system,
        "figures": fleet.node_figures(summaries),
        "bands": (fleet.band_rates(bundle.detours.duration_ns, detour_ns)
                  if "detour" in summaries else {}),
        "interrupts_per_s": interrupt_rates(marks["interrupts"], read_interrupts(),
                                            bundle.parameters["cpus"], elapsed_s),
        "windows": fleet_windows(bundle, placement.rank, start_ns),
    }


def interrupt_rates(before, after, cpus, elapsed_s: float) -> dict[str, float]:
    """Interrupts per second on `cpus` during the scan, per source ('LOC', '24 eth0-rx')."""
    rates = {}
    for source, per_cpu in after.delta(before).items():
        count = sum(per_cpu.get(c, 0) for c in cpus)
        if count and elapsed_s > 0:
            words = after.descriptions.get(source, "").split()
            name = f"{source} {words[-1]}" if source.isdigit() and words else source
            rates[name] = count / elapsed_s
    return rates


def fleet_windows(bundle: Bundle, rank: int, start_ns: int) -> dict[str, np.ndarray]:
    """The bundle's windows on the fleet timeline: ns from this rank's agreed start
    (its CLOCK_MONOTONIC time for the fleet's time zero)."""
    windows = bundle.windows
    clock = bundle.clock
    # CLOCK_MONOTONIC at the clock's origin, from a fresh (ticks, monotonic) pair.
    ticks, mono = _native.ticks(), time.monotonic_ns()
    origin_mono = mono - round((ticks - clock.origin_ticks) / clock.ticks_per_ns)
    shift = origin_mono - start_ns
    probes = np.unique(windows["probe"].astype(str), return_inverse=True)[1]
    order = np.lexsort((windows["start_ns"], windows["cpu"], probes))
    probe, cpu = windows["probe"][order], windows["cpu"][order]
    new_group = np.ones(len(order), bool)
    new_group[1:] = (probes[order][1:] != probes[order][:-1]) | (cpu[1:] != cpu[:-1])
    group_start = np.flatnonzero(new_group)
    index = np.arange(len(order)) - np.repeat(group_start, np.diff(np.append(group_start,
                                                                             len(order))))
    return {"rank": np.full(len(order), rank, np.int32), "cpu": cpu, "probe": probe,
            "window": index.astype(np.int32),
            "start_ns": windows["start_ns"][order] + shift,
            "end_ns": windows["end_ns"][order] + shift}


# -- rank 0: the fleet bundle ---------------------------------------------------------

def fleet_bundle(options: ScanOptions, session: Session, *, started: str,
                 argv: list[str] | None, timeout_ns: int,
                 inject_ranks: tuple[int, ...] | None) -> Bundle:
    outcomes = [session.outcomes[r] for r in sorted(session.outcomes)]
    records = [o.record for o in outcomes if o.status == "ok" and o.record]
    rows = []
    for outcome in outcomes:
        record = outcome.record or {}
        rows.append({**outcome.to_dict(),
                     "node": record.get("node") or (outcome.hello or {}).get("node"),
                     "cpus": record.get("cpus") or (outcome.hello or {}).get("cpus") or [],
                     "bundle": record.get("bundle"), "complete": record.get("complete"),
                     **record.get("figures", {}),
                     **{f"host_{key}": (record.get("host") or {}).get(key)
                        for key in fleet.HOST_KEYS}})
    # The rows per rank and per CPU go into tables (summary_ranks, summary_detour, ...;
    # 10,000 ranks' are too many for JSON); the manifest keeps what is about the fleet.
    tables = {SUMMARY_TABLE + "ranks": Table.from_rows(rows)}
    for probe in PROBES:  # the per-CPU summaries of every rank, by probe
        per_cpu = [{**s, "rank": r["rank"], "node": r["node"]}
                   for r in records for s in r["summaries"].get(probe, [])]
        if per_cpu:
            tables[SUMMARY_TABLE + probe] = Table.from_rows(per_cpu)
    findings = rank_findings(records)
    if findings:
        tables[FINDINGS_TABLE] = Table.from_rows(findings)
    windows = Table.concat(Table(r["windows"]) for r in records)
    if windows.rows:
        tables["windows"] = windows
    summaries = {"fleet": [fleet.counts(rows)], "distribution": fleet.distribution(rows),
                 "alignment": fleet.alignment(windows),
                 "differences": fleet.differences(records)}
    complete = not session.interrupted and all(r.get("complete") for r in records)
    manifest = new_manifest(
        "fleet", label=options.label, started_utc=started, argv=argv, complete=complete,
        parameters={**options.to_dict(), "ranks": session.world.size, "timeout_ns": timeout_ns,
                    "inject_ranks": list(inject_ranks) if inject_ranks is not None else None,
                    "start_utc": _utc_of_monotonic(session.start_ns),
                    "alignment_tolerance_ns": ALIGNMENT_TOLERANCE_NS},
        summaries=summaries,
        warnings=[d.to_dict() for d in fleet_diagnostics(outcomes, records,
                                                         summaries["alignment"])])
    return Bundle(manifest, tables)


def _utc_of_monotonic(mono_ns: int) -> str | None:
    if not mono_ns:
        return None
    from datetime import datetime, timezone

    wall = time.time_ns() + (mono_ns - time.monotonic_ns())
    return datetime.fromtimestamp(wall / 1e9, timezone.utc).isoformat(
        timespec="microseconds").replace("+00:00", "Z")


def fleet_diagnostics(outcomes, records: list[dict], alignment: list[dict]) -> list[Diagnostic]:
    notes = [Diagnostic(Code.RANK_MISSING, f"rank {o.rank}"
                        f"{' (' + o.hello['node'] + ')' if o.hello else ''} {o.status}: {o.reason}")
             for o in outcomes if o.status != "ok"]
    for a in alignment:
        if a["spread_ns"] > ALIGNMENT_TOLERANCE_NS:
            notes.append(Diagnostic(Code.MISALIGNED, f"{a['probe']}: the ranks' first windows "
                                    f"began up to {format_duration(a['spread_ns'])} apart "
                                    f"(tolerance {format_duration(ALIGNMENT_TOLERANCE_NS)})"))
    # The ranks' own warnings, one line per kind: which ranks, and the first message.
    by_code: dict[str, list[tuple[int, dict]]] = {}
    for record in records:
        for warning in record["warnings"]:
            by_code.setdefault(warning["code"], []).append((record["rank"], warning))
    for code, found in by_code.items():
        ranks = sorted({rank for rank, _ in found})
        first_rank, first = found[0]
        notes.append(Diagnostic(Code(code), f"{len(ranks)} rank{'s' if len(ranks) > 1 else ''} "
                                f"({', '.join(map(str, ranks[:8]))}"
                                f"{', ...' if len(ranks) > 8 else ''}): e.g. rank {first_rank}: "
                                f"{first['message']}"))
    return notes
