"""`noisescope cluster scan|bsp` under a real mpirun (Open MPI), 2 ranks on this machine,
shared memory and loopback only. Rank r is bound to CPU r (mpirun's default binding
for 2 ranks), so each rank measures its own CPU."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import noisescope
from noisescope.cluster.scan import ALIGNMENT_TOLERANCE_NS

from ..helpers import ATTEMPTS
from ..unit.test_bundle import validate

pytestmark = [
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun (openmpi-bin)"),
    pytest.mark.skipif(os.cpu_count() < 2, reason="needs 2 CPUs"),
]
mpi4py = pytest.importorskip("mpi4py")

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
          "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
RANK = [sys.executable, "-m", "noisescope"]
RT = ["--rt"] if os.geteuid() == 0 else []


def mpirun(*args, ranks=2, timeout=180, **kwargs):
    return subprocess.run([*MPIRUN, "-n", str(ranks), *RANK, *args], capture_output=True,
                          text=True, timeout=timeout, **kwargs)


MPIRUN_REAP_S = 10  # how long mpirun may outlive every rank it started before it counts as hung


def communicate_past_teardown(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """proc.communicate(timeout) for an mpirun whose job rank 0 ends with MPI_Abort.
    Open MPI 4.1's mpirun sometimes never returns from its own teardown then: every
    rank has exited, unreaped, while mpirun waits on a lock (1 run in 12 to 28 of the
    16-rank hang here, and twice in the CI's last ten runs). Once every rank has been
    gone for MPIRUN_REAP_S, mpirun is killed and its output taken; a rank still
    running at the deadline fails as before (TimeoutExpired)."""
    deadline = time.monotonic() + timeout
    all_gone_since = None
    while True:
        try:
            return proc.communicate(timeout=1)
        except subprocess.TimeoutExpired:  # (retrying loses no output)
            now = time.monotonic()
            ranks = _children(proc.pid)
            if ranks and all(_exited(rank) for rank in ranks):
                all_gone_since = all_gone_since or now
                if now - all_gone_since >= MPIRUN_REAP_S:
                    os.killpg(proc.pid, signal.SIGKILL)
                    return proc.communicate()
            else:
                all_gone_since = None
            if now >= deadline:
                raise


def _children(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:  # (ended meanwhile)
            pass
    return children


def _exited(pid: int) -> bool:
    """Whether the process has ended (a zombie its parent has not reaped, or gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def wall_clock_starts(bundle) -> dict[str, int]:
    """First window of each probe, in wall-clock ns (from the bundle's own clock origin)."""
    windows = bundle.windows
    origin = bundle.clock.origin_realtime_ns
    return {probe: origin + int(windows.filter(windows["probe"] == probe)["start_ns"].min())
            for probe in dict.fromkeys(windows["probe"].tolist())}


def aligned_cluster_scan(tmp_path):
    """A 2-rank cluster scan of two probes, measured again (a bounded number of
    times) when the ranks began a probe more than the tolerance apart: both sleep
    to the same agreed moment, and a vCPU the host holds then wakes late (2.5 and
    3.2 ms seen in CI, once each in about ten runs). A misalignment of the
    tool's own making fails every attempt."""
    for attempt in range(ATTEMPTS):
        out = tmp_path / f"fleet-{attempt}"
        done = mpirun("cluster", "scan", "--duration", "1s", "--probes", "detour,ftq", *RT,
                      "-o", str(out), "-q")
        if done.returncode != 0 or not out.exists():
            break
        fleet = noisescope.load(out)
        starts = [wall_clock_starts(noisescope.load(out / row["bundle"]))
                  for row in fleet.summaries["ranks"]]
        if all(abs(starts[0][p] - starts[1][p]) < ALIGNMENT_TOLERANCE_NS for p in starts[0]):
            break
    return out, done


def test_scan_windows_are_aligned_and_the_fleet_bundle_is_complete(tmp_path):
    out, done = aligned_cluster_scan(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Noisiest ranks" in done.stdout and "How the nodes differ" in done.stdout
    assert "Noisiest ranks" in (out / "report.html").read_text()  # rank 0 draws the report
    fleet = noisescope.load(out)
    validate(fleet.manifest)
    assert fleet.kind == "fleet" and fleet.complete
    ranks = fleet.summaries["ranks"]
    assert [(r["rank"], r["status"], r["cpus"]) for r in ranks] == [(0, "ok", [0]), (1, "ok", [1])]
    assert sorted((s["rank"], s["cpu"]) for s in fleet.summaries["detour"]) == [(0, 0), (1, 1)]
    # Each rank's own bundle, and the same probes measured at the same wall-clock moments
    # (checked from each bundle's own clock, independently of the fleet's offsets).
    starts = []
    for row in ranks:
        own = noisescope.load(out / row["bundle"])
        validate(own.manifest)
        assert own.manifest["cluster"]["rank"] == row["rank"] and own.complete
        assert own.parameters["cpus"] == row["cpus"]
        starts.append(wall_clock_starts(own))
    for probe in ("detour", "ftq"):
        assert abs(starts[0][probe] - starts[1][probe]) < ALIGNMENT_TOLERANCE_NS, starts
    # the second probe starts after the first one's windows and the fixed gap
    assert starts[0]["ftq"] - starts[0]["detour"] >= 1_000_000_000
    alignment = {a["probe"]: a for a in fleet.summaries["alignment"]}
    assert alignment["detour"]["ranks"] == 2
    assert alignment["detour"]["spread_ns"] < ALIGNMENT_TOLERANCE_NS
    windows = fleet.windows
    assert set(windows["rank"].tolist()) == {0, 1}
    # the fleet timeline starts at the agreed start: no first window before it, none
    # later than twice the tolerance (a sampler that waited for its CPU starts late,
    # 1.05 ms once; the tolerance is about the ranks' spread, checked above)
    first = windows.filter((windows["window"] == 0) & (windows["probe"] == "detour"))
    assert np.all(first["start_ns"] > -ALIGNMENT_TOLERANCE_NS), first["start_ns"]
    assert np.all(first["start_ns"] < 2 * ALIGNMENT_TOLERANCE_NS), first["start_ns"]
    shown = subprocess.run([*RANK, "show", str(out)], capture_output=True, text=True)
    assert shown.returncode == 0 and "Noisiest ranks" in shown.stdout


def test_noise_injected_on_one_rank_names_it_noisiest(tmp_path):
    out = tmp_path / "fleet"
    done = mpirun("cluster", "scan", "--duration", "1s", "--probes", "detour", "--no-report", *RT,
                  "--inject", "1kHz:200us@cpu1", "-o", str(out), "-q")
    assert done.returncode == 0, done.stderr
    fleet = noisescope.load(out)
    ranks = fleet.summaries["ranks"]
    noisiest = max(ranks, key=lambda r: r["detour_noise_pct"])
    assert noisiest["rank"] == 1
    # 1 kHz x 200 us is 20% of CPU 1. Rank 1 loses that, plus each
    # injection's own cost (the timer interrupt, signal frame and sigreturn:
    # 30-60 us here, test_ground_truth; up to ~130 us under a load average
    # of 11), plus the noise of the machine, which rank 0 measures beside it:
    # at most twice 20% more than rank 0.
    own = {r["rank"]: r["detour_noise_pct"] for r in ranks}
    assert 0.9 * 20 <= own[1] <= 2 * 20 + own[0], own
    differences = [d for d in fleet.summaries["differences"] if d.get("rank") == 1]
    assert any(d["what"] == "detour_noise_pct" for d in differences), differences
    assert any(d["what"] == "100us-1ms" for d in differences)  # the band the others lack
    # (rank 0 may stand out too: the host sometimes takes a vCPU for tens of ms)
    table = done.stdout[done.stdout.index("Noisiest ranks"):]
    assert table.splitlines()[4].split()[1] == "1"  # rank 1 heads the table


def bsp(tmp_path, name, *extra):
    out = tmp_path / name
    done = mpirun("cluster", "bsp", "--iterations", "400", "--block", "100", *RT, "-q",
                  "-o", str(out), *extra)
    assert done.returncode == 0, done.stderr
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    return bundle


# A rank without injected noise whose work alone ran this much slower than its
# fastest block was slowed by the host (a vCPU sharing its core): the run says
# nothing about our injection, so it is measured again (a bounded number of times).
HOST_SLOWDOWN = 0.05
# Likewise a loop with no injected noise on any rank slowed (or predicted from
# its ranks' detours to be slowed) by more than this (0.07-0.09 here; 0.32 once
# in CI, its ranks' own work not slowed; predicted 0.49 once): a collective
# waited for a rank the host held, or the host took the ranks' CPUs.
QUIET_LOOP_SLOWDOWN = 0.15


def bsp_without_host_slowdown(tmp_path, name, *extra):
    for attempt in range(ATTEMPTS):
        bundle = bsp(tmp_path, f"{name}-{attempt}", *extra)
        clean = [r for r in bundle.summaries["ranks"] if r["rank"] == 0 or not extra]
        loop = bundle.summaries["bsp"][0]
        loop_ok = bool(extra) or max(loop["measured_slowdown"], loop["predicted_slowdown_mean"]
                                     ) < QUIET_LOOP_SLOWDOWN
        if max(r["local_slowdown"] for r in clean) < HOST_SLOWDOWN and loop_ok:
            break
    return bundle


# The share of its CPU that 500 Hz x 200 us injected takes at most: each
# injection costs its length plus its own overhead (the timer interrupt,
# signal frame and sigreturn: 30-60 us here, test_ground_truth; up to ~130 us
# under a load average of 11), at most twice its length.
MOST_LOST = 2 * 500 * 200e-6


def test_bsp_measures_a_larger_slowdown_with_noise_on_one_rank(tmp_path):
    quiet = bsp_without_host_slowdown(tmp_path, "quiet")
    noisy = bsp_without_host_slowdown(tmp_path, "noisy", "--inject", "500Hz:200us@cpu1")
    q, n = quiet.summaries["bsp"][0], noisy.summaries["bsp"][0]
    # 10% of rank 1's CPU taken: the synchronized loop pays for it on every
    # rank. Rank 1 loses a share f <= MOST_LOST of its time, so its work
    # alone takes at most 1/(1 - f) as long: 25% more than rank 0's.
    most = MOST_LOST / (1 - MOST_LOST)
    ranks = {r["rank"]: r for r in noisy.summaries["ranks"]}
    local = {rank: r["local_slowdown"] for rank, r in ranks.items()}
    assert local[0] + 0.04 < local[1] <= local[0] + most, local
    # The loop waits for the slowest rank at every step: slowed by more than
    # the quiet loop, by no more than each rank's noise slows its own work
    # (noise on two ranks at different steps adds up, never more) on top of
    # what slows the quiet loop (collectives that wait).
    assert q["measured_slowdown"] + 0.04 < n["measured_slowdown"], (q, n)
    assert n["measured_slowdown"] <= q["measured_slowdown"] + local[0] + local[1], (q, n, local)
    # The prediction replays each rank's measured detours: the loop waits for
    # rank 1 at every step, so it is slowed at least by rank 1's injected share
    # (its work of C takes C / (1 - f) >= C (1 + f)); the quiet run's prediction
    # (another run, another share of the host's noise) bounds it from above only.
    injected_share = 500 * 200e-6
    assert (0.9 * injected_share <= n["predicted_slowdown_mean"]
            <= q["predicted_slowdown_mean"] + local[0] + local[1]), (q, n, local)
    noise = {rank: r["noise_pct"] for rank, r in ranks.items()}
    assert 0.9 * 10 <= noise[1] <= 100 * MOST_LOST + noise[0], noise
    # every iteration of both parts on both ranks is in the table
    iterations = noisy.iterations
    for rank in (0, 1):
        for part in ("alone", "bsp"):
            rows = iterations.filter((iterations["rank"] == rank) & (iterations["part"] == part))
            assert rows.rows == 400 and np.all(rows["iteration_ns"] >= rows["work_ns"])


def test_a_rank_that_cannot_measure_is_listed_and_the_others_still_write(tmp_path):
    out = tmp_path / "fleet"
    common = ["cluster", "scan", "--duration", "1s", "--probes", "detour", "--no-report", "-o",
              str(out), "-q"]
    # rank 1 is asked for a CPU its node lacks: a real failure on that rank only
    done = subprocess.run([*MPIRUN, "-n", "1", *RANK, *common, ":", "-n", "1", *RANK, *common,
                           "--cpus", "999"], capture_output=True, text=True, timeout=180)
    assert done.returncode != 0  # rank 1 exits 2 (after the others finished)
    assert "rank 1: CPU 999 is offline" in done.stderr
    fleet = noisescope.load(out)
    validate(fleet.manifest)
    ranks = {r["rank"]: r for r in fleet.summaries["ranks"]}
    assert ranks[0]["status"] == "ok" and noisescope.load(out / ranks[0]["bundle"]).complete
    assert ranks[1]["status"] == "failed" and "CPU 999 is offline" in ranks[1]["reason"]
    assert any(w.code.value == "rank_missing" and "rank 1" in w.message for w in fleet.warnings)
    assert "rank 1" in done.stdout and "failed" in done.stdout


def _rank_process(rank: int, marker: str) -> int | None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and f"OMPI_COMM_WORLD_RANK={rank}".encode() in environ:
            return int(pid)
    return None


def test_a_rank_that_hangs_is_listed_missing_and_the_job_ends(tmp_path):
    out = tmp_path / "fleet-hang"
    proc = subprocess.Popen([*MPIRUN, "-n", "2", *RANK, "cluster", "scan", "--no-report", "--duration", "2s",
                             "--probes", "detour", "--timeout", "2s", "-o", str(out), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    stopped = None
    try:
        deadline = time.monotonic() + 30
        while stopped is None and time.monotonic() < deadline:
            if (out / "nodes").is_dir():  # start-up done: the ranks are preparing or measuring
                stopped = _rank_process(1, str(out))
            time.sleep(0.05)
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)
        stdout, stderr = communicate_past_teardown(proc, 60)
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0
    assert "did not answer" in stderr
    fleet = noisescope.load(out)
    ranks = {r["rank"]: r for r in fleet.summaries["ranks"]}
    assert ranks[0]["status"] == "ok" and noisescope.load(out / ranks[0]["bundle"]).complete
    assert ranks[1]["status"] == "missing"
    assert "Noisiest ranks" in stdout


def run_cli(*args, env=None):
    return subprocess.run([*RANK, *args], capture_output=True, text=True, timeout=120, env=env)


def test_outside_mpi_scan_falls_back_to_this_node_and_bsp_refuses(tmp_path):
    done = run_cli("cluster", "scan", "--duration", "1s", "--probes", "detour", "--cpus", "0", "--no-report",
                   "-o", str(tmp_path / "one"))
    assert done.returncode == 0, done.stderr
    assert "scanning this node only" in done.stderr
    assert noisescope.load(tmp_path / "one").kind == "scan"
    refused = run_cli("cluster", "bsp")
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "needs at least 2 ranks" in refused.stderr


def test_without_mpi4py_one_line_says_how_to_install(tmp_path):
    code = ("import sys; sys.modules['mpi4py'] = None; from noisescope.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))")
    for command in (["cluster", "scan", "-o", str(tmp_path / "x")], ["cluster", "bsp"]):
        done = subprocess.run([sys.executable, "-c", code, *command], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "pip install 'noisescope[mpi]'" in lines[0]
    assert os.listdir(tmp_path) == []


def test_help_ends_with_examples():
    for command in ("scan", "bsp"):
        text = run_cli("cluster", command, "--help").stdout
        assert "EXAMPLES" in text and "mpirun" in text.split("EXAMPLES")[1]


def test_fleet_manifest_is_json_with_documented_sections(tmp_path):
    out = tmp_path / "fleet"
    assert mpirun("cluster", "scan", "--duration", "1s", "--probes", "ftq", "--no-report", "-o", str(out),
                  "-q").returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["summaries"]) == {"fleet", "distribution", "alignment", "differences"}
    assert manifest["summaries"]["fleet"] == [{"ranks": 2, "measured": 2, "nodes": 1}]
    assert manifest["parameters"]["ranks"] == 2 and manifest["tables"]["windows"]["rows"] >= 2
    # the rows per rank and per CPU, and the ranks' findings, are tables
    tables = manifest["tables"]
    assert (tables["summary_ranks"]["rows"], tables["summary_ftq"]["rows"]) == (2, 2)
    assert tables["system_findings"]["rows"] > 0 and "system" not in manifest
