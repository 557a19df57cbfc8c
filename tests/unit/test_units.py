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


# -- bounds: every parser refuses what no command can use, before allocating for it --

@pytest.mark.parametrize("text", ["1e300s", "9000h", "1e400", "99999999999999999999999h",
                                  1e300, -1.0])
def test_durations_beyond_the_maximum_or_negative_are_refused(text):
    with pytest.raises(UsageError, match="--for"):
        parse_duration(text, what="--for")


def test_the_longest_duration_is_366_days():
    from noisescope.units import MAX_DURATION_NS

    assert parse_duration("8784h") == MAX_DURATION_NS == 366 * 24 * 3600 * 10**9
    with pytest.raises(UsageError, match="too long"):
        parse_duration("8784.001h")


@pytest.mark.parametrize("text", ["0-999999999999999", "99999999999999999999999", "8192",
                                  "0,8192", "0-8192"])
def test_cpu_numbers_beyond_the_kernels_limit_are_refused_before_expanding(text):
    with pytest.raises(UsageError, match="beyond the largest possible"):
        parse_cpu_list(text)


def test_the_largest_cpu_number_and_another_limit():
    assert parse_cpu_list("8190-8191") == (8190, 8191)
    assert parse_cpu_list("0-3", limit=4) == (0, 1, 2, 3)
    with pytest.raises(UsageError, match="ranks"):
        parse_cpu_list("4", what="ranks", limit=4)


@pytest.mark.parametrize("text", ["2^999999", "2^64", pytest.param("9" * 5000, id="5000 digits"),
                                  "17M"])
def test_counts_beyond_the_maximum_are_refused(text):
    from noisescope.units import parse_count

    with pytest.raises(UsageError, match="too large"):
        parse_count(text, what="--procs", maximum=16 << 20)


def test_counts_up_to_the_maximum_are_read():
    from noisescope.units import parse_count, parse_count_list

    assert parse_count("2^24", maximum=1 << 24) == 1 << 24
    assert parse_count_list("2,16M", maximum=16 << 20) == (2, 16 << 20)


@pytest.mark.parametrize("text", ["100000G", "1e400", "1e400G"])
def test_sizes_beyond_the_maximum_are_refused(text):
    from noisescope.units import parse_size_kib

    with pytest.raises(UsageError, match="too large"):
        parse_size_kib(text, what="--trace-buffer", maximum_kib=1 << 20)


def test_size_formats_read_back_rounded_down():
    from noisescope.units import format_size_kib, parse_size_kib

    assert format_size_kib(65536) == "64M" and format_size_kib(5.56 * (1 << 20)) == "5.5G"
    assert parse_size_kib(format_size_kib(5.56 * (1 << 20))) <= 5.56 * (1 << 20)


@pytest.mark.parametrize("text", ["2GHz", "1e300Hz", "1e10"])
def test_rates_above_a_gigahertz_are_refused(text):
    with pytest.raises(UsageError, match="too high"):
        parse_rate(text)


def test_noise_that_takes_the_whole_cpu_is_refused_however_it_is_given():
    from noisescope.units import parse_noise

    with pytest.raises(UsageError, match="whole CPU"):
        parse_noise("1kHz", "2ms", rate_what="--rate", length_what="--length")
    with pytest.raises(UsageError, match="whole CPU"):
        parse_noise_spec("1MHz:1us")
    assert parse_noise("1kHz", "20us") == (1000.0, 20_000)


def test_long_durations_are_shown_in_hours_or_days():
    assert format_duration(3_600 * 10**9) == "1 h"
    assert format_duration(8784 * 3_600 * 10**9) == "366 d"
    assert format_duration(999 * 10**9) == "999 s"
