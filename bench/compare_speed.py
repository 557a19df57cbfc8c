"""How long `compare` takes over many large bench bundles (goal: 100 x 1000 runs <= 2 s).

    python bench/compare_speed.py [--bundles 100] [--runs 1000] [--labels 10]

Writes synthetic bench bundles (each `--runs` successful runs of one
workload, labels assigned round-robin so that bundles with the same label are
repetitions) into a temporary directory, then times, side by side: the
library (load every bundle + compare, default metrics) and the command line
(`noisescope compare DIR --format json`, interpreter start included), in
wall time and CPU time (which other tenants of a shared machine do not
stretch).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import noisescope
from noisescope.analysis.compare import compare
from noisescope.bundle import Bundle
from noisescope.manifest import SCHEMA_VERSION
from noisescope.tables import Table


def synthetic(label: str, runs: int, rng: np.random.Generator, shift: float) -> Bundle:
    wall = rng.lognormal(np.log(1e9 * shift), 0.02, runs)
    columns = {
        "workload": np.full(runs, "app", object), "configuration": np.full(runs, "", object),
        "warmup": np.zeros(runs, bool), "status": np.full(runs, "ok", object),
        "wall_ns": wall.astype(np.int64), "user_ns": (wall * 0.9).astype(np.int64),
        "sys_ns": (wall * 0.08).astype(np.int64),
        "system_context_switches_per_s": rng.normal(2000, 100, runs),
        "metric_tps": rng.normal(1000 / shift, 10, runs),
    }
    manifest = {"schema_version": SCHEMA_VERSION, "kind": "bench",
                "tool": {"name": "noisescope", "version": noisescope.__version__}, "argv": [],
                "label": label, "started_utc": "2026-01-01T00:00:00Z", "complete": True,
                "parameters": {"workloads": [{"name": "app", "metrics": [
                    {"name": "tps", "pattern": "tps: ([0-9.]+)", "better": "higher"}]}]},
                "summaries": {}, "warnings": [], "tables": {}}
    return Bundle(manifest, {"runs": Table(columns)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--labels", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(args.bundles):
            label = f"config{i % args.labels}"
            synthetic(label, args.runs, rng, 1 + 0.01 * (i % args.labels)).write(root / f"b{i:03d}")
        begin, cpu = time.perf_counter(), time.process_time()
        bundles = [noisescope.load(p) for p in sorted(root.iterdir())]
        result = compare(bundles)
        library, library_cpu = time.perf_counter() - begin, time.process_time() - cpu
        begin, children = time.perf_counter(), _children_cpu()
        done = subprocess.run([sys.executable, "-m", "noisescope", "compare", str(root),
                               "--format", "json"], capture_output=True)
        command, command_cpu = time.perf_counter() - begin, _children_cpu() - children
        assert done.returncode == 0, done.stderr.decode()
    groups = len({(r.workload, r.metric.name, r.configuration) for r in result.rows})
    print(f"{args.bundles} bundles x {args.runs} runs, {args.labels} labels "
          f"({args.bundles * args.runs // args.labels} runs per configuration), "
          f"{len(result.metrics())} metrics, {groups} groups")
    # CPU time as well: on a shared machine other tenants stretch the wall time
    print(f"library (load + compare): {library:.2f} s ({library_cpu:.2f} s CPU)")
    print(f"noisescope compare --format json: {command:.2f} s ({command_cpu:.2f} s CPU; "
          f"goal <= 2 s)")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
