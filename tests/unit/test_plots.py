"""Plot helpers: envelopes keep every spike; bundle text is drawn literally."""

from __future__ import annotations

import numpy as np

from noisescope.bundle import Bundle
from noisescope.render.plots import COLUMNS, envelope, noise_bars


def test_envelope_keeps_the_extremes_of_a_long_series():
    rng = np.random.default_rng(2)
    x = np.arange(1_200_000, dtype=np.int64)
    y = rng.normal(1000, 5, len(x))
    y[777_777] = 50_000  # one spike among 1.2 million samples
    y[123_456] = -40_000  # and one dip
    cx, low, high = envelope(x, y)
    assert len(cx) == COLUMNS
    assert np.nanmax(high) == 50_000 and np.nanmin(low) == -40_000
    column = int(777_777 / len(x) * COLUMNS)
    assert high[column] == 50_000 and cx[column] <= 777_777 + len(x) / COLUMNS


def test_envelope_marks_empty_columns_as_gaps():
    x = np.r_[np.arange(0, 5_000), np.arange(10_000, 15_000)]  # a gap between two windows
    cx, low, high = envelope(x, np.ones(len(x)))
    empty = np.isnan(high)
    assert empty.any() and not empty[0] and not empty[-1]
    assert np.all((cx[empty] > 4_990) & (cx[empty] < 10_010))


def test_short_series_are_drawn_point_by_point():
    x, y = np.array([3, 1, 2]), np.array([30, 10, 20])
    cx, low, high = envelope(x, y)
    assert cx.tolist() == [1, 2, 3] and low.tolist() == high.tolist() == [10, 20, 30]


def test_dollar_signs_in_labels_are_not_tex():
    def bundle(label, noise):
        return Bundle({"kind": "scan", "label": label, "summaries": {
            "detour": [{"cpu": 0, "noise_pct": noise}, {"cpu": 1, "noise_pct": noise * 2}]}})

    (figure,) = noise_bars([bundle("cost $5", 1.0), bundle("$x^2", 2.0)])
    assert figure.png()[:4] == b"\x89PNG"  # unbalanced '$' would fail as TeX
    labels = [t.get_text() for t in figure.figure.axes[0].get_xticklabels()]
    assert labels == [r"cost \$5", r"\$x^2"]
