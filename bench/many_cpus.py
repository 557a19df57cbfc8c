"""A scan's post-processing at many CPUs: seconds and peak memory per stage.

    python bench/many_cpus.py [--cpus 2,16,64,256] [--seconds 60] [--workers N] [--keep DIR]

Synthesises, for each CPU count N, what a traced detour scan of N CPUs leaves
when its measuring is over, in the formats the kernel and the native core
produce: per-CPU copies of the ring-buffer pages (`trace_pipe_raw`) at
EVENTS_PER_S events a second per CPU, and the detour sampler's files at
DETOURS_PER_S detours a second per CPU (start and length in TSC ticks, as the
native core's ring hands them to a scan's spool) with its gap histogram,
collected into tables and summaries by the detour probe itself. The
pages are those of the captured buffer in tests/fixtures/trace/
kvm-detour-inject (a real detour run with a 1 kHz injection: ticks, hrtimers,
softirqs, switches), repeated one copy after the other with their page time
stamps moved on (a copy every `tile_ns` on average, so that the events average
EVENTS_PER_S; each copy a random part of JITTER later, so that the series has
no comb of lines at the copies' period); the detours are that run's own, a
random choice of DETOURS_PER_S from each copy, so that attribution finds the
events it found there.

Then, in a child process per N (its peak RSS is its own, its allocators set
as the CLI sets them), the scan's own post-processing runs as `scan._measure`
calls it for a scan with a bundle
(the detours read back from the spool a batch at a time):
`scan.build_bundle` (the trace decoded once to count it and write its events
to Parquet, explaining the detours as it reads their recording's pages, in
`procs` worker processes, a CPU at a time: `decode`; the rest, mostly their
summary: `attribution`; the first pass's CPU time, the scan's process's and its
workers', is printed for the largest N), the spectra (`bundle_spectra`, in
worker processes too), the bundle written with its tables out of memory
(`write`; its samples' files in worker processes too), and `noisescope
report` in its own process as scan runs it (`report`). Printed: seconds and
peak memory of each stage (RSS; for the stages with workers, the sum of the
processes' proportional set sizes if larger: `TreeMemory`), the HTML's
size, and the cost per CPU-second (seconds / (N x --seconds)), which should
stay flat as N grows. Goals (issue 15): the 256-CPU minute in <= 60 s and
<= 2 GB; the report <= 10 MB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import noisescope.cli.main  # noqa: F401 - pyarrow's allocator as the CLI sets it (read at import)
from noisescope import interrupts
from noisescope.analysis.spectrum import bundle_spectra, store_spectra
from noisescope.clock import MeasurementClock
from noisescope.host import live_host_facts
from noisescope.memory import hand_back_large_allocations, release_free_memory
from noisescope.probes.base import Execution, ProbeContext, ProbeResult
from noisescope.probes.detour import BUCKET_LOWER_TICKS, DETOUR, DetourSettings
from noisescope.probes.native import NativeRun
from noisescope.probes.schedule import plan_windows
from noisescope.probes.spool import SampleSpool
from noisescope.scan import ScanOptions, ScanPlan, build_bundle
from noisescope.tables import Table
from noisescope.trace.events import Symbols, parse_format, parse_header_page, walk_pages
from noisescope.trace.scanning import ScanTracing, TraceOptions
from noisescope.trace.session import Recording, TraceClock, TraceSession
from noisescope.workers import worker_count

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "trace" / "kvm-detour-inject"
EVENTS_PER_S = 20_000  # a busy node's kernel events per CPU
DETOURS_PER_S = 1_500
SECOND = 1_000_000_000
THRESHOLD_NS = 1_000
JITTER = 0.2  # of a copy's period (its events take 2/3 of it: copies never overlap)
GOAL_S, GOAL_MB, REPORT_GOAL_MB = 60.0, 2_000, 10.0
STAGES = ("decode", "attribution", "spectra", "write", "report")
SAMPLE_S = 0.25  # how often TreeMemory reads the processes' PSS (each read walks their page
# tables in the kernel: every 0.1 s it was 5% of the scan's process's CPU time)


class Capture:
    """The captured buffer: its pages, event formats, clock and detours."""

    def __init__(self) -> None:
        self.formats = {p.stem: parse_format(p.read_text())
                        for p in (FIXTURE / "formats").glob("*.format")}
        self.layout = parse_header_page((FIXTURE / "formats" / "header_page").read_text())
        self.pages = gzip.decompress((FIXTURE / "cpu1.raw.gz").read_bytes())
        self.clock = MeasurementClock.from_dict(json.loads((FIXTURE / "clock.json").read_text()))
        run = json.loads((FIXTURE / "run.json").read_text())
        self.start_ns = run["coverage"]["start_ns"][0]
        self.detour_starts = np.array(run["detours"]["start_ns"], np.int64)
        self.detour_durations = np.array(run["detours"]["duration_ns"], np.int64)
        self.records = len(walk_pages(self.pages, self.layout).offsets)
        # one copy of the pages every TILE_S holds EVENTS_PER_S on average
        self.tile_ticks = int(self.records / EVENTS_PER_S * self.clock.ticks_per_second)
        self.tile_ns = int(self.tile_ticks / self.clock.ticks_per_ns)

    def shifts_ticks(self, seconds: float) -> np.ndarray:
        """How far each copy of the pages is moved (TSC ticks): the same for every CPU."""
        tiles = int(np.ceil(seconds * SECOND / self.tile_ns))
        jitter = np.random.default_rng(1).uniform(0, JITTER * self.tile_ticks, tiles)
        return (np.arange(tiles) * self.tile_ticks + jitter).astype(np.uint64)

    def tiled_pages(self, shifts: np.ndarray) -> bytes:
        """The pages repeated, each copy's page time stamps moved on by its shift."""
        words = np.frombuffer(self.pages, np.uint64).reshape(-1, self.layout.page_size // 8)
        out = np.tile(words, (len(shifts), 1))
        out[:, self.layout.timestamp_offset // 8] += np.repeat(shifts, len(words))
        return out.tobytes()

    def detours(self, cpu: int, shifts: np.ndarray, end_ns: int) -> Table:
        """DETOURS_PER_S of the run's detours, chosen at random from each copy."""
        rng = np.random.default_rng(cpu)
        per_tile = round(DETOURS_PER_S * self.tile_ns / SECOND)
        chosen = np.sort(np.argsort(rng.random((len(shifts), len(self.detour_starts))),
                                    axis=1)[:, :per_tile], axis=1)
        shifts_ns = (shifts / self.clock.ticks_per_ns).astype(np.int64)
        starts = (self.detour_starts[chosen] + shifts_ns[:, None]).ravel()
        durations = self.detour_durations[chosen].ravel()
        keep = starts + durations <= end_ns
        return Table({"cpu": np.full(int(keep.sum()), cpu, np.int32), "start_ns": starts[keep],
                      "duration_ns": durations[keep]})


def probe_result(capture: Capture, cpus: tuple[int, ...], schedule, shifts: np.ndarray,
                 workdir: Path) -> ProbeResult:
    """What the detour probe returns for these CPUs once they are measured:
    each CPU's detours as the native core hands them over (start and length
    in TSC ticks, its gap histogram), in the files a scan with a bundle
    spools them to (`probes/spool.py`), collected by the probe itself
    (`Probe.result`: read back a batch at a time, in ns)."""
    clock = capture.clock
    window_starts = (capture.start_ns
                     + np.arange(schedule.windows, dtype=np.int64) * schedule.period_ns)
    window_ends = window_starts + schedule.runtime_ns
    window_ends[-1] = window_starts[-1] + schedule.last_runtime_ns
    end_ns = int(window_ends[-1])
    spool = SampleSpool(workdir / "samples", DETOUR.ring, len(cpus))
    specs, samplers = [], []
    for index, cpu in enumerate(cpus):
        detours = capture.detours(cpu, shifts, end_ns)
        starts = np.rint(detours["start_ns"] * clock.ticks_per_ns).astype(np.uint64) \
            + np.uint64(clock.origin_ticks)
        lengths = np.rint(detours["duration_ns"] * clock.ticks_per_ns).astype(np.uint64)
        spool.append(index, starts, lengths)
        histogram = np.bincount(np.searchsorted(BUCKET_LOWER_TICKS, lengths, side="right") - 1,
                                minlength=len(BUCKET_LOWER_TICKS)).astype(np.uint64)
        histogram[0] += np.uint64(schedule.measured_ns // 20)  # the loop's own short gaps
        specs.append({"cpu": cpu, "histogram": histogram})
        # (the sampler thread's id: only timerlat's owners read it)
        samplers.append({"cpu": cpu, "tid": 1_000 + cpu, "windows": schedule.windows,
                         "run_delay_ns": 0, "involuntary_switches": 0, "minor_faults": 0,
                         "major_faults": 0, "clock_backwards": 0, "lost_ticks": int(lengths.sum()),
                         "detours": detours.rows, "stored": detours.rows, "overflow": 0,
                         "stored_before_loss": detours.rows, "max_gap_ticks": int(lengths.max()),
                         "resolution_ticks": 26, "hourglass_gaps": detours.rows})
    spool.close()
    windows = Table({"cpu": np.repeat(np.array(cpus, np.int32), schedule.windows),
                     "probe": np.full(len(cpus) * schedule.windows, "detour", dtype=object),
                     "start_ns": np.tile(window_starts, len(cpus)),
                     "end_ns": np.tile(window_ends, len(cpus))})
    injections = Table({"cpu": np.zeros(0, np.int32), "mode": np.zeros(0, object),
                        "start_ns": np.zeros(0, np.int64), "duration_ns": np.zeros(0, np.int64)})
    done = Execution(NativeRun(samplers, [], False, spool), windows, injections)
    return DETOUR.result(ProbeContext(cpus, schedule, clock), DetourSettings(THRESHOLD_NS), specs,
                         done)


def recorded_trace(capture: Capture, cpus: tuple[int, ...], shifts: np.ndarray, workdir: Path,
                   workers: int | None) -> ScanTracing:
    """The scan's tracing state once its probe ran: one recording, its pages copied."""
    session = TraceSession(cpus, capture.clock, symbols=Symbols(FIXTURE / "kallsyms"))
    session.formats, session.layout = capture.formats, capture.layout
    session.trace_clock = TraceClock("x86-tsc", capture.clock)
    session.info.reader = "raw"
    pages = capture.tiled_pages(shifts)
    end_ns = capture.start_ns + int(shifts[-1] / capture.clock.ticks_per_ns) + capture.tile_ns
    recording = Recording(capture.start_ns, end_ns, {cpu: 0 for cpu in cpus})
    for cpu in cpus:  # one file per CPU, as TraceSession.stop() copies them
        recording.pages[cpu] = workdir / f"0-detour.cpu{cpu}.raw"
        recording.pages[cpu].write_bytes(pages)
    return ScanTracing(TraceOptions(workers=workers), session, workdir=workdir, spooling=True,
                       recordings=[("detour", recording)])


def reset_peak() -> None:
    """Start this process's peak RSS (VmHWM) afresh: each stage's peak is its own."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class TreeMemory:
    """The largest proportional set size (PSS: each shared page divided among
    the processes that map it) of this process and its children together,
    sampled every SAMPLE_S while a stage runs: forked workers share most of
    their pages with this process, so adding their RSS would count those
    again for each worker."""

    def __init__(self) -> None:
        self.peak_kib = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(SAMPLE_S):
            pids = [os.getpid()] + [int(pid) for task in Path("/proc/self/task").iterdir()
                                    for pid in (task / "children").read_text().split()]
            total = 0
            for pid in pids:
                try:
                    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
                except OSError:  # ended meanwhile
                    continue
                total += next(int(line.split()[1]) for line in rollup.splitlines()
                              if line.startswith("Pss:"))
            self.peak_kib = max(self.peak_kib, total)

    def stop_mib(self) -> float:
        """The stage's peak: the sampled one, or this process's own (VmHWM) if larger."""
        self._done.set()
        self._thread.join()
        return max(self.peak_kib / 1024, peak_mib())


def post_process(cpus: int, seconds: float, destination: Path, workers: int | None) -> dict:
    """The scan's work after measuring, stage by stage: {stage: (s, peak MiB)}."""
    capture = Capture()
    cpu_list = tuple(range(cpus))
    duration_ns = int(seconds * SECOND)
    schedule, _ = plan_windows(duration_ns, rt=False)
    workdir = destination.parent / f".{destination.name}.trace-{os.getpid()}"
    workdir.mkdir()
    began = time.perf_counter()
    shifts = capture.shifts_ticks(seconds)
    tracing = recorded_trace(capture, cpu_list, shifts, workdir, workers)
    result = probe_result(capture, cpu_list, schedule, shifts, workdir)
    made_s = time.perf_counter() - began
    release_free_memory()  # what synthesising took: the scan's process never held it
    stages: dict[str, tuple[float, float]] = {}
    first_pass_cpu: dict[str, float] = {}
    decode = tracing._decode  # timed on its own: the rest of build_bundle is attribution

    def timed_decode(stage, *args):
        started, cpu = time.perf_counter(), os.times()
        try:
            return decode(stage, *args)
        finally:
            stages["decode"] = (time.perf_counter() - started, peak_mib())
            done = os.times()  # the workers' CPU time is their parent's once they are waited for
            first_pass_cpu.update(process=done.user + done.system - cpu.user - cpu.system,
                                  workers=done.children_user + done.children_system
                                  - cpu.children_user - cpu.children_system)
            reset_peak()

    tracing._decode = timed_decode
    options = ScanOptions(cpus=cpu_list, duration_ns=duration_ns, probes=("detour",),
                          threshold_ns=THRESHOLD_NS)
    plan = ScanPlan(cpu_list, 0, {"root": "yes", "rt": "no"})
    facts = live_host_facts()
    reset_peak()
    tree = TreeMemory()
    started = time.perf_counter()
    bundle = build_bundle(options, plan, facts, capture.clock, schedule, [result],
                          started="2026-01-01T00:00:00Z", argv=["bench/many_cpus.py"],
                          complete=True, kind="scan", tracing=tracing, stage=interrupts.Stage())
    stages["attribution"] = (time.perf_counter() - started - stages["decode"][0], tree.stop_mib())
    del result
    bundle.manifest["system"] = []  # the checks of this machine would not be those of N CPUs
    reset_peak()
    tree = TreeMemory()
    started = time.perf_counter()
    store_spectra(bundle, *bundle_spectra(bundle))
    stages["spectra"] = (time.perf_counter() - started, tree.stop_mib())
    reset_peak()
    tree = TreeMemory()
    started = time.perf_counter()
    bundle.write(destination, release_tables=True)
    stages["write"] = (time.perf_counter() - started, tree.stop_mib())
    tracing.discard()
    rows = bundle.manifest["tables"]
    return {"stages": stages, "first_pass_cpu": first_pass_cpu, "synthesis_s": made_s,
            "events": rows["events"]["rows"]
            + rows["sched_switch"]["rows"], "detours": rows["detours"]["rows"],
            "causes": rows["detour_causes"]["rows"], "workers": worker_count(cpus, workers)}


def run_report(bundle: Path) -> tuple[float, float, float, int]:
    """`noisescope report` in its own process: (s, peak MiB, HTML MB, exit status)."""
    output = bundle.parent / "report.html"
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "noisescope", "report", str(bundle), "-o",
                              str(output), "-q"])
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    size = output.stat().st_size / 1e6 if output.exists() else float("nan")
    return elapsed, usage.ru_maxrss / 1024, size, os.waitstatus_to_exitcode(status)


def measure(cpus: int, seconds: float, keep: Path | None, workers: int | None) -> dict:
    """One CPU count, all stages: the scan's post-processing in a child process,
    then the report in another, both started from this small process (a child's
    peak RSS counts the memory of the process that forks it)."""
    with tempfile.TemporaryDirectory(prefix="many-cpus-") as workdir:
        bundle = Path(workdir) / "bundle"
        child = subprocess.run([sys.executable, __file__, "--post-process", str(bundle),
                                "--cpus", str(cpus), "--seconds", str(seconds)]
                               + (["--workers", str(workers)] if workers else []),
                               check=True, stdout=subprocess.PIPE, text=True)
        measured = json.loads(child.stdout.strip().splitlines()[-1])
        report_s, report_mib, html_mb, status = run_report(bundle)
        measured["stages"]["report"] = (report_s, report_mib)
        measured.update(html_mb=html_mb, report_status=status)
        if keep is not None:
            target = keep / f"{cpus}cpus"
            shutil.copytree(bundle, target / "bundle", dirs_exist_ok=True)
            shutil.copy(Path(workdir) / "report.html", target / "report.html")
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="2,16,64,256", help="CPU counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--keep", type=Path, help="copy each bundle and report here")
    parser.add_argument("--workers", type=int, help="attribution's processes (default: as the "
                        "scan chooses, one per CPU this machine has, memory permitting)")
    parser.add_argument("--post-process", type=Path, help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.post_process:
        hand_back_large_allocations()  # the scan's process's allocation policy (cli/main.py)
        print(json.dumps(post_process(int(args.cpus), args.seconds, args.post_process,
                                      args.workers)))
        return
    print(f"{args.seconds:g} s of a busy node per CPU: {EVENTS_PER_S:,} trace events/s, "
          f"{DETOURS_PER_S:,} detours/s; seconds and peak memory (MiB) of each stage", flush=True)
    print(f"{'CPUs':>5} {'events':>12} {'detours':>10} {'procs':>5} "
          + " ".join(f"{s:>15}" for s in STAGES)
          + f" {'total':>8} {'ms/CPU-s':>9} {'HTML MB':>8}", flush=True)
    largest = None
    for cpus in [int(n) for n in args.cpus.split(",")]:
        measured = measure(cpus, args.seconds, args.keep, args.workers)
        stages = measured["stages"]
        total = sum(stages[s][0] for s in STAGES)
        per_cpu_s = total / (cpus * args.seconds) * 1e3
        print(f"{cpus:>5} {measured['events']:>12,} {measured['detours']:>10,} {measured['workers']:>5} "
              + " ".join(f"{stages[s][0]:>7.1f}s {stages[s][1]:>5.0f}M" for s in STAGES)
              + f" {total:>7.1f}s {per_cpu_s:>9.1f} {measured['html_mb']:>8.2f}", flush=True)
        largest = (cpus, measured, total)
    cpus, measured, total = largest
    cpu_time = measured["first_pass_cpu"]
    print(f"first pass at {cpus} CPUs, CPU time: the scan's process {cpu_time['process']:.1f} s, "
          f"its workers {cpu_time['workers']:.1f} s", flush=True)
    scan_peak = max(measured["stages"][s][1] for s in STAGES if s != "report")
    report_peak = measured["stages"]["report"][1]
    if cpus == 256 and args.seconds >= 60:
        seconds, basis = total, "measured"
    else:  # the stages' time grows with the CPU-seconds (the table shows how flat)
        seconds, basis = total * 256 * 60 / (cpus * args.seconds), \
            f"projected from {cpus} CPUs x {args.seconds:g} s"
    met = (seconds <= GOAL_S and basis == "measured" and max(scan_peak, report_peak) <= GOAL_MB
           and measured["report_status"] == 0 and measured["html_mb"] <= REPORT_GOAL_MB)
    print(f"256 CPUs x 60 s: {seconds:,.0f} s ({basis}; goal <= {GOAL_S:.0f} s); peak memory at "
          f"{cpus} CPUs: scan {scan_peak:.0f} MiB, report {report_peak:.0f} MiB (goal <= "
          f"{GOAL_MB} MiB); HTML {measured['html_mb']:.2f} MB (goal <= {REPORT_GOAL_MB:.0f} MB): "
          f"{'met' if met else 'NOT met'}")
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
