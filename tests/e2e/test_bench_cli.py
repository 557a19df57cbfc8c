"""`noisescope bench`, `run` and `compare` end to end, through the installed command."""

from __future__ import annotations

import csv
import io
import json
import sys
import textwrap

import numpy as np
import pytest

import noisescope

from ..helpers import assert_usage_error, interrupted_run
from ..unit.test_bundle import validate
from .test_scan_cli import CLI, run

# A fixed amount of CPU work (about 0.15 s here).
CPU_BOUND = "s = 0\nfor i in range(1_500_000): s += i\nprint('done', s)"


def test_injected_noise_on_the_workload_cpu_is_a_significant_slowdown(tmp_path, measured_cpu):
    """Two configurations run interleaved: the same CPU-bound command alone on
    its CPU, and with 1 kHz x 500 us of injected noise (a SCHED_FIFO thread
    where permitted) on that CPU. The noise takes half the CPU away from the
    command: its wall time about doubles (more than the other tasks of a
    shared machine can hide), while its own user and system time hardly
    change (the injector's time is not charged to it)."""
    experiment = tmp_path / "noise.toml"
    experiment.write_text(textwrap.dedent(f"""
        [experiment]
        runs = 6
        warmup = 1

        [[workload]]
        name = "loop"
        command = ["{sys.executable}", "-c", {json.dumps(CPU_BOUND)}]
        metrics = {{ sum = "done ([0-9]+)" }}

        [[configuration]]
        name = "quiet"
        cpus = "{measured_cpu}"

        [[configuration]]
        name = "noisy"
        cpus = "{measured_cpu}"
        inject = ["1kHz:500us@cpu{measured_cpu}"]
    """))
    out = tmp_path / "out"
    done = run("run", str(experiment), "--label", "vm", "-o", str(out), "-q", timeout=300)
    assert done.returncode == 0, done.stderr
    bundle = noisescope.load(out / "runs")
    validate(bundle.manifest)
    runs = bundle.runs
    assert runs.rows == 14 and (runs.status == "ok").all()
    noisy = runs.filter((runs.configuration == "noisy") & ~runs.warmup)
    quiet = runs.filter((runs.configuration == "quiet") & ~runs.warmup)
    assert (noisy.injected > 0).all() and (quiet.injected == 0).all()
    # Injections that land while the command computes preempt it (not those
    # during its start-up waits), each at most once; other tasks preempt it
    # at the rate they do in the quiet runs interleaved with these, over the
    # noisy runs' longer wall time (medians over the runs, twice that rate
    # allowed for: a shared machine's load comes and goes).
    assert (noisy.involuntary_switches >= 0.25 * noisy.injected).all()
    others_per_s = np.median(quiet.involuntary_switches / (quiet.wall_ns / 1e9))
    others = 2 * others_per_s * np.median(noisy.wall_ns) / 1e9
    assert np.median(noisy.involuntary_switches) <= np.median(noisy.injected) + others, (
        noisy.involuntary_switches, noisy.injected, quiet.involuntary_switches, others)

    shown = run("compare", str(out), "--baseline", "vm/quiet", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    rows = {(r["metric"], r["configuration"]): r for r in json.loads(shown.stdout)["rows"]}
    wall = rows[("wall_ns", "vm/noisy")]
    cpu_time_change = (noisy.user_ns + noisy.sys_ns).mean() / (quiet.user_ns + quiet.sys_ns).mean()
    assert wall["significant"] and wall["verdict"] == "worse", wall
    assert 30 < wall["change"] < 400 and wall["ci_low"] > 10
    # User and system time together: with tick-based accounting the kernel splits
    # a task's CPU time by what the tick sampled, and a 1 kHz injector phase-locked
    # with the tick can leave a noisy run no user sample at all (all of it "sys").
    assert abs(100 * (cpu_time_change - 1)) < wall["change"] / 2
    assert rows[("metric_sum", "vm/noisy")]["verdict"] == "not significant"  # same result

    table = run("compare", str(out), "--baseline", "vm/quiet")
    assert "Perturbation" in table.stdout and "not significant" in table.stdout


def test_bench_writes_a_bundle_with_every_run(tmp_path):
    out = tmp_path / "b"
    done = run("bench", "--runs", "3", "--warmup", "1", "--label", "plain", "--metric",
               "n=count=([0-9]+)", "--metric", "never=zzz ([0-9]+)", "-o", str(out), "--",
               "sh", "-c", "echo count=5; test -e /nonexistent-noisescope || exit 0")
    assert done.returncode == 0, done.stderr
    assert "Workloads" in done.stdout and "label: plain" in done.stdout
    assert "metric never (pattern 'zzz ([0-9]+)') not found in the output of 3 of 3" in done.stdout
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert bundle.kind == "bench" and bundle.label == "plain" and bundle.complete
    runs = bundle.runs
    assert runs.rows == 4 and runs.warmup.tolist() == [True, False, False, False]
    assert runs.metric_n.tolist() == [5.0] * 4
    assert "1/4 sh warm-up" in done.stderr
    shown = run("show", str(out))
    assert shown.stdout.splitlines()[2:] == done.stdout.splitlines()[2:]


def test_failed_runs_are_kept_and_left_out(tmp_path):
    out = tmp_path / "b"
    script = "n=$(cat counter 2>/dev/null || echo 0); echo $((n+1)) > counter; [ $n -ne 1 ]"
    done = run("bench", "--runs", "3", "--warmup", "0", "-o", str(out), "--shell", "--", script,
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    runs = noisescope.load(out).runs
    assert runs.status.tolist() == ["ok", "failed", "ok"]
    assert runs.reason[1] == "exit status 1"
    assert "1 of 3 runs excluded from statistics (1 x exit status 1)" in done.stdout
    compared = run("compare", str(out), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(compared.stdout)))
    assert {r["n"] for r in rows} == {"2"}
    assert "1 of 3 runs left out (1 failed)" in compared.stderr


@pytest.mark.parametrize("args, words", [
    (["bench", "--", "no-such-program-noisescope"], "command 'no-such-program-noisescope' not "
     "found in PATH"),
    (["bench", "--metric", "tps", "--", "true"], "cannot read metric 'tps'"),
    (["bench", "--metric", "tps=(", "--", "true"], "bad regular expression"),
    (["bench", "--cpus", "999", "--", "true"], "CPU 999 is offline"),
    (["bench", "--ncpus", "999", "--", "true"], "999 CPUs requested"),
    (["bench", "--fifo", "120", "--", "true"], "SCHED_FIFO priority 120 is out of range"),
    (["bench", "--inject", "1kHz@cpu0", "--", "true"], "cannot read noise"),
    (["bench", "--inject", "1kHz:20us@cpu0/signal", "--", "true"], "needs a sampler thread"),
    (["bench", "--runs", "0", "--", "true"], "runs must be >= 1"),
    (["bench", "--timeout", "0", "--", "true"], "greater than zero"),
    (["bench", "--shell", "--", "true", "x"], "give the command as one string"),
    (["run", "missing.toml"], "cannot read experiment file missing.toml"),
    (["compare", "/nonexistent"], "does not exist"),
    (["compare", "."], "is not a noisescope bundle and holds none"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_run(args, words, tmp_path):
    # nothing written: no run started
    assert_usage_error(run(*args, cwd=tmp_path, timeout=60), words, tmp_path)


def test_core_scheduling_where_the_kernel_lacks_it(tmp_path):
    done = run("bench", "--core-sched", "--runs", "1", "-o", str(tmp_path / "b"), "--", "true")
    if done.returncode == 0:
        pytest.skip("this kernel has core scheduling")
    assert done.returncode == 2
    assert "core scheduling is not available: prctl(PR_SCHED_CORE) failed" in done.stderr
    assert not (tmp_path / "b").exists()


def test_an_experiment_file_mistake_names_file_line_and_key(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('[[workload]]\nname = "a"\ncommand = ["true"]\nmetric = { x = "y" }\n')
    done = run("run", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"noisescope: error: {path}:4: unknown key 'metric' in "
                                  f"[[workload]] 1; known keys: command, cwd, env, metrics")


def test_ctrl_c_keeps_every_completed_run(tmp_path):
    out = tmp_path / "b"
    proc = interrupted_run([*CLI, "bench", "--runs", "40", "--warmup", "0", "-o", str(out), "-q",
                            "--", "sleep", "0.2"], 2.5)
    assert proc.returncode == 130
    bundle = noisescope.load(out)
    validate(bundle.manifest)
    assert not bundle.complete and "interrupted" in [w.code.value for w in bundle.warnings]
    statuses = bundle.runs.status.tolist()
    assert 3 <= statuses.count("ok") < 40
    assert set(statuses) <= {"ok", "interrupted"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial left


def test_help_ends_with_examples():
    for command in ("bench", "run", "compare"):
        text = run(command, "--help").stdout
        assert "EXAMPLES" in text and text.strip().splitlines()[-1].strip().startswith(
            "noisescope"), text
