"""Experiment files: what they mean, and errors that name file, line and key."""

from __future__ import annotations

import textwrap

import pytest

from noisescope.errors import UsageError
from noisescope.experiment import load_experiment, override, plan_steps

GOOD = """
[experiment]
name = "suite"
runs = 3
warmup = 1
timeout = "30s"

[probes]
before = ["detour"]
duration = "2s"

[[workload]]
name = "compress"
command = ["xz", "-9", "-c", "data.bin"]
metrics = { ratio = "ratio ([0-9.]+)", latency = { pattern = "p99 ([0-9.]+)", better = "lower" } }

[[workload]]
shell = "make -j2 && make clean"
cwd = "project"
env = { CFLAGS = "-O2" }

[[configuration]]
name = "packed"
ncpus = 2
layout = "packed"

[[configuration]]
name = "noisy"
cpus = "1"
inject = ["1kHz:20us@cpu1"]
"""


def write(tmp_path, text: str):
    path = tmp_path / "exp.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_complete_file(tmp_path):
    experiment = load_experiment(write(tmp_path, GOOD))
    assert experiment.name == "suite" and experiment.runs == 3 and experiment.warmup == 1
    assert experiment.timeout_ns == 30 * 10**9
    compress, make = experiment.workloads
    assert compress.argv == ("xz", "-9", "-c", "data.bin") and not compress.shell
    assert [(m.name, m.better) for m in compress.metrics] == [("ratio", "higher"),
                                                              ("latency", "lower")]
    assert make.name == "make" and make.shell and make.command[:2] == ["/bin/sh", "-c"]
    assert make.cwd == str(tmp_path / "project")  # relative to the file
    assert compress.cwd == str(tmp_path)
    assert dict(make.env) == {"CFLAGS": "-O2"}
    packed, noisy = experiment.configurations
    assert packed.placement.ncpus == 2 and packed.placement.layout == "packed"
    assert noisy.placement.cpus == (1,)
    assert noisy.injections[0].mode == "thread" and noisy.injections[0].cpu == 1
    assert experiment.probes.before == ("detour",) and experiment.probes.duration_ns == 2 * 10**9


def test_interleaved_order_runs_every_configuration_each_round(tmp_path):
    experiment = override(load_experiment(write(tmp_path, GOOD)), runs=2, warmup=1)
    steps = plan_steps(experiment)
    assert len(steps) == 2 * 2 * (2 + 1)
    warm = [s for s in steps if s.warmup]
    assert len(warm) == 4 and steps[:4] == warm
    first_round = [(s.configuration.name, s.workload.name) for s in steps[4:8]]
    assert first_round == [("packed", "compress"), ("packed", "make"), ("noisy", "compress"),
                           ("noisy", "make")]


@pytest.mark.parametrize("text, line, words", [
    ('[experiment]\nruns = 3\nrnus = 4\n[[workload]]\ncommand = ["true"]\n', 3,
     "unknown key 'rnus' in [experiment]"),
    ('[[workload]]\ncommand = ["true"]\n\n[[workload]]\nname = "b"\ncomand = ["x"]\n', 6,
     "unknown key 'comand' in [[workload]] 2"),
    ('[experiment]\nruns = "ten"\n[[workload]]\ncommand = ["true"]\n', 2,
     "runs in [experiment] must be an integer, not 'ten'"),
    ('[[workload]]\ncommand = "true"\n', 2, "command in [[workload]] 1 must be a list"),
    ('[[workload]]\ncommand = ["true"]\n[[configuration]]\nname = "x"\nfifo = "high"\n', 5,
     "fifo in [[configuration]] 1 must be an integer"),
    ('[[workload]]\ncommand = ["true"]\n[[configuration]]\nname = "x"\ncpus = "3-1"\n', 5,
     "CPU range '3-1' runs backwards"),
    ('[[workload]]\ncommand = ["true"]\nmetrics = { tps = { pattern = "(", better = "up" } }\n',
     3, "better must be higher or lower"),
    ('[[workload]]\ncommand = ["true"]\n[probes]\nbefore = ["detour", "nope"]\n', 4,
     "unknown probe 'nope'"),
    ('[experiment]\ntimeout = "soon"\n[[workload]]\ncommand = ["true"]\n', 2,
     "cannot read timeout 'soon'"),
    ('[workloads]\nx = 1\n', 1, "unknown section 'workloads'"),
    ('[[workload]]\nname = "a"\n', 1, "needs either command"),
    ('[[workload]]\ncommand = ["true"]\n[[configuration]]\ncpus = "1"\n', 3, "has no name"),
])
def test_mistakes_name_file_line_and_key(tmp_path, text, line, words):
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as caught:
        load_experiment(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert words in message, message


def test_toml_syntax_errors_say_where(tmp_path):
    path = write(tmp_path, '[experiment]\nruns = \n')
    with pytest.raises(UsageError, match=r"not valid TOML.*line 2"):
        load_experiment(path)


def test_an_experiment_needs_a_workload(tmp_path):
    with pytest.raises(UsageError, match="no workload"):
        load_experiment(write(tmp_path, '[experiment]\nruns = 3\n'))


def test_a_missing_file(tmp_path):
    with pytest.raises(UsageError, match="cannot read experiment file"):
        load_experiment(tmp_path / "nope.toml")


def test_a_subset_of_configurations(tmp_path):
    experiment = load_experiment(write(tmp_path, GOOD))
    only = override(experiment, configurations=["noisy"])
    assert [c.name for c in only.configurations] == ["noisy"]
    with pytest.raises(UsageError, match="no configuration nope in the experiment; choose from: "
                                         "packed, noisy"):
        override(experiment, configurations=["nope"])
