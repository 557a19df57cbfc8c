"""Errors about an option name it once, in the library's words; whoever shows
the error says it in the user's: the CLI as its flag, an experiment file as its
key, the library as the keyword."""

from __future__ import annotations

import textwrap

import pytest

from noisescope.cli.common import flag
from noisescope.cli.main import main
from noisescope.errors import UsageError, option
from noisescope.experiment import load_experiment
from noisescope.experiment.files import file_key
from noisescope.timerlat import TimerlatOptions


def test_an_option_is_said_as_a_keyword_a_flag_or_a_file_key():
    error = UsageError(f"{option('duration_ns')} is too short",
                       f"e.g. {option('duration_ns', '10s')} or {option('fifo_priority', '50')}")
    assert error.options == ("duration_ns", "fifo_priority")
    assert str(error) == "duration_ns is too short; e.g. duration_ns=10s or fifo_priority=50"
    assert error.render(flag) == "--duration is too short; e.g. --duration 10s or --fifo 50"
    assert error.render(file_key) == (
        'duration is too short; e.g. duration = "10s" or fifo = 50')
    plain = UsageError("no options {here}", "nothing to say")
    assert plain.options == () and str(plain) == "no options {here}; nothing to say"


@pytest.mark.parametrize("name, spelled", [
    ("duration_ns", "--duration"), ("trace_threshold_ns", "--trace-threshold"),
    ("dma_latency_us", "--dma-latency"), ("buffer_kb", "--trace-buffer"),
    ("message_bytes", "--bytes"), ("fifo_priority", "--fifo"), ("output", "-o"),
    ("replace", "--force"), ("loops", "--loops")])
def test_library_options_map_to_the_flags_that_set_them(name, spelled):
    assert flag(name) == spelled


def test_the_library_names_the_options_the_cli_names_the_flags(capsys):
    with pytest.raises(UsageError) as raised:
        TimerlatOptions(loops=10, duration_ns=10**9).check()
    assert raised.value.options == ("loops", "duration_ns")
    assert str(raised.value) == "loops and duration_ns both given; give one of them"
    assert main(["timerlat", "--loops", "10", "-D", "1s"]) == 2
    assert capsys.readouterr().err == (
        "noisescope: error: --loops and --duration both given; give one of them\n")


def test_an_experiment_file_error_names_the_files_keys(tmp_path):
    file = tmp_path / "e.toml"
    file.write_text(textwrap.dedent("""
        [experiment]
        runs = 0

        [[workload]]
        command = ["true"]
    """))
    with pytest.raises(UsageError) as raised:
        load_experiment(file)
    message = str(raised.value)
    assert message.startswith(f"{file}:3: runs must be >= 1")
    assert message.endswith("e.g. runs = 10 warmup = 1") and "--" not in message
