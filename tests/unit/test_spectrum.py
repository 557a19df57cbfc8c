"""Spectrum analysis on synthetic traces whose periodic sources we know."""

from __future__ import annotations

import numpy as np
import pytest

from noisescope.analysis.spectrum import (
    BIN_NS,
    bundle_spectra,
    detour_pieces,
    find_sources,
    lost_time_series,
    mean_periodogram,
)
from noisescope.bundle import Bundle
from noisescope.tables import Table

SECOND = 1_000_000_000


def pulse_train(rng, rate_hz, length_ns, total_ns, jitter_ns=2_000):
    period = 1e9 / rate_hz
    starts = np.arange(rng.uniform(0, period), total_ns - length_ns - 3 * jitter_ns, period)
    starts = starts + rng.normal(0, jitter_ns, len(starts))
    return starts.astype(np.int64), np.full(len(starts), length_ns, np.int64)


def synthetic_trace(rng, total_ns, trains):
    parts = [pulse_train(rng, rate, length, total_ns) for rate, length in trains]
    random = np.sort(rng.integers(0, total_ns - 10**6, 300 * total_ns // SECOND))
    parts.append((random, rng.lognormal(9, 1, len(random)).astype(np.int64)))
    starts = np.concatenate([p[0] for p in parts])
    durations = np.concatenate([p[1] for p in parts])
    order = np.argsort(starts)
    return starts[order], durations[order]


def windows_table(probe, starts, length_ns, cpu=0):
    starts = np.asarray(starts, np.int64)
    return Table({"cpu": np.full(len(starts), cpu, np.int32),
                  "probe": np.full(len(starts), probe, dtype=object),
                  "start_ns": starts, "end_ns": starts + length_ns})


def test_lost_time_is_the_exact_overlap_with_each_bin():
    starts = np.array([10, 95, 300], np.int64)
    durations = np.array([20, 30, 250], np.int64)
    lost = lost_time_series(starts, durations, 0, 500, bin_ns=100)
    brute = np.zeros(500)
    for s, d in zip(starts, durations, strict=True):
        brute[s:s + d] = 1
    assert lost == pytest.approx(brute.reshape(5, 100).mean(axis=1))


def test_lost_time_counts_every_covered_nanosecond_of_each_bin_once_per_interval():
    # intervals in any order, overlapping each other, across many bins, partly or
    # wholly outside [begin, end), of no length; `end` not on a bin's edge (the
    # part after the last whole bin is left out)
    rng = np.random.default_rng(3)
    for _ in range(200):
        begin, bin_ns = int(rng.integers(-500, 500)), int(rng.integers(1, 40))
        bins = int(rng.integers(0, 30))
        end = begin + bins * bin_ns + int(rng.integers(0, bin_ns))
        starts = rng.integers(begin - 3 * bin_ns, end + 3 * bin_ns, int(rng.integers(0, 40)))
        durations = rng.integers(0, int(rng.choice([bin_ns, 5 * bin_ns, 40 * bin_ns])) + 1,
                                 len(starts))
        covered = np.zeros(bins * bin_ns, np.int64)  # each ns from begin, counted per interval
        for s, d in zip(starts - begin, durations, strict=True):
            covered[max(s, 0):max(min(s + d, len(covered)), 0)] += 1
        want = covered.reshape(bins, bin_ns).sum(axis=1) / bin_ns
        got = lost_time_series(starts.astype(np.int64), durations.astype(np.int64), begin, end,
                               bin_ns)
        assert np.array_equal(got, want)


def test_a_pure_sine_is_found_at_its_frequency_with_all_the_power():
    sample_ns = 1_000_000
    t = np.arange(10_000) * sample_ns / 1e9
    pieces = [0.01 * np.sin(2 * np.pi * 123.4 * t[i:i + 1000]) for i in range(0, 10_000, 1000)]
    spec = mean_periodogram(pieces, sample_ns)
    assert spec.resolution_hz == pytest.approx(1.0)
    # Parseval: the mean power equals the variance (a sine of amplitude A has A^2/2)
    assert spec.power.sum() * spec.resolution_hz == pytest.approx(0.01 ** 2 / 2, rel=0.02)
    (top, *_) = find_sources(spec)
    assert top["frequency_hz"] == pytest.approx(123.4, rel=1e-3)
    assert top["share_pct"] > 95


def test_injected_source_and_tick_in_windowed_detour_trace():
    """SCHED_FIFO-like windows (900 ms of every second): the gaps are left out,
    the 333 Hz source comes first with its harmonics, the tick is named."""
    rng = np.random.default_rng(7)
    total = 10 * SECOND
    starts, durations = synthetic_trace(rng, total, [(333.0, 20_000), (250.0, 13_000)])
    window_starts = np.arange(0, total, SECOND)
    in_window = (starts % SECOND) + durations < 900_000_000
    detours = Table({"cpu": np.zeros(in_window.sum(), np.int32), "start_ns": starts[in_window],
                     "duration_ns": durations[in_window]})
    bundle = Bundle({"summaries": {"detour": [{"cpu": 0, "overflow": 0}]},
                     "parameters": {"injections": [{"cpu": 0, "rate_hz": 333.0}]},
                     "host": {"config_hz": 250}},
                    {"detours": detours,
                     "windows": windows_table("detour", window_starts, 900_000_000)})
    table, (summary,) = bundle_spectra(bundle)
    assert summary["series"] == "detour" and summary["segments"] == 10
    assert summary["segment_ns"] == 900_000_000  # one segment per window, none across a gap
    top, second = summary["sources"][:2]
    assert top["frequency_hz"] == pytest.approx(333.0, rel=0.002)
    assert top["name"] == "injected noise"
    assert len(top["harmonics"]) > 20  # short pulses: a comb of harmonics, grouped
    assert second["frequency_hz"] == pytest.approx(250.0, rel=0.002)
    assert second["name"] == "timer tick (HZ=250)"
    assert top["share_pct"] > second["share_pct"] > 5
    assert table.rows == len(table["frequency_hz"]) and table["frequency_hz"].max() <= 1e9 / BIN_NS / 2


def test_harmonics_above_the_nyquist_frequency_join_their_source_where_they_fold_back():
    # 3.1 kHz pulses sampled at 20 kHz: harmonics 4 and 5 (12.4 and 15.5 kHz) show
    # at 7.6 and 4.5 kHz, where no source of their own may be found
    rng = np.random.default_rng(11)
    total = 10 * SECOND
    starts, durations = synthetic_trace(rng, total, [(3100.0, 3_000)])
    pieces = [lost_time_series(starts, durations, w * SECOND, (w + 1) * SECOND)
              for w in range(10)]
    top, *others = find_sources(mean_periodogram(pieces, BIN_NS))
    assert top["frequency_hz"] == pytest.approx(3100.0, rel=1e-3)
    assert top["harmonics"] == [1, 2, 3, 4, 5]
    assert not [s for s in others if min(abs(s["frequency_hz"] - f) for f in (4500, 7600)) < 50]


def test_ftq_series_spectrum_names_the_injection():
    rng = np.random.default_rng(3)
    quantum = 1_000_000
    total = 8 * SECOND
    starts, durations = synthetic_trace(rng, total, [(333.0, 20_000)])
    lost = lost_time_series(starts, durations, 0, total, bin_ns=quantum)
    work = np.rint(30_000 * (1 - lost)).astype(np.int64)
    ftq = Table({"cpu": np.ones(len(work), np.int32),
                 "start_ns": np.arange(len(work), dtype=np.int64) * quantum, "work": work})
    bundle = Bundle({"summaries": {"ftq": [{"cpu": 1}]},
                     "parameters": {"quantum_ns": quantum,
                                    "injections": [{"cpu": 1, "rate_hz": 333.0}]}},
                    {"ftq": ftq, "windows": windows_table("ftq", np.arange(8) * SECOND, SECOND, cpu=1)})
    _, (summary,) = bundle_spectra(bundle)
    assert summary["nyquist_hz"] == pytest.approx(500)
    assert summary["sources"][0]["frequency_hz"] == pytest.approx(333.0, rel=0.01)
    assert summary["sources"][0]["name"] == "injected noise"


def test_threshold_quantiles_match_the_gamma_distribution():
    from scipy.special import gammainccinv

    from noisescope.analysis.spectrum import _gamma_quantile

    for shape in (1, 3, 10, 600):
        for tail in (0.5, 1e-4, 1e-8):
            exact = gammainccinv(shape, tail) / shape
            assert _gamma_quantile(shape, 1 - tail) == pytest.approx(exact, rel=0.13)


def test_white_noise_has_no_sources():
    rng = np.random.default_rng(11)
    pieces = [rng.normal(0, 0.01, 20_000) for _ in range(20)]
    assert find_sources(mean_periodogram(pieces, BIN_NS)) == []


def test_windows_after_a_detour_buffer_overflow_are_left_out():
    rng = np.random.default_rng(5)
    starts, durations = synthetic_trace(rng, 4 * SECOND, [(333.0, 20_000)])
    keep = starts < 2 * SECOND  # the buffer filled up after 2 s
    detours = Table({"cpu": np.zeros(keep.sum(), np.int32), "start_ns": starts[keep],
                     "duration_ns": durations[keep]})
    windows = windows_table("detour", np.arange(4) * SECOND, SECOND)
    last_end = int((starts[keep] + durations[keep]).max())
    assert len(list(detour_pieces(detours, windows, 0, last_end))) == 1
    assert len(list(detour_pieces(detours, windows, 0, None))) == 4


def test_windows_after_samples_lost_midway_are_left_out():
    """A drain that fell behind for a while (1.5-2.5 s): samples before the
    loss are whole, those after it came after a gap. Only the windows that end
    before the first lost sample count, for the detour trace and the FTQ series."""
    rng = np.random.default_rng(12)
    total, quantum = 4 * SECOND, 1_000_000
    starts, durations = synthetic_trace(rng, total, [(333.0, 20_000)])
    kept = (starts < 1_500_000_000) | (starts >= 2_500_000_000)
    before = int((starts[kept] < 1_500_000_000).sum())
    ftq_starts = np.arange(0, total, quantum, dtype=np.int64)
    ftq_kept = (ftq_starts < 1_500_000_000) | (ftq_starts >= 2_500_000_000)
    lost = lost_time_series(starts, durations, 0, total, bin_ns=quantum)
    summary = {"cpu": 0, "overflow": int((~kept).sum())}
    bundle = Bundle(
        {"summaries": {"detour": [{**summary, "stored_before_loss": before}],
                       "ftq": [{**summary, "stored_before_loss": int((ftq_starts < 1_500_000_000).sum())}]},
         "parameters": {"quantum_ns": quantum}},
        {"detours": Table({"cpu": np.zeros(kept.sum(), np.int32), "start_ns": starts[kept],
                           "duration_ns": durations[kept]}),
         "ftq": Table({"cpu": np.zeros(ftq_kept.sum(), np.int32), "start_ns": ftq_starts[ftq_kept],
                       "work": np.rint(30_000 * (1 - lost[ftq_kept])).astype(np.int64)}),
         "windows": Table.concat([windows_table(probe, np.arange(4) * SECOND, SECOND)
                                  for probe in ("detour", "ftq")])})
    _, summaries = bundle_spectra(bundle)
    assert {s["series"]: s["segments"] for s in summaries} == {"detour": 1, "ftq": 1}


def test_a_comb_without_its_fundamental_is_one_source_and_the_tick_stays_apart():
    """As on the development VM: lines at 800, 900, 1100, ... Hz (a 100 Hz host
    timer whose own line is too weak to show) beside the 250 Hz tick."""
    from noisescope.analysis.spectrum import Spectrum

    rng = np.random.default_rng(4)
    frequency = np.fft.rfftfreq(20_000, BIN_NS / 1e9)  # 1 Hz bins up to 10 kHz
    power = rng.gamma(10, 1 / 10, len(frequency))  # 10 averaged periodograms of noise
    for f in [800, 900, 1100, 1200, 1300, 1400, 1600, 1700, 1900, 2100, 2300]:
        power[f - 1:f + 2] += [20, 40, 20]
    for f in range(250, 5001, 250):
        power[f - 1:f + 2] += [40, 80, 40]
    spec = Spectrum(frequency, power, BIN_NS, 20_000, 10)
    sources = find_sources(spec, {250.0: "timer tick (HZ=250)"})
    assert [round(s["frequency_hz"]) for s in sources[:2]] == [250, 100]
    assert sources[0]["name"] == "timer tick (HZ=250)" and sources[1]["name"] is None
    assert 1 not in sources[1]["harmonics"] and {8, 9, 12, 23} <= set(sources[1]["harmonics"])
    assert len(sources) == 2


def test_a_weak_tick_beside_a_loud_host_timer_is_still_listed():
    """As in a CI run: a 100 Hz host source held 11% of the power and the
    tick's lines less than the 0.5% an unnamed source needs to be listed."""
    from noisescope.analysis.spectrum import MIN_SHARE_PCT, Spectrum

    rng = np.random.default_rng(9)
    frequency = np.fft.rfftfreq(20_000, BIN_NS / 1e9)  # 1 Hz bins up to 10 kHz
    power = rng.gamma(10, 1 / 10, len(frequency))
    for f in range(100, 5001, 100):
        power[f - 1:f + 2] += [600, 1200, 600]
    power[249:252] += [4, 8, 4]  # the tick's fundamental only, well above the background
    spec = Spectrum(frequency, power, BIN_NS, 20_000, 10)
    sources = find_sources(spec, {250.0: "timer tick (HZ=250)"})
    tick = [s for s in sources if s["name"] == "timer tick (HZ=250)"]
    assert len(tick) == 1 and tick[0]["frequency_hz"] == pytest.approx(250, rel=0.002)
    assert 0 < tick[0]["share_pct"] < MIN_SHARE_PCT
    assert find_sources(spec)[0]["frequency_hz"] == pytest.approx(100, rel=0.002)
    assert all(round(s["frequency_hz"]) != 250 for s in find_sources(spec))  # unnamed: too weak


def test_a_line_at_a_known_frequency_is_never_a_harmonic_of_another():
    """A 125 Hz source (another task's timer) must not swallow the 250 Hz tick."""
    rng = np.random.default_rng(6)
    starts, durations = synthetic_trace(rng, 6 * SECOND, [(125.0, 30_000), (250.0, 13_000)])
    pieces = [lost_time_series(starts, durations, w * SECOND, (w + 1) * SECOND) for w in range(6)]
    sources = find_sources(mean_periodogram(pieces, BIN_NS), {250.0: "timer tick (HZ=250)"})
    tick = [s for s in sources if s["name"]]
    other = [s for s in sources if not s["name"]]
    assert len(tick) == 1 and tick[0]["frequency_hz"] == pytest.approx(250, rel=0.002)
    assert other[0]["frequency_hz"] == pytest.approx(125, rel=0.002)  # the strongest unnamed


def test_windows_a_sample_short_still_count():
    """A window that started late holds one quantum less; it is not thrown away."""
    rng = np.random.default_rng(8)
    pieces = [rng.normal(0, 0.01, 1000 - (i % 2)) for i in range(10)]
    spec = mean_periodogram(pieces, 1_000_000)
    assert spec.segments == 10 and spec.segment_samples == 999


@pytest.mark.parametrize("length", [1, 2, 50, 101, 2_000])
def test_the_running_median_is_the_median_of_each_mirrored_window(length):
    """The background's running median (a sorted window moved along in the
    native core) is, for every bin, np.median of the BACKGROUND_BINS values
    around it with the ends mirrored: ties (values drawn from four) and
    spectra shorter than the window too; non-finite power is refused."""
    from noisescope.analysis.spectrum import BACKGROUND_BINS, _running_median

    rng = np.random.default_rng(length)
    for values in (rng.exponential(1.0, length), rng.integers(0, 4, length).astype(float)):
        half = BACKGROUND_BINS // 2
        windows = np.lib.stride_tricks.sliding_window_view(
            np.pad(values, half, mode="reflect"), BACKGROUND_BINS)
        assert np.array_equal(_running_median(values, BACKGROUND_BINS), np.median(windows, axis=1))
    with pytest.raises(ValueError, match="not all finite"):
        _running_median(np.array([1.0, np.nan, 2.0]), 3)
