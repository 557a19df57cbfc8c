"""Periodic noise sources: power spectra of the FTQ series and of the detour trace.

Both probes become a uniform series of "fraction of the CPU lost" per sample:
FTQ gives 1 - work/best for each quantum (quanta sit on absolute deadlines);
the detour trace gives the time lost inside each BIN_NS bin, computed exactly
from the detour intervals. Only measured time counts: every measuring window
is cut into equal segments, and the spectrum is the average of the segments'
periodograms (Welch without overlap), so the gaps between windows never enter
the series as made-up samples.

Peaks well above the local background (a running median, with a threshold set
for a small false-alarm chance) are grouped into sources: a peak at an integer
multiple of a lower source's frequency (or at the alias of one between the
Nyquist and the sampling frequency) that is not much stronger than that source's
lines is one of its harmonics. A source has a frequency (refined from its harmonics), the share of
the noise's power (variance) its peaks hold, and a strength: its strongest
line in dB over the background. Sources that are multiples of one frequency
with no line of its own are one source whose fundamental is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from .. import _native
from ..tables import SpooledTable, Table, cpu_batches, repeated
from ..workers import run_parts, worker_count

SECOND = 1_000_000_000
BIN_NS = 50_000  # detour trace sampling: Nyquist frequency 10 kHz
SEGMENT_NS = 2 * SECOND  # longest stretch one periodogram covers (resolution 0.5 Hz)
BACKGROUND_BINS = 101  # running median width for the background level
FALSE_ALARM = 1e-3  # chance that pure noise shows one peak anywhere in a spectrum
MAIN_LOBE = 2  # a Hann-windowed line spreads over +-2 bins
MIN_CYCLES = 3  # a source must repeat at least this often per segment
HARMONIC_EXCESS = 4.0  # a harmonic is at most this much stronger than the source's strongest line
MAX_HARMONIC = 64
MIN_COMB = 3  # sources needed to infer a fundamental that shows no line itself
MAX_SOURCES = 8  # unnamed ones; known ones (tick, injected) are always listed
MIN_SHARE_PCT = 0.5  # weaker unnamed lines are listed in the spectrum table only
NAME_TOLERANCE = 0.01  # a source within 1% of a known frequency takes its name
CHUNK_SAMPLES = 1 << 18  # samples transformed at once (numpy transforms several segments
# together 35-40% faster than one at a time): about 6 MB of temporaries


@dataclass(frozen=True)
class Spectrum:
    """Mean periodogram of equal segments; power in (fraction of CPU)^2 per Hz."""

    frequency_hz: np.ndarray
    power: np.ndarray
    sample_ns: int
    segment_samples: int
    segments: int

    @property
    def resolution_hz(self) -> float:
        return SECOND / (self.segment_samples * self.sample_ns)

    @property
    def sampling_hz(self) -> float:
        return SECOND / self.sample_ns


def periodic_hann(n: int) -> np.ndarray:
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def mean_periodogram(pieces: Iterable[np.ndarray], sample_ns: int,
                     typical_samples: int | None = None) -> Spectrum | None:
    """Average Hann-windowed periodogram of equal-length, mean-removed segments.

    Each piece (one measuring window's series) is cut into segments of the
    typical piece length (usual_length(), at most SEGMENT_NS); what is left
    over at a piece's end is not used. Pieces are consumed one by one, so a generator keeps
    memory bounded however long the measurement."""
    if typical_samples is None:
        pieces = list(pieces)
        typical_samples = usual_length([len(p) for p in pieces])
    length = min(typical_samples, int(SEGMENT_NS // sample_ns))
    if length < 4 * MIN_CYCLES:
        return None
    window = periodic_hann(length)
    total = np.zeros(length // 2 + 1)
    per_chunk = max(1, CHUNK_SAMPLES // length)
    pending: list[np.ndarray] = []
    count = 0

    def transform() -> None:
        block = np.array(pending, dtype=np.float64)  # (one copy: the pieces are views)
        block -= block.mean(axis=1, keepdims=True)
        block *= window
        spectrum = np.fft.rfft(block, axis=1)
        power = spectrum.real ** 2
        power += spectrum.imag ** 2
        for segment in power:  # one at a time: the sum does not depend on how they are grouped
            np.add(total, segment, out=total)
        pending.clear()

    for piece in pieces:
        for k in range(len(piece) // length):
            pending.append(piece[k * length:(k + 1) * length])
            count += 1
            if len(pending) == per_chunk:
                transform()
    if pending:
        transform()
    if count == 0:
        return None
    scale = sample_ns / SECOND / (window ** 2).sum()  # one-sided power spectral density
    power = total * scale / count
    power[1:-1 if length % 2 == 0 else None] *= 2
    frequency = np.fft.rfftfreq(length, sample_ns / SECOND)
    return Spectrum(frequency, power, sample_ns, length, count)


def usual_length(lengths) -> int:
    """A segment length that fits 90% of the pieces: windows a late start made a
    sample shorter, or the short last window, then lose little or nothing."""
    return int(np.percentile(lengths, 10)) if len(lengths) else 0


def window_samples(windows: Table, cpu: int, probe: str, sample_ns: int) -> int:
    """usual_length() of the pieces detour_pieces() makes from these windows."""
    begin, end = _window_ranges(windows, cpu, probe)
    return usual_length((end - begin) // sample_ns)


def _window_ranges(windows: Table, cpu: int, probe: str) -> tuple[np.ndarray, np.ndarray]:
    mine = windows.where(cpu=cpu, probe=probe)
    order = np.argsort(mine["start_ns"])
    return mine["start_ns"][order], mine["end_ns"][order]


def lost_time_series(starts: np.ndarray, durations: np.ndarray, begin: int, end: int,
                     bin_ns: int = BIN_NS) -> np.ndarray:
    """Fraction of each bin in [begin, end) covered by detours (exact overlap,
    summed in integer ns by the native core: coverage.h)."""
    covered = np.zeros(max(0, int((end - begin) // bin_ns)), np.int64)
    _native.covered_time(np.ascontiguousarray(starts, np.int64),
                         np.ascontiguousarray(durations, np.int64), int(begin), int(bin_ns),
                         covered)
    return covered / bin_ns


def _window_slices(batches: Iterable[Table], begins: np.ndarray, ends: np.ndarray,
                   start: str, value: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """For each window [begin, end) in order, the `start` and `value` columns of
    the rows that start in it; `batches` (rows in order of `start`) are read
    only as far as the window needs."""
    more = iter(batches)
    held_start, held_value = np.zeros(0, np.int64), np.zeros(0, np.int64)
    for begin, end in zip(begins, ends, strict=True):
        while not len(held_start) or held_start[-1] < end:
            batch = next(more, None)
            if batch is None:
                break
            held_start = np.concatenate((held_start, batch[start]))
            held_value = np.concatenate((held_value, batch[value]))
        lo, hi = np.searchsorted(held_start, [begin, end])
        yield held_start[lo:hi], held_value[lo:hi]
        held_start, held_value = held_start[hi:], held_value[hi:]


def detour_pieces(detours: Table | SpooledTable, windows: Table, cpu: int,
                  stored_until_ns: int | None) -> Iterator[np.ndarray]:
    """Lost-time series of each detour window of `cpu` that the stored trace
    covers whole (up to `stored_until_ns`, if given)."""
    begins, ends = _window_ranges(windows, cpu, "detour")
    if stored_until_ns is not None:  # detours were lost from there on (counted, not stored)
        whole = np.cumprod(ends <= stored_until_ns).astype(bool)
        begins, ends = begins[whole], ends[whole]
    slices = _window_slices(cpu_batches(detours, cpu, "start_ns"), begins, ends, "start_ns",
                            "duration_ns")
    for begin, end, (starts, durations) in zip(begins, ends, slices, strict=True):
        yield lost_time_series(starts, durations, int(begin), int(end))


def ftq_pieces(ftq: Table | SpooledTable, windows: Table, cpu: int,
               stored_until_ns: int | None = None) -> Iterator[np.ndarray]:
    """1 - work/best for the quanta of each FTQ window of `cpu` that ends before
    `stored_until_ns` (if given)."""
    best = max((int(batch["work"].max()) for batch in cpu_batches(ftq, cpu, "start_ns")
                if batch.rows), default=0)
    if best <= 0:
        return
    w_start, w_end = _window_ranges(windows, cpu, "ftq")
    if stored_until_ns is not None:
        whole = w_end <= stored_until_ns
        w_start, w_end = w_start[whole], w_end[whole]
    for _, work in _window_slices(cpu_batches(ftq, cpu, "start_ns"), w_start, w_end,
                                  "start_ns", "work"):
        if len(work):
            yield 1.0 - work / best


def _running_median(values: np.ndarray, width: int) -> np.ndarray:
    """The median of the `width` values (odd) around each, the ends mirrored:
    a sorted window moved along in the native core (np.median partitioned a
    copy of every window: a fifth of a spectrum's cost)."""
    if not np.isfinite(values).all():
        raise ValueError("a running median of values that are not all finite")
    padded = np.pad(np.asarray(values, np.float64), width // 2, mode="reflect")
    out = np.empty(len(values), np.float64)
    _native.sliding_median(padded, width, out)
    return out


def _gamma_quantile(shape: float, probability: float) -> float:
    """Quantile of Gamma(shape, scale 1/shape): the mean of `shape` periodograms of
    noise relative to its expectation (chi-square with 2*shape degrees of freedom
    over 2*shape). Wilson-Hilferty's approximation (within 10% in the far tail):
    scipy.special would add 25 MB to the measuring process for this one number."""
    if shape == 1:  # one periodogram: exponential, exactly
        return -math.log1p(-probability)
    z = NormalDist().inv_cdf(probability)
    return max(0.0, 1 - 1 / (9 * shape) + z / (9 * shape) ** 0.5) ** 3


def _threshold_factor(segments: int, bins: int) -> tuple[float, float]:
    """(background mean / median, threshold / background mean) for an average of
    `segments` periodograms, whose noise-only bins follow Gamma(K, mean/K)."""
    k = float(segments)
    level = _gamma_quantile(k, 1 - min(0.5, FALSE_ALARM / max(bins, 1)))
    return 1.0 / _gamma_quantile(k, 0.5), level


@dataclass
class _Peak:
    bin: int
    frequency_hz: float
    power: float  # power at the peak bin (density)
    lobe_power: float  # variance in the main lobe
    strength_db: float


@dataclass
class _Source:
    lines: dict[int, _Peak]  # harmonic number -> its peak (lines join by add())
    _fitted: tuple[float, float] | None = field(default=None, init=False, repr=False,
                                                compare=False)
    # (sampling_hz, frequency) as last fitted: asked for again and again while sources are
    # matched and merged, it changes only when a line joins

    def add(self, n: int, peak: _Peak) -> None:
        self.lines[n] = peak
        self._fitted = None

    @property
    def lobe_power(self) -> float:
        return sum(p.lobe_power for p in self.lines.values())

    @property
    def strongest(self) -> _Peak:
        return max(self.lines.values(), key=lambda p: p.power)

    def frequency(self, sampling_hz: float) -> float:
        """Least squares through the lines below the Nyquist frequency (not aliased)."""
        if self._fitted is None or self._fitted[0] != sampling_hz:
            lowest = min(self.lines)
            rough = self.lines[lowest].frequency_hz / lowest
            direct = {n: p for n, p in self.lines.items() if n * rough < sampling_hz / 2}
            weights = np.array([p.power for p in direct.values()])
            n = np.array(list(direct), dtype=np.float64)
            f = np.array([p.frequency_hz for p in direct.values()])
            self._fitted = (sampling_hz, float((weights * n * f).sum() / (weights * n * n).sum()))
        return self._fitted[1]


def _alias(frequency: np.ndarray, sampling_hz: float) -> np.ndarray:
    folded = np.mod(frequency, sampling_hz)
    return np.minimum(folded, sampling_hz - folded)


def _local_peaks(spec: Spectrum) -> list[_Peak]:
    power, df = spec.power, spec.resolution_hz
    background = _running_median(power, BACKGROUND_BINS)
    to_mean, level = _threshold_factor(spec.segments, len(power))
    mean_background = np.maximum(background * to_mean, np.finfo(float).tiny)
    inner = power[1:-1]
    is_peak = (inner > power[:-2]) & (inner >= power[2:]) & (inner > level * mean_background[1:-1])
    candidates = np.flatnonzero(is_peak) + 1
    candidates = candidates[candidates >= MIN_CYCLES]
    # strongest first, so that a strong line's side lobes are not taken for peaks
    taken = np.zeros(len(power), bool)
    peaks = []
    for k in candidates[np.argsort(power[candidates])[::-1]]:
        if taken[k]:
            continue
        lo, hi = max(k - MAIN_LOBE, 1), min(k + MAIN_LOBE + 1, len(power))
        taken[lo:hi] = True
        offset = 0.0
        if 0 < k < len(power) - 1 and min(power[k - 1:k + 2]) > 0:
            a, b, c = np.log(power[k - 1:k + 2])
            curvature = a - 2 * b + c
            offset = 0.5 * (a - c) / curvature if curvature < 0 else 0.0
        peaks.append(_Peak(int(k), float((k + offset) * df), float(power[k]),
                           float(power[lo:hi].sum() * df),
                           float(10 * np.log10(power[k] / mean_background[k]))))
    return sorted(peaks, key=lambda p: p.frequency_hz)


class _SourceLines:
    """What _harmonic_owner asks of the sources found so far, one row each
    in the order found, kept up to date as lines join them: fundamental,
    strongest line's power, harmonics 2..MAX_HARMONIC already taken. (Rows
    are kept with room for more: a spectrum has tens to hundreds of sources,
    and copying every row for each new one cost more than the matching.)"""

    def __init__(self) -> None:
        self.count = 0
        self._fundamentals, self._strongest = np.zeros(16), np.zeros(16)
        self._taken = np.zeros((16, MAX_HARMONIC - 1), bool)

    @property
    def fundamentals(self) -> np.ndarray:
        return self._fundamentals[:self.count]

    @property
    def strongest(self) -> np.ndarray:
        return self._strongest[:self.count]

    @property
    def taken(self) -> np.ndarray:
        return self._taken[:self.count]

    def add(self, source: _Source, sampling_hz: float) -> None:
        if self.count == len(self._fundamentals):  # twice the room
            self._fundamentals = np.concatenate([self._fundamentals, np.zeros(self.count)])
            self._strongest = np.concatenate([self._strongest, np.zeros(self.count)])
            self._taken = np.concatenate([self._taken, np.zeros_like(self._taken)])
        self.count += 1
        self._fit(self.count - 1, source, sampling_hz)

    def joined(self, row: int, source: _Source, n: int, sampling_hz: float) -> None:
        """Harmonic n joined the source of `row`."""
        self._fit(row, source, sampling_hz)
        self._taken[row, n - 2] = True

    def _fit(self, row: int, source: _Source, sampling_hz: float) -> None:
        self._fundamentals[row] = source.frequency(sampling_hz)
        self._strongest[row] = source.strongest.power


def _harmonic_owner(peak: _Peak, lines: _SourceLines, spec: Spectrum) -> tuple[int, int] | None:
    """(source, n) if the peak is the n-th harmonic of one of the sources, the
    one with the highest fundamental (the most specific; of equal ones, the
    first found): directly (below the Nyquist frequency), else folded back
    from between the Nyquist and the sampling frequency (beyond that the
    sampling, a boxcar average, leaves harmonics too weak to matter). Every
    source at once: a peak is tested against tens of sources, and numpy's
    cost is per call. A harmonic matches within less than a quarter of its
    fundamental, so of each source only the multiple nearest the peak (or
    nearest its fold) can: that one is tested, not all MAX_HARMONIC."""
    if not len(lines.fundamentals):
        return None
    df, fs = spec.resolution_hz, spec.sampling_hz
    f0 = lines.fundamentals
    rows = np.arange(len(f0))
    strong_enough = peak.power <= HARMONIC_EXCESS * lines.strongest
    for aliased in (False, True):
        nearest = np.rint((fs - peak.frequency_hz if aliased else peak.frequency_hz) / f0)
        possible = (nearest >= 2) & (nearest <= MAX_HARMONIC)
        n = np.where(possible, nearest, 2).astype(np.int64)
        tolerance = _tolerance(n, df)
        hits = (possible & strong_enough & (tolerance < f0 / 4) & (n * f0 < fs)
                & ((n * f0 >= fs / 2) == aliased)
                & (np.abs(_alias(n * f0, fs) - peak.frequency_hz) <= tolerance)
                & ~lines.taken[rows, n - 2])
        found = np.flatnonzero(hits)
        if len(found):
            row = int(found[np.argmax(f0[found])])  # (the first of equal ones)
            return row, int(n[row])
    return None


def _tolerance(n: np.ndarray | int, resolution_hz: float):
    # the fundamental's error grows n-fold
    return resolution_hz * (1.0 + np.asarray(n) / 16)


def _merge_missing_fundamentals(sources: list[_Source], peaks: list[_Peak], spec: Spectrum,
                                keep: Callable[[_Source], bool]) -> list[_Source]:
    """Sources that are multiples of one frequency without a line of its own (a
    comb like 800, 900, 1100, 1200 Hz whose 100 Hz fundamental is too weak to
    show) become one source, when lines fill at least half of the comb's teeth
    between the lowest and the highest of them. Sources for which `keep` holds
    (known ones: the tick, injected noise) stay as they are."""
    kept = [s for s in sources if keep(s)]
    sources = [s for s in sources if not keep(s)]
    lines = np.array([p.frequency_hz for p in peaks])
    df = spec.resolution_hz
    while len(sources) >= MIN_COMB:
        frequencies = np.array([s.frequency(spec.sampling_hz) for s in sources])
        steps = np.round(np.diff(np.sort(frequencies)) / df) * df
        f0 = np.unique(steps)
        f0 = f0[f0 >= MIN_CYCLES * df][:, None]  # every candidate fundamental (a row) at once
        n = np.round(frequencies / f0).astype(np.int64)
        tolerance = _tolerance(n, df)
        members = ((n >= 1) & (n * f0 < spec.sampling_hz / 2) & (tolerance < f0 / 4)
                   & (np.abs(frequencies - n * f0) <= tolerance))
        counts = members.sum(axis=1)
        best: tuple[np.ndarray, np.ndarray] | None = None  # (member, n) of the comb chosen
        # the most members, of as many the highest fundamental, whose lines fill at least
        # half of the comb's teeth
        for row in np.lexsort((f0[:, 0], counts))[::-1]:
            if counts[row] < MIN_COMB:
                break
            member = members[row]
            teeth = np.arange(n[row][member].min(), n[row][member].max() + 1)
            filled = np.abs(lines[None, :] - teeth[:, None] * f0[row, 0]).min(axis=1) <= \
                _tolerance(teeth, df)
            if filled.mean() >= 0.5:
                best = (member, n[row])
                break
        if best is None:
            break
        member, n = best
        merged: dict[int, _Peak] = {}
        for source, multiple in zip([s for s, m in zip(sources, member, strict=True) if m],
                                    n[member], strict=True):
            for k, peak in source.lines.items():
                number = int(k * multiple)
                if number not in merged or merged[number].power < peak.power:
                    merged[number] = peak
        sources = [s for s, m in zip(sources, member, strict=True) if not m] + [_Source(merged)]
    return kept + sources


def find_sources(spec: Spectrum, known: dict[float, str] | None = None) -> list[dict]:
    """The dominant periodic sources in a spectrum, strongest share first."""
    known = known or {}
    peaks = _local_peaks(spec)
    sources: list[_Source] = []
    lines = _SourceLines()
    for peak in peaks:  # lowest frequency first: fundamentals come before harmonics
        # a direct harmonic is a better explanation than an aliased one; among
        # sources, the highest fundamental (the most specific) wins; a line at a
        # known frequency (the tick, injected noise) is always a source of its own
        owner = None if name_for(peak.frequency_hz, known) else _harmonic_owner(peak, lines, spec)
        if owner is not None:
            row, n = owner
            sources[row].add(n, peak)
            lines.joined(row, sources[row], n, spec.sampling_hz)
        else:
            sources.append(_Source({1: peak}))
            lines.add(sources[-1], spec.sampling_hz)
    sources = _merge_missing_fundamentals(
        sources, peaks, spec, keep=lambda s: name_for(s.frequency(spec.sampling_hz), known) is not None)
    total = float(spec.power[1:].sum() * spec.resolution_hz)
    listed = []
    unnamed = 0
    for source in sorted(sources, key=lambda s: -s.lobe_power):
        share = 100.0 * source.lobe_power / total if total > 0 else 0.0
        frequency = source.frequency(spec.sampling_hz)
        name = name_for(frequency, known)
        # a known source found is always listed, however small its share
        # beside a loud one (the tick next to a busy host's 100 Hz timer)
        if name is None:
            if share < MIN_SHARE_PCT or unnamed == MAX_SOURCES:
                continue
            unnamed += 1
        listed.append({
            "frequency_hz": frequency,
            "harmonics": sorted(source.lines),
            "share_pct": share,
            "strength_db": source.strongest.strength_db,
            "name": name,
        })
    return listed


def name_for(frequency_hz: float, known: dict[float, str]) -> str | None:
    for reference, name in sorted(known.items()):
        if abs(frequency_hz - reference) <= NAME_TOLERANCE * reference:
            return name
    return None


def known_frequencies(manifest: dict, cpu: int) -> dict[float, str]:
    """Frequencies the bundle itself explains: injected noise, the timer tick."""
    known: dict[float, str] = {}
    host = manifest.get("host") or {}
    hz = host.get("config_hz") or (host.get("hz_estimate") or {}).get("hz")
    if hz:
        known[float(hz)] = f"timer tick (HZ={hz})"
    for spec in manifest.get("parameters", {}).get("injections", []):
        if spec["cpu"] == cpu:
            known[float(spec["rate_hz"])] = "injected noise"
    return known


def _stored_until(summary: dict | None, samples: Table | SpooledTable, cpu: int,
                  length: str | int) -> int | None:
    """Where a CPU's stored samples stop being whole (None: nowhere): the end of
    the last one stored before the first that was lost; `length` is the column
    of each sample's length, or the length of every one. (Bundles from before
    the samplers streamed lost samples only at the end.)"""
    if not summary or not summary.get("overflow"):
        return None
    whole = summary.get("stored_before_loss")  # None: every stored sample
    seen, last = 0, None  # samples read so far; (start, length) of the last whole one
    for batch in cpu_batches(samples, cpu, "start_ns"):
        index = batch.rows - 1 if whole is None else min(whole - seen, batch.rows) - 1
        if index >= 0:
            last = (int(batch["start_ns"][index]),
                    int(batch[length][index]) if isinstance(length, str) else length)
        seen += batch.rows
        if whole is not None and seen >= whole:
            break
    return 0 if last is None else last[0] + last[1]


def bundle_spectra(bundle) -> tuple[Table, list[dict]]:
    """Spectra of every CPU's detour trace and FTQ series in a scan bundle:
    a table (cpu, series, frequency_hz, power) and one summary per CPU and series."""
    parts, summaries = [], []
    windows = bundle.table("windows") if bundle.has_table("windows") else Table()
    inputs = []
    if bundle.has_table("detours") and windows.rows:
        detours = bundle.batched_table("detours")
        for s in bundle.summaries.get("detour", []):
            cpu = s["cpu"]
            until = _stored_until(s, detours, cpu, "duration_ns")
            inputs.append(("detour", cpu, BIN_NS, detour_pieces(detours, windows, cpu, until),
                           window_samples(windows, cpu, "detour", BIN_NS)))
    if bundle.has_table("ftq") and windows.rows:
        ftq = bundle.batched_table("ftq")
        quantum_ns = int(bundle.parameters.get("quantum_ns", 0))
        for s in bundle.summaries.get("ftq", []):
            if quantum_ns > 0:
                # the stored quanta say how long each piece is (views: cheap to list)
                until = _stored_until(s, ftq, s["cpu"], quantum_ns)
                inputs.append(("ftq", s["cpu"], quantum_ns,
                               ftq_pieces(ftq, windows, s["cpu"], until), None))

    def spectrum_of(one) -> tuple[Table, dict] | None:
        series, cpu, sample_ns, pieces, segment_samples = one
        spec = mean_periodogram(pieces, sample_ns, segment_samples)
        if spec is None:
            return None
        return Table({
            "cpu": np.full(len(spec.power), cpu, np.int32),
            "series": repeated(series, len(spec.power)),
            "frequency_hz": spec.frequency_hz,
            "power": spec.power,
        }), {
            "cpu": cpu,
            "series": series,
            "sample_ns": int(sample_ns),
            "segment_ns": int(spec.segment_samples * sample_ns),
            "segments": spec.segments,
            "resolution_hz": spec.resolution_hz,
            "nyquist_hz": spec.sampling_hz / 2,
            "sources": find_sources(spec, known_frequencies(bundle.manifest, cpu)),
        }

    # the series are independent: side by side in worker processes
    for made in run_parts(spectrum_of, inputs, worker_count(len(inputs))):
        if made is not None:
            parts.append(made[0])
            summaries.append(made[1])
    return Table.concat(parts), summaries


def add_spectra(bundle) -> None:
    """Store the spectra in the bundle (table 'spectrum', summaries['spectrum'])."""
    store_spectra(bundle, *bundle_spectra(bundle))


def store_spectra(bundle, table, summaries: list[dict]) -> None:
    """Store spectra made by bundle_spectra (nothing if there are none)."""
    if summaries:
        bundle.add_table("spectrum", table)
        bundle.summaries["spectrum"] = summaries
