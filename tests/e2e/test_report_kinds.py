"""Every bundle kind renders in `report` (HTML, Markdown, PNG) and in `show`, with the
tables and figures a reader of that kind looks for, and bundle text escaped.

Bundles come from short real runs (scan with and without tracing, timerlat, `run`,
cluster scan and bsp under mpirun) and from the import fixtures; each is built once,
when the first test that needs it runs."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markupsafe import escape
from rich.console import Console

import noisescope
from noisescope.analysis.predict import predict
from noisescope.imports import import_file
from noisescope.render.report import md_escape, write_report
from noisescope.render.terminal import print_bundle

FIXTURES = Path(__file__).parents[1] / "fixtures" / "imports"
LABEL = 'k<b>"&'  # every bundle carries it: it must come out escaped
CLI = [sys.executable, "-m", "noisescope"]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
          "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo", "-n", "2"]
SHORT = ["--duration", "300ms", "--label", LABEL, "-q"]
EXPERIMENT = """
[experiment]
name = "tiny"
runs = 2
warmup = 0

[probes]
before = ["detour"]
duration = "300ms"

[[workload]]
name = "true"
command = ["true"]
"""


def cli(*args: str, mpi: bool = False) -> None:
    if mpi and (shutil.which("mpirun") is None or os.cpu_count() < 2):
        pytest.skip("needs mpirun (openmpi-bin) and 2 CPUs")
    if mpi:
        pytest.importorskip("mpi4py")
    done = subprocess.run([*(MPIRUN if mpi else []), *CLI, *args], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def _scan(out: Path, cpu: int) -> None:
    cli("scan", "--cpus", str(cpu), "--probes", "detour,timerlat", "--no-report", *SHORT,
        "-o", str(out))


def _scan_untraced(out: Path, cpu: int) -> None:
    cli("scan", "--cpus", str(cpu), "--probes", "ftq,fwq", "--no-trace", "--no-report", *SHORT,
        "-o", str(out))


def _timerlat(out: Path, cpu: int) -> None:
    cli("timerlat", "--cpus", str(cpu), *SHORT, "-o", str(out))


def _run(out: Path, cpu: int) -> None:
    experiment = out.parent / "tiny.toml"
    experiment.write_text(EXPERIMENT)
    cli("run", str(experiment), "--label", LABEL, "-q", "-o", str(out))


def _importer(tool: str, file: str):
    def make(out: Path, cpu: int) -> None:
        import_file(tool, FIXTURES / tool / file, label=LABEL, destination=out)
    return make


def _tune(out: Path, cpu: int) -> None:
    cli("tune", "--cpus", str(cpu), "--duration", "1s", "--label", LABEL, "-q", "-o", str(out))


def _prediction(out: Path, cpu: int) -> None:
    bundle = predict("250Hz:2us+1Hz:200us", [2, 64], seeds=2).to_bundle()
    bundle.manifest["label"] = LABEL
    bundle.write(out)


def _fleet(out: Path, cpu: int) -> None:
    cli("cluster", "scan", "--probes", "detour", "--no-report", *SHORT, "-o", str(out), mpi=True)


def _bsp(out: Path, cpu: int) -> None:
    cli("cluster", "bsp", "--iterations", "100", "--block", "50", "--sample", "50ms",
        "--label", LABEL, "-q", "-o", str(out), mpi=True)


# kind: how to make it, what its report must hold (headings, table headers, figure keys),
# what `show` must print
KINDS = {
    "scan": (_scan, ["Configuration and host", "System check", "Detours (CPU taken away",
                     "Timer latency (wakeup - deadline)", "Causes of detours",
                     "Periodic noise sources"],
             ["detours-time", "detours-histogram", "timerlat", "causes", "spectrum"],
             ["Detours (CPU taken away", "trace: x86-tsc"]),
    "scan-untraced": (_scan_untraced, ["FTQ (work units per quantum)", "FWQ (time per fixed",
                                       "System check"],
                      ["ftq-series", "fwq-series", "spectrum"], ["trace: off"]),
    "timerlat": (_timerlat, ["Timer latency (wakeup - deadline)", "Causes of wakeups",
                             "System check"], ["timerlat"], ["Timer latency"]),
    "run": (_run, ["Workloads (medians of the successful runs)", "Detours (CPU taken away",
                   "(probes-before)", "(runs)", "System check", "workload runs"],
            ["runs-cdf", "workloads", "detours-time"],
            ["Detours (CPU taken away", "Workloads (medians"]),
    "cyclictest": (_importer("cyclictest", "hist.json"),
                   ["Timer latency (wakeup - deadline)", "imported", "not checked: imported"],
                   ["timerlat"], ["imported: cyclictest"]),
    "oslat": (_importer("oslat", "run.json"), ["oslat (gaps between TSC reads", "imported"],
              ["oslat"], ["imported: oslat"]),
    "sysjitter": (_importer("sysjitter", "summary.txt"), ["Detours (CPU taken away", "imported"],
                  [], ["imported: sysjitter"]),
    "tune": (_tune, ["Tuning plan", "Detours (CPU taken away",
                     "System check"], ["detours-time"], ["Tuning plan"]),
    "prediction": (_prediction, ["Predicted slowdown at scale", "Predicted run time (simulation",
                                 "Knee P*", "est. slowdown"], ["slowdown"],
                   ["Predicted run time"]),
    "fleet": (_fleet, ["Fleet: the ranks side by side", "Noisiest ranks", "How the nodes differ",
                       "<th>rank</th><th>node</th><th>CPU</th>", "all 2 ranks]",
                       "rank 1 (", "Periodic noise sources"],
              ["fleet-noise", "fleet-detours", "detours-histogram", "spectrum"],
              ["Noisiest ranks", "How the nodes differ"]),
    "bsp": (_bsp, ["Measured against predicted slowdown", "Slowdown per iteration",
                   "work + collective, measured", "predicted (predict, P=2)", "all 2 ranks]"],
            ["bsp-slowdown", "bsp-iterations"], ["Slowdown per iteration"]),
}


@pytest.fixture(scope="module")
def made(tmp_path_factory, measured_cpu):
    """kind -> bundle directory, each made on first use."""
    root = tmp_path_factory.mktemp("kinds")
    paths: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in paths:
            KINDS[kind][0](root / kind, measured_cpu)
            paths[kind] = root / kind
        return paths[kind]
    return get


def _load(path: Path) -> list:
    inner = sorted(p.parent for p in path.glob("*/manifest.json"))
    return [noisescope.load(p) for p in inner] if not (path / "manifest.json").exists() \
        else [noisescope.load(path)]


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_renders_in_every_format_and_in_show(kind, made, tmp_path):
    _, expected, figures, shown = KINDS[kind]
    bundles = _load(made(kind))
    html = write_report(bundles, tmp_path / "r.html", "html").read_text()
    markdown = write_report(bundles, tmp_path / "r.md", "md").read_text()
    pngs = sorted(p.name for p in write_report(bundles, tmp_path / "png", "png").iterdir())

    if not any(b.summaries.get("attribution") or b.summaries.get("late_wakeups")
               for b in bundles):  # no tracing here: test_trace.py says why
        expected = [t for t in expected if not t.startswith("Causes of")]
        figures = [f for f in figures if f != "causes"]
    for text in expected:
        assert (text if text.startswith("<th>") else str(escape(text))) in html, text
        if not text.startswith("<th>"):
            assert md_escape(text) in markdown, text
    for key in figures:
        assert f'id="figure-{key}"' in html, key
        assert any(name.endswith(f"-{key}.png") for name in pngs), (key, pngs)
        assert re.search(rf"\]\(r_files/\d+-{key}\.png\)", markdown), key
    assert len(pngs) == html.count("<figure ") == markdown.count("](r_files/")
    # the label, from the bundles, is text: escaped in HTML and Markdown
    assert LABEL not in html and str(escape(LABEL)) in html
    assert LABEL not in markdown and md_escape(LABEL) in markdown

    console = Console(file=io.StringIO(), width=120)
    for bundle in bundles:
        print_bundle(bundle, console)
    printed = console.file.getvalue()
    for text in shown:
        assert text in printed, text


def test_show_prints_each_bundle_of_a_run_directory(made):
    done = subprocess.run([*CLI, "show", str(made("run"))], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"== .*probes-before ==", done.stdout)
    assert re.search(r"== .*runs ==", done.stdout)
    assert "Workloads (medians" in done.stdout and "Detours (CPU taken away" in done.stdout


def test_host_bundles_record_the_system_check_and_imports_do_not(made):
    """scan, timerlat and bench findings for this machine; fleet and bsp for every rank;
    an import's findings would describe the importing machine, not the measured one."""
    for kind in ("scan", "timerlat"):
        assert noisescope.load(made(kind)).manifest["system"]
    runs = noisescope.load(made("run") / "runs")
    assert runs.kind == "bench" and runs.manifest["system"]
    assert "system" not in noisescope.load(made("cyclictest")).manifest
    assert "system" not in noisescope.load(made("prediction")).manifest
    for kind in ("fleet", "bsp"):
        findings = noisescope.load(made(kind)).system  # a fleet's: a table
        assert {f["rank"] for f in findings} == {0, 1}
        checks = {f["check"] for f in findings}
        assert all(sum(1 for f in findings if f["check"] == c) == 2 for c in checks)
