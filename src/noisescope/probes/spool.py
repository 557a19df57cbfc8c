"""Samples spooled to files while a probe runs (the scan that writes a bundle).

The drain (`native._Drain`) appends what it takes out of each sampler's ring
to one raw file per CPU and ring buffer (native uint64, as the sampler wrote
them, no header), so memory holds one drained batch, never the run. The
files are read back per CPU in order, SPOOL_ROWS samples at a time; the
bundle's tables of samples are made of those batches (`tables.SpooledTable`)
and written to Parquet, a CPU's batches joined into row groups. No pyarrow
while measuring.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

SPOOL_ROWS = 1 << 16  # samples per batch read back: 512 KB per uint64 buffer
SAMPLE_BYTES = 8  # a uint64


def _write_all(out: BinaryIO, data: memoryview) -> None:
    """The whole of `data` (an unbuffered file may take part of it a call)."""
    data = data.cast("B")
    while data:
        data = data[out.write(data):]


class SampleSpool:
    """One probe run's samples on disk: `rows[i]` samples of spec i (a CPU) in
    the files of its two ring buffers `buffers`.

    A write that fails (the disk filled) ends the spooling: the files are
    cut back to the samples written whole, `failure` keeps the error, and
    later samples are not stored (the drain counts them as lost, and the
    probe says why). The files are unbuffered: a sample is on disk, or
    not stored, when append() returns."""

    def __init__(self, directory: Path, buffers: tuple[str, str], ncpus: int):
        directory.mkdir(parents=True)
        self.directory = directory
        self.buffers = buffers
        self.rows = [0] * ncpus
        self.failure: OSError | None = None
        self._files = [[open(self.path(i, name), "wb", buffering=0) for name in buffers]
                       for i in range(ncpus)]

    def path(self, index: int, buffer: str) -> Path:
        return self.directory / f"{index}.{buffer}.u64"

    def append(self, index: int, first: np.ndarray, second: np.ndarray) -> int:
        """Samples of spec `index`, in order after those appended before (slices of
        the ring, written as they are: no copy). Returns how many were stored:
        all, or none once a write failed."""
        if self.failure is not None or not len(first):
            return 0
        files = self._files[index]
        try:
            for out, values in zip(files, (first, second), strict=True):
                _write_all(out, np.ascontiguousarray(values, np.uint64).data)
        except OSError as error:
            self.failure = error
            for out in files:  # what was written of this batch goes
                os.ftruncate(out.fileno(), self.rows[index] * SAMPLE_BYTES)
                out.seek(0, os.SEEK_END)
            return 0
        self.rows[index] += len(first)
        return len(first)

    def close(self) -> None:
        """Close the files (the run is over; they are read from now on)."""
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
