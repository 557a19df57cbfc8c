"""The cluster protocol's start-up and gathering by tree, beside the star it replaced
(rank 0 the parent of every rank), under a real mpirun --oversubscribe on this machine.

    python bench/cluster_tree.py [--ranks 16,32,64] [--repeat 3] [--relay 4096]
    python bench/cluster_tree.py --ranks "" --relay 10000     # the relay's cost only

For each number of ranks and each shape (cluster/tree.py: `Tree`, `Star`), one mpirun
in which every rank builds the record a 4-CPU rank sends (tests/synthetic_fleet.py:
detour, FTQ and FWQ, 100 ms each; about 6 KB pickled), waits at a barrier, then goes
through the session as `cluster scan` does, without measuring:
- offsets: on rank 0, from the barrier to START sent: every rank's HELLO gathered and
  every clock offset measured;
- gather: on rank 0, from the agreed start to every record received (each rank reports
  at the start);
- messages: what rank 0 received (READY/HELLO/PONG, then ENDED/RESULT), and from how
  many ranks;
- the largest offset uncertainty (a rank's offset to rank 0, along its path).
Medians of --repeat runs. The ranks are 16-64 processes on 2 vCPUs: the times say what
the protocol costs on a crowded node, not across a network.

--relay N: in this process, what passing on the records of a subtree of N ranks costs
a relay (unpickling what its children sent and pickling its own message), with records
as pickled bytes (what Results carries) and as the records themselves; and what
unpickling each record costs rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.synthetic_fleet

from noisescope.cluster.mpi import ENDED, RESULT, World  # noqa: E402
from noisescope.cluster.session import Results, Session, start_up  # noqa: E402
from noisescope.cluster.tree import Star, Tree  # noqa: E402
from tests.synthetic_fleet import SECOND, Planted, fleet_nodes  # noqa: E402

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
          "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
SHAPES = {"tree": Tree, "star": Star}
RECORD_NS = SECOND // 10


class CountingWorld(World):
    """COMM_WORLD, counting the messages this rank receives by tag and source."""

    def __init__(self):
        super().__init__()
        self.received: list[tuple[int, int]] = []

    def _receive(self, source: int, tag: int):
        self.received.append((source, tag))
        return super()._receive(source, tag)


def rank_main(shape: str, out: Path) -> None:
    """One rank of the job: the session's start-up and gathering, timed on rank 0."""
    world = CountingWorld()
    placement = start_up(world, None)
    planted = Planted.spread(world.size, noisy=1)
    _, record = next(fleet_nodes(planted, RECORD_NS, range(world.rank, world.rank + 1)))
    session = Session(world, tree=SHAPES[shape](world.size))
    world.comm.Barrier()  # every rank ready at once: the offsets' time is the protocol's
    began = time.monotonic()
    start_ns = session.ready({"node": placement.node, "cpus": record["cpus"]})
    offsets_s = time.monotonic() - began
    hello_messages = len(world.received)
    time.sleep(max(0, start_ns - time.monotonic_ns()) / 1e9)
    session.report(record)
    gather_s = (time.monotonic_ns() - start_ns) / 1e9
    if world.is_root:
        results = world.received[hello_messages:]
        out.write_text(json.dumps({
            "offsets_s": offsets_s, "gather_s": gather_s,
            "hello_messages": hello_messages,
            "result_messages": sum(tag in (ENDED, RESULT) for _, tag in results),
            "senders": len({source for source, _ in world.received}),
            "records": sum(o.record is not None for o in session.outcomes.values()),
            "max_uncertainty_us": max(o.offset.uncertainty_ns for o in session.outcomes.values())
            / 1e3}))
    session.close()


def one_run(ranks: int, shape: str, workdir: Path) -> dict:
    out = workdir / f"{shape}-{ranks}.json"
    done = subprocess.run([*MPIRUN, "-n", str(ranks), sys.executable, __file__, "--rank", shape,
                           str(out)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"mpirun -n {ranks} ({shape}) failed:\n{done.stderr[-2000:]}")
    found = json.loads(out.read_text())
    if found["records"] != ranks:
        raise SystemExit(f"{shape} at {ranks} ranks: {found['records']} records reached rank 0")
    return found


def relay_costs(ranks: int) -> None:
    records = [pickle.loads(pickle.dumps(r))  # each its own objects, as from its own rank
               for _, r in fleet_nodes(Planted.spread(ranks, noisy=1), RECORD_NS)]
    pickled = [pickle.dumps(r) for r in records]
    for name, sent in (("pickled bytes (as sent)", pickled), ("records", records)):
        message = pickle.dumps(Results(sent, {}))
        began = time.perf_counter()
        pickle.dumps(pickle.loads(message))
        print(f"relay of {ranks:,} records as {name}: {len(message) / 1e6:.1f} MB, "
              f"{time.perf_counter() - began:.3f} s to receive and pass on")
    began = time.perf_counter()
    for record in pickled:
        pickle.loads(record)
    print(f"rank 0 unpickling them: {(time.perf_counter() - began) / ranks * 1e6:.0f} us a record")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="16,32,64", help='"": skip the mpirun runs')
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--relay", type=int, default=4096, help="0: skip")
    parser.add_argument("--rank", nargs=2, metavar=("SHAPE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        rank_main(args.rank[0], Path(args.rank[1]))
        return
    sizes = [int(n) for n in args.ranks.split(",") if n]
    if sizes:
        print(f"{'ranks':>5} {'shape':>5} {'offsets':>9} {'gather':>9} "
              f"{'to rank 0: hello':>17} {'results':>8} {'from':>5} {'max uncertainty':>16}")
    with tempfile.TemporaryDirectory() as workdir:
        for ranks in sizes:
            for shape in SHAPES:
                runs = [one_run(ranks, shape, Path(workdir)) for _ in range(args.repeat)]
                median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
                print(f"{ranks:>5} {shape:>5} {median['offsets_s'] * 1e3:>7.0f}ms "
                      f"{median['gather_s'] * 1e3:>7.0f}ms {median['hello_messages']:>17.0f} "
                      f"{median['result_messages']:>8.0f} {median['senders']:>5.0f} "
                      f"{median['max_uncertainty_us']:>13.0f} us", flush=True)
    if sizes:
        print(f"medians of {args.repeat} runs; load average now {os.getloadavg()[0]:.1f}")
    if args.relay:
        relay_costs(args.relay)


if __name__ == "__main__":
    main()
