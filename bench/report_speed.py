"""Time and size of `noisescope report` for a 10-minute scan of 2 CPUs.

    python bench/report_speed.py [--minutes 10] [--cpus 2] [--keep DIR]

Builds the bundle such a scan writes, synthetically (detours of a 250 Hz tick,
a 1 kHz host timer and rare long ones: about 1.5 million; 1.2 million FTQ
quanta; FWQ samples; 1 s windows), with its spectra computed as scan does, then
runs the real CLI in a child process. Goals: report written in <= 15 s, HTML
<= 5 MB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from noisescope.analysis.spectrum import add_spectra, lost_time_series
from noisescope.bundle import Bundle
from noisescope.host import live_host_facts
from noisescope.manifest import new_manifest, utc_now
from noisescope.probes.summary import detour_summary, ftq_summary, fwq_summary
from noisescope.system import check_system
from noisescope.tables import Table

SECOND = 1_000_000_000
TICKS_PER_NS = 2.6
GOAL_S, GOAL_MB = 15.0, 5.0


def pulses(rng, rate_hz, length_ns, total_ns):
    starts = np.arange(rng.uniform(0, 1e9 / rate_hz), total_ns - 10**6, 1e9 / rate_hz)
    starts += rng.normal(0, 1_500, len(starts))
    return starts.astype(np.int64), rng.normal(length_ns, length_ns / 10, len(starts)).astype(np.int64)


def cpu_tables(rng, cpu, total_ns, quantum_ns):
    parts = [pulses(rng, 250, 13_000, total_ns), pulses(rng, 1000, 4_000, total_ns)]
    rare = np.sort(rng.integers(0, total_ns - 10**7, total_ns // SECOND * 5))
    parts.append((rare, rng.lognormal(11, 1.5, len(rare)).astype(np.int64)))
    starts = np.concatenate([p[0] for p in parts])
    order = np.argsort(starts)
    starts, durations = starts[order], np.maximum(np.concatenate([p[1] for p in parts])[order], 1000)
    ends = starts + durations
    overlap = np.r_[False, starts[1:] < ends[:-1]]  # keep detours disjoint, as measured
    starts, durations = starts[~overlap], durations[~overlap]
    detours = Table({"cpu": np.full(len(starts), cpu, np.int32), "start_ns": starts,
                     "duration_ns": durations})
    lost = lost_time_series(starts, durations, 0, total_ns, quantum_ns)
    work = np.rint(33_000 * (1 - lost) - rng.exponential(150, len(lost))).clip(0).astype(np.int64)
    ftq = Table({"cpu": np.full(len(work), cpu, np.int32),
                 "start_ns": np.arange(len(work), dtype=np.int64) * quantum_ns, "work": work})
    fwq_ns = (quantum_ns * (1 + lost / (1 - lost.clip(max=0.9))) + rng.exponential(2_000, len(lost)))
    fwq = Table({"cpu": np.full(len(lost), cpu, np.int32),
                 "start_ns": np.cumsum(fwq_ns).astype(np.int64), "duration_ns": fwq_ns.astype(np.int64)})
    gaps = np.r_[np.zeros(70, np.int64), np.bincount(np.log2(durations * TICKS_PER_NS).astype(np.int64),
                                                    minlength=64)[:64]]
    lower = (2.0 ** np.arange(64)).astype(np.uint64)
    histogram = Table({"cpu": np.full(64, cpu, np.int32), "lower_ticks": lower,
                       "upper_ticks": np.append(lower[1:], np.uint64(2**64 - 1)),
                       "lower_ns": (lower / TICKS_PER_NS).astype(np.int64),
                       "upper_ns": (np.append(lower[1:], np.uint64(2**62)) / TICKS_PER_NS).astype(np.int64),
                       "count": gaps[70:] + np.r_[10**9, np.zeros(63, np.int64)]})
    return detours, ftq, fwq, histogram


def synthetic_bundle(minutes: int, cpus: int, seed: int = 1) -> Bundle:
    rng = np.random.default_rng(seed)
    total = minutes * 60 * SECOND
    quantum = 1_000_000
    facts = live_host_facts()
    tables: dict[str, list[Table]] = {"detours": [], "ftq": [], "fwq": [], "gap_histogram": [],
                                      "windows": []}
    summaries: dict[str, list[dict]] = {"detour": [], "ftq": [], "fwq": []}
    starts = np.arange(0, total, SECOND, dtype=np.int64)
    for cpu in range(cpus):
        detours, ftq, fwq, histogram = cpu_tables(rng, cpu, total, quantum)
        for name, table in zip(("detours", "ftq", "fwq", "gap_histogram"),
                               (detours, ftq, fwq, histogram), strict=True):
            tables[name].append(table)
        for probe in ("detour", "ftq", "fwq"):
            tables["windows"].append(Table({"cpu": np.full(len(starts), cpu, np.int32),
                                            "probe": np.full(len(starts), probe, dtype=object),
                                            "start_ns": starts, "end_ns": starts + SECOND}))
        stats = {"cpu": cpu, "windows": len(starts), "measured_ns": total, "run_delay_ns": 0,
                 "involuntary_switches": 0, "minor_faults": 0, "major_faults": 0}
        native = {"lost_ticks": int(detours["duration_ns"].sum() * TICKS_PER_NS),
                  "detours": detours.rows, "stored": detours.rows, "overflow": 0,
                  "stored_before_loss": detours.rows,
                  "max_gap_ticks": int(detours["duration_ns"].max() * TICKS_PER_NS),
                  "resolution_ticks": 26, "hourglass_gaps": int(detours.rows)}
        summaries["detour"].append(detour_summary(stats, native, detours["duration_ns"], histogram,
                                                  1000, 1000, TICKS_PER_NS))
        summaries["ftq"].append(ftq_summary(stats, ftq["work"]))
        summaries["fwq"].append(fwq_summary(stats, fwq["duration_ns"]))
    manifest = new_manifest(
        "scan", label=f"synthetic {minutes} min", started_utc=utc_now(), complete=True,
        argv=["bench/report_speed.py"], host=facts.to_dict(),
        clock={"counter": "tsc", "ticks_per_second": TICKS_PER_NS * 1e9,
               "frequency_source": "kernel", "calibrated_ticks_per_second": None,
               "origin_ticks": 0, "origin_monotonic_raw_ns": 0, "origin_realtime_ns": 0},
        parameters={"cpus": list(range(cpus)), "duration_ns": total,
                    "probes": ["detour", "ftq", "fwq"], "threshold_ns": 1000, "priority": 0,
                    "quantum_ns": quantum, "injections": [],
                    "schedule": {"runtime_ns": SECOND, "period_ns": SECOND,
                                 "windows": len(starts), "last_runtime_ns": SECOND}},
        summaries=summaries, warnings=[],
        system=check_system("/", tuple(range(cpus)), facts).to_list())
    return Bundle(manifest, {name: Table.concat(parts) for name, parts in tables.items()})


def build(directory: Path, minutes: int, cpus: int) -> None:
    bundle = synthetic_bundle(minutes, cpus)
    began = time.perf_counter()
    add_spectra(bundle)  # what scan does after measuring
    spectra_s = time.perf_counter() - began
    bundle.write(directory)
    rows = {name: entry["rows"] for name, entry in bundle.manifest["tables"].items()}
    print(f"synthetic scan: {minutes} min x {cpus} CPUs, {rows['detours']:,} detours, "
          f"{rows['ftq']:,} FTQ quanta, {rows['fwq']:,} FWQ samples")
    print(f"spectra (computed by scan): {spectra_s:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--keep", help="also copy the bundle and report to this directory")
    parser.add_argument("--build-only", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_only:
        build(Path(args.build_only), args.minutes, args.cpus)
        return
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / "bundle"
        # the bundle is built in another process: a child's peak RSS starts from the
        # memory of the process that starts it
        subprocess.run([sys.executable, __file__, "--build-only", str(path), "--minutes",
                        str(args.minutes), "--cpus", str(args.cpus)], check=True)
        output = Path(workdir) / "report.html"
        began = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "noisescope", "report", str(path), "-o",
                                  str(output), "-q"])
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - began
        size_mb = output.stat().st_size / 1e6
        if args.keep:
            shutil.copytree(path, Path(args.keep) / "bundle", dirs_exist_ok=True)
            shutil.copy(output, Path(args.keep) / "report.html")
    print(f"noisescope report: exit {os.waitstatus_to_exitcode(status)}, {elapsed:.1f} s "
          f"(goal <= {GOAL_S:.0f} s), HTML {size_mb:.2f} MB (goal <= {GOAL_MB:.0f} MB), "
          f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB")
    sys.exit(0 if status == 0 and elapsed <= GOAL_S and size_mb <= GOAL_MB else 1)


if __name__ == "__main__":
    main()
