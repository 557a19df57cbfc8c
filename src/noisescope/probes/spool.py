"""Samples spooled to files while a probe runs (the scan that writes a bundle).

The drain (`native._Drain`) appends what it takes out of each sampler's ring
to one raw file per CPU and ring buffer (native uint64, as the sampler wrote
them, no header), so memory holds one drained batch, never the run. The
files are read back per CPU in order, SPOOL_ROWS samples at a time; the
bundle's tables of samples are made of those batches (`tables.SpooledTable`)
and written to Parquet one row group per batch. No pyarrow while measuring.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

SPOOL_ROWS = 1 << 16  # samples per batch read back: 512 KB per uint64 buffer


class SampleSpool:
    """One probe run's samples on disk: `rows[i]` samples of spec i (a CPU) in
    the files of its two ring buffers `buffers`."""

    def __init__(self, directory: Path, buffers: tuple[str, str], ncpus: int):
        directory.mkdir(parents=True)
        self.directory = directory
        self.buffers = buffers
        self.rows = [0] * ncpus
        self._files = [[open(self.path(i, name), "wb") for name in buffers]
                       for i in range(ncpus)]

    def path(self, index: int, buffer: str) -> Path:
        return self.directory / f"{index}.{buffer}.u64"

    def append(self, index: int, first: np.ndarray, second: np.ndarray) -> None:
        """Samples of spec `index`, in order after those appended before (slices of
        the ring, written as they are: no copy)."""
        for out, values in zip(self._files[index], (first, second), strict=True):
            out.write(np.ascontiguousarray(values, np.uint64).data)
        self.rows[index] += len(first)

    def close(self) -> None:
        """Flush and close the files (the run is over; they are read from now on)."""
        for files in self._files:
            for out in files:
                out.close()

    def batches(self, index: int, rows: int | None = None
                ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Spec `index`'s samples in order, at most `rows` (SPOOL_ROWS) of each
        buffer at a time."""
        rows = rows or SPOOL_ROWS
        with open(self.path(index, self.buffers[0]), "rb") as first, \
                open(self.path(index, self.buffers[1]), "rb") as second:
            for begin in range(0, self.rows[index], rows):
                count = min(rows, self.rows[index] - begin)
                yield (np.fromfile(first, np.uint64, count),
                       np.fromfile(second, np.uint64, count))
