import pytest

from noisescope.errors import UsageError
from noisescope.units import (
    format_cpu_list,
    format_duration,
    format_rate,
    parse_cpu_list,
    parse_duration,
    parse_noise_spec,
    parse_positive_duration,
    parse_rate,
)


@pytest.mark.parametrize("text, ns", [
    ("10s", 10_000_000_000), ("1.5ms", 1_500_000), ("20us", 20_000), ("20µs", 20_000),
    ("250ns", 250), ("2m", 120_000_000_000), ("1h", 3_600_000_000_000), (" 3 s ", 3_000_000_000),
    ("0.5", 500_000_000), ("1e3ns", 1000),
])
def test_parse_duration(text, ns):
    assert parse_duration(text) == ns


def test_default_unit_applies_to_bare_numbers():
    assert parse_duration("250", default_unit="ns") == 250


@pytest.mark.parametrize("text", ["10q", "", "s", "ten seconds", "1..2s", "inf"])
def test_parse_duration_rejects(text):
    with pytest.raises(UsageError) as error:
        parse_duration(text, what="--duration")
    assert "--duration" in str(error.value)
    assert error.value.hint


@pytest.mark.parametrize("text", ["0", "0s", "-1s"])
def test_positive_duration_rejects_zero_and_negative(text):
    with pytest.raises(UsageError):
        parse_positive_duration(text)


def test_format_duration_picks_readable_units():
    assert format_duration(1_500_000) == "1.5 ms"
    assert format_duration(20_000) == "20 us"
    assert format_duration(999) == "999 ns"
    assert format_duration(None) == "-"


@pytest.mark.parametrize("text, hz", [("1kHz", 1000.0), ("250Hz", 250.0), ("333", 333.0),
                                      ("2.5 kHz", 2500.0), ("1MHz", 1e6)])
def test_parse_rate(text, hz):
    assert parse_rate(text) == pytest.approx(hz)


@pytest.mark.parametrize("text", ["0Hz", "-5Hz", "1 kilohertz", "fast"])
def test_parse_rate_rejects(text):
    with pytest.raises(UsageError):
        parse_rate(text)


def test_format_rate():
    assert format_rate(1000.0) == "1 kHz"
    assert format_rate(250.0) == "250 Hz"


@pytest.mark.parametrize("text, cpus", [("0-3,8", (0, 1, 2, 3, 8)), ("1", (1,)),
                                        ("3,1,1", (1, 3)), ("0-1, 4-5", (0, 1, 4, 5))])
def test_parse_cpu_list(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "3-1", "1-", "-1"])
def test_parse_cpu_list_rejects(text):
    with pytest.raises(UsageError):
        parse_cpu_list(text)


@pytest.mark.parametrize("cpus", [(0, 1, 2, 5), (7,), (0, 2, 4), tuple(range(64))])
def test_cpu_list_round_trips(cpus):
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


def test_noise_spec():
    assert parse_noise_spec("1kHz:20us") == (1000.0, 20_000)


@pytest.mark.parametrize("text", ["1kHz", "1kHz:2ms", "x:20us", "1kHz:0us"])
def test_noise_spec_rejects(text):
    with pytest.raises(UsageError):
        parse_noise_spec(text)
