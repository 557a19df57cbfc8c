"""A recording's CPUs decoded side by side in worker processes, their events
handed to this process's spool.

The first decoding pass of a scan that writes a bundle turns every CPU's
copy of its buffer into events (for the spool's Parquet files) and counts
them (`session._CpuTally`: how many, the last one's time, the names, the
batches of pages). The CPUs are independent, so forked workers
(`workers.run_parts`) decode them, each CPU's events going into Arrow IPC
streams in a hand-off directory (one per table, written under a temporary
name and renamed when the CPU is done); a thread of this process feeds them
to the spool in CPU order as they are done, and removes them. The spool's
files are then the same, row group for row group, as those of one process
decoding every CPU in turn.

The workers together run at most about AHEAD CPUs ahead of the feeding (the
streams take about 40 bytes an event: 50 MB a CPU-minute); a worker stops
waiting when this process is gone.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import interrupts
from .events import TraceEvents

AHEAD = 4  # CPUs decoded but not yet fed, at most (one more per other worker, which may
# have checked at the same moment)
POLL_S = 0.005
TABLES = ("events", "sched_switch")

Feed = Callable[[str, object], None]  # (table name, Arrow table): a batch of one table


def stream_path(directory: Path, cpu: int, table: str) -> Path:
    return directory / f"cpu{cpu}.{table}.arrow"


class StreamWriter:
    """One CPU's decoded batches into its two Arrow IPC streams."""

    def __init__(self, directory: Path, cpu: int):
        self.directory, self.cpu = directory, cpu
        self._writers: dict[str, tuple[object, object]] = {}  # table -> (file, writer)

    def __call__(self, batch: TraceEvents) -> None:
        import pyarrow as pa

        for name, table in zip(TABLES, (batch.events, batch.switches), strict=True):
            arrow = table.to_arrow()
            if name not in self._writers:
                sink = pa.OSFile(str(_partial(stream_path(self.directory, self.cpu, name))), "wb")
                self._writers[name] = (sink, pa.ipc.new_stream(sink, arrow.schema))
            if arrow.num_rows:
                self._writers[name][1].write_table(arrow)

    def close(self) -> None:
        """The CPU is done: its streams under their own names (events last: the sign)."""
        if not self._writers:  # no batch at all: empty streams
            self(TraceEvents.empty())
        for name in reversed(TABLES):
            sink, writer = self._writers[name]
            writer.close()
            sink.close()
            path = stream_path(self.directory, self.cpu, name)
            os.replace(_partial(path), path)


def wait_for_room(directory: Path, parent: int) -> None:
    """Before a worker decodes another CPU: until fewer than AHEAD decoded CPUs
    wait to be fed (or the parent is gone: nothing will feed them)."""
    while (len(list(directory.glob(f"*.{TABLES[0]}.arrow"))) >= AHEAD
           and os.getppid() == parent):
        time.sleep(POLL_S)


class Feeder:
    """A thread feeding each CPU's streams to `feed` a batch at a time, in the order of `cpus`,
    as the workers finish them, from `start()` (once the workers are forked);
    `stop()` ends it (the files left are removed with the directory). An
    error of `feed` ends the feeding and is raised by `stop()`."""

    def __init__(self, directory: Path, cpus: Sequence[int], feed: Feed):
        import pyarrow.ipc  # noqa: F401 - imported here, never by the thread (see start)

        self.directory, self.cpus, self.feed = directory, list(cpus), feed
        self.fed: list[int] = []
        self.failure: BaseException | None = None
        self._abandon = threading.Event()
        self._ended = threading.Event()  # set by the thread as it ends
        self._thread = threading.Thread(target=self._run, name="noisescope-handoff", daemon=True)

    def start(self) -> None:
        """Start feeding: only once the workers are forked (workers.run_parts),
        since a process forked while this thread imports or allocates would
        wait for its locks for ever."""
        self._thread.start()

    def _run(self) -> None:
        import pyarrow as pa

        try:
            for cpu in self.cpus:
                done = stream_path(self.directory, cpu, TABLES[0])
                while not done.exists():
                    if self._abandon.wait(POLL_S):
                        return
                for name in TABLES:  # batch by batch: a CPU's events may be millions
                    with pa.OSFile(str(stream_path(self.directory, cpu, name))) as source:
                        for batch in pa.ipc.open_stream(source):
                            if self._abandon.is_set():
                                return
                            self.feed(name, pa.Table.from_batches([batch]))
                for name in TABLES:
                    stream_path(self.directory, cpu, name).unlink(missing_ok=True)
                self.fed.append(cpu)
        except BaseException as error:  # noqa: BLE001 - raised by stop() in the caller's thread
            self.failure = error
        finally:
            self._ended.set()

    def stop(self, finished: bool) -> None:
        """Wait for the feeding to end (`finished`: every CPU was decoded, and
        an error of the feeding is raised), or abandon it (the decoding failed
        or was stopped: that is what the caller hears of)."""
        if not finished:
            self._abandon.set()
        if self._thread.ident is not None:  # started
            try:
                self._ended.wait()  # (an Event, not join(): see interrupts.wait_through)
            except BaseException:  # a stop while waiting: no feeding after the caller gives up
                self._abandon.set()
                interrupts.wait_through(self._ended)  # (at most the batch being fed)
                raise
        if finished and self.failure is not None:
            raise self.failure


def _partial(path: Path) -> Path:
    return path.with_name(path.name + ".partial")
