"""A fleet of 10,000 nodes through the fleet summary, `compare --by-node` and the report
(goal: <= 60 s together, <= 4 GB peak RSS each).

    python bench/fleet_scale.py [--nodes 10000] [--seconds 1] [--workers 2] [--keep DIR]
    python bench/fleet_scale.py --fleet DIR      # time compare, show and report again

Builds what `cluster scan` leaves on a shared file system (tests/synthetic_fleet.py:
every node's scan bundle of 4 CPUs under DIR/nodes/, and the record each rank sends
rank 0; a few noisy nodes, one with an extra daemon, one with another kernel), then
times, each in its own process (peak RSS from wait4):
1. the fleet summary: rank 0 turning the records into the fleet bundle and writing it
   (`cluster.scan.fleet_bundle`, `Bundle.write_into`);
2. `noisescope compare DIR --by-node --format json` (every node against the first);
3. `noisescope show DIR` and `noisescope report DIR -o report.html`.
It checks that the planted nodes, and no others, are named in the fleet's differences.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.synthetic_fleet

from noisescope.cluster.scan import NODES  # noqa: E402
from tests.synthetic_fleet import CPUS, PROBES, SECOND, Planted, fleet_nodes, fleet_of  # noqa: E402

GOAL_S, GOAL_GIB = 60.0, 4.0
RECORDS = "records.pickle"  # beside the fleet directory: the ranks' records, for stage 1


def _write_nodes(directory: Path, planted: Planted, total_ns: int, first: int,
                 last: int) -> list[dict]:
    """Write the nodes first..last-1; their records."""
    records = []
    for bundle, record in fleet_nodes(planted, total_ns, range(first, last)):
        bundle.write(directory / record["bundle"])
        records.append(record)
    return records


def build(directory: Path, planted: Planted, total_ns: int, workers: int) -> None:
    (directory / NODES).mkdir(parents=True)
    chunk = -(-planted.nodes // (workers * 8))
    began = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        firsts = range(0, planted.nodes, chunk)
        parts = pool.map(_write_nodes, [directory] * len(firsts), [planted] * len(firsts),
                         [total_ns] * len(firsts), firsts,
                         [min(first + chunk, planted.nodes) for first in firsts])
        records = [r for part in parts for r in part]
    with open(directory.with_name(directory.name + "." + RECORDS), "wb") as out:
        pickle.dump((planted, records), out)
    size = sum(f.stat().st_size for f in (directory / NODES).rglob("*") if f.is_file())
    files = sum(1 for f in (directory / NODES).rglob("*") if f.is_file())
    print(f"built {planted.nodes:,} rank bundles ({len(CPUS)} CPUs, probes {','.join(PROBES)}, "
          f"{total_ns / SECOND:g} s each): {files:,} files, {size / 2**20:,.0f} MiB, "
          f"{time.perf_counter() - began:.0f} s with {workers} workers", flush=True)


def summarise(directory: Path) -> None:
    """Stage 1, in its own process: rank 0's fleet bundle from the records."""
    with open(directory.with_name(directory.name + "." + RECORDS), "rb") as source:
        planted, records = pickle.load(source)
    began, cpu = time.perf_counter(), time.process_time()
    fleet = fleet_of(planted, records, records[0]["summaries"]["detour"][0]["measured_ns"])
    fleet.write_into(directory)
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    found = {}
    for d in fleet.summaries["differences"]:
        found.setdefault(d["kind"], set()).add(d.get("rank"))
    expected = {"host": {None}, "noise": planted.noise_outliers, "detours": planted.noise_outliers,
                "interrupts": set(planted.noisy)}
    print(f"outliers found: {'the planted ones, and only them' if found == expected else found}")
    print(f"SUMMARY {elapsed:.3f} {cpu:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=1.0, help="each probe's time per CPU")
    parser.add_argument("--workers", type=int, default=2, help="processes building the fleet")
    parser.add_argument("--keep", help="build the fleet in this directory (must not exist) "
                        "and keep it")
    parser.add_argument("--fleet", help="an existing fleet directory (from --keep): skip "
                        "building it")
    parser.add_argument("--summarise-only", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.summarise_only:
        summarise(Path(args.summarise_only))
        return
    with tempfile.TemporaryDirectory() as workdir:
        directory = Path(args.fleet or args.keep or Path(workdir) / "fleet")
        if not args.fleet:
            build(directory, Planted.spread(args.nodes), round(args.seconds * SECOND),
                  args.workers)
        report = Path(workdir) / "report.html"
        python = [sys.executable]
        stages = {
            "fleet summary": [*python, __file__, "--summarise-only", str(directory)],
            "compare --by-node": [*python, "-m", "noisescope", "compare", str(directory),
                                  "--by-node", "--format", "json"],
            "show": [*python, "-m", "noisescope", "show", str(directory)],
            "report": [*python, "-m", "noisescope", "report", str(directory), "-o", str(report),
                       "-q"],
        }
        results = {}
        for stage, argv in stages.items():
            if stage == "fleet summary" and args.fleet:
                remove_fleet_bundle(directory)  # written again by the stage
            results[stage] = measure(argv, stage)
            seconds, gib, out, cpu = results[stage]
            extra = ""
            if stage == "fleet summary":
                extra = "; " + next(line for line in out.splitlines()
                                    if line.startswith("outliers"))
                seconds, cpu = map(float, out.split("SUMMARY ")[1].split())
            elif stage == "show":
                extra = f"; {len(out.splitlines()):,} lines"
            elif stage == "report":
                extra = f"; HTML {report.stat().st_size / 1e6:.2f} MB"
            results[stage] = (seconds, gib, out, cpu)
            print(f"{stage}: {seconds:.1f} s (CPU {cpu:.1f} s), peak RSS {gib:.2f} GiB{extra}",
                  flush=True)
        manifest = directory / "manifest.json"
        print(f"fleet manifest {manifest.stat().st_size / 1e6:.1f} MB")
        nodes = sum(1 for _ in (directory / NODES).iterdir())
    goal_stages = ("fleet summary", "compare --by-node", "report")
    total = sum(results[s][0] for s in goal_stages)
    cpu = sum(results[s][3] for s in goal_stages)
    peak = max(r[1] for r in results.values())
    ok = total <= GOAL_S and peak <= GOAL_GIB
    print(f"load average now {os.getloadavg()[0]:.1f} (2 vCPUs: above 2, others' work slows "
          f"the wall times)")
    print(f"{nodes:,} nodes: summary + compare --by-node + report {total:.1f} s (CPU {cpu:.1f} s) "
          f"(goal <= {GOAL_S:.0f} s), peak RSS {peak:.2f} GiB (goal <= {GOAL_GIB:.0f} GiB): "
          f"{'met' if ok else 'NOT met'}")
    sys.exit(0 if ok else 1)


def remove_fleet_bundle(directory: Path) -> None:
    """The fleet bundle's own files (manifest and tables), not its nodes' bundles."""
    manifest = directory / "manifest.json"
    if manifest.exists():
        for entry in json.loads(manifest.read_text())["tables"].values():
            (directory / entry["file"]).unlink(missing_ok=True)
        manifest.unlink()


def measure(argv: list[str], what: str) -> tuple[float, float, str, float]:
    """Run argv in a child; wall time, its peak RSS in GiB (wait4), its stdout and its CPU
    time (user + system: what a busy shared machine inflates less than the wall time)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        began = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status):
            sys.exit(f"{what} failed (exit {os.waitstatus_to_exitcode(status)}): "
                     f"{err.read().strip()[-2000:]}")
        return elapsed, usage.ru_maxrss / 2**20, out.read(), usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
