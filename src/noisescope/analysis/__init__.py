"""Analysis of measured data: summaries, spectra, attribution, comparison, prediction."""
