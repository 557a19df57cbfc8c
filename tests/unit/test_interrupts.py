"""Stopping signals while a bundle is written: delivered to any thread, once,
twice, or with the default disposition (library use)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import noisescope
from noisescope import interrupts
from noisescope.bundle import Bundle
from noisescope.tables import StoredTable, Table

from .test_bundle import minimal_manifest, results_of_a_scan


class HelperThread:
    """A thread that only sleeps: the kernel may deliver a process's signal to
    it (as to OpenBLAS's threads); pthread_kill makes sure it does."""

    def __enter__(self) -> HelperThread:
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.done.wait, daemon=True)
        self.thread.start()
        return self

    def signal(self, signum: int) -> None:
        """Send `signum` and wait until its handler ran (in the main thread): a
        second one sent before would merge with it."""
        received = interrupts._state.received
        signal.pthread_kill(self.thread.ident, signum)
        deadline = time.monotonic() + 30
        while interrupts._state.received == received and time.monotonic() < deadline:
            time.sleep(0.001)  # the main thread runs the handler between instructions

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def signalling_write_table(helper: HelperThread, signals: list[int]):
    """A _write_table that sends `signals` to the helper thread at the first table."""
    import noisescope.bundle as bundle_module

    real = bundle_module._write_table

    def write_table(table, path):
        while signals:
            helper.signal(signals.pop(0))
        real(table, path)
    return write_table


def test_ctrl_c_delivered_to_another_thread_does_not_interrupt_the_write(tmp_path, monkeypatch,
                                                                          capfd):
    import noisescope.bundle as bundle_module

    with HelperThread() as helper:
        monkeypatch.setattr(bundle_module, "_write_table",
                            signalling_write_table(helper, [signal.SIGINT]))
        bundle = Bundle(minimal_manifest(), results_of_a_scan())
        bundle.write(tmp_path / "b", release_tables=True)
    assert interrupts.interrupted()  # noted, and left to the caller
    written = noisescope.load(tmp_path / "b")
    assert written.complete and sorted(written.table_names) == sorted(results_of_a_scan())
    assert [p.name for p in tmp_path.iterdir()] == ["b"]
    err = capfd.readouterr().err
    assert f"noisescope: interrupted (SIGINT): saving the measurement first; it will be kept at " \
           f"{tmp_path / 'b'}\n" == err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


def stored_table(tmp_path, helper: HelperThread, signals: list[int]) -> StoredTable:
    """A table the bundle makes while it is written (like a scan's kernel events),
    whose making takes a while and lets `signals` arrive meanwhile."""
    path = tmp_path / "work" / "late.parquet"
    path.parent.mkdir()

    def write_file(give_up):
        for _ in range(3):  # batches
            if signals:
                helper.signal(signals.pop(0))
            if give_up():
                raise interrupts.GaveUp
        pq.write_table(Table({"x": np.arange(3)}).to_arrow(), path)
    return StoredTable(path, 3, ["x"], write_file)


def test_a_second_interrupt_leaves_out_the_tables_still_to_make_and_says_so(tmp_path, capfd):
    with HelperThread() as helper:
        late = stored_table(tmp_path, helper, [signal.SIGINT, signal.SIGINT])
        bundle = Bundle(minimal_manifest(), {**results_of_a_scan(), "late": late})
        bundle.write(tmp_path / "b")
    written = noisescope.load(tmp_path / "b")
    assert not written.complete and "late" not in written.table_names
    assert sorted(written.table_names) == sorted(results_of_a_scan())  # the rest is whole
    [warning] = written.warnings
    assert warning.code.value == "interrupted"
    assert warning.message == "the table late left out: an interrupt came before they were written"
    err = capfd.readouterr().err.splitlines()
    assert err == [
        f"noisescope: interrupted (SIGINT): saving the measurement first; it will be kept at "
        f"{tmp_path / 'b'} (interrupt again to leave out the table late)",
        f"noisescope: second interrupt (SIGINT): leaving out the table late; the measurement is "
        f"kept at {tmp_path / 'b'}"]


def test_a_second_interrupt_after_the_tables_were_made_leaves_out_nothing(tmp_path, monkeypatch,
                                                                         capfd):
    import noisescope.bundle as bundle_module

    real = bundle_module._write_table
    with HelperThread() as helper:
        late = stored_table(tmp_path, helper, [signal.SIGINT])
        second = [signal.SIGINT]

        def write_table(table, path):  # "windows" comes after "late": the second signal
            if path.name == "windows.parquet" and second:
                helper.signal(second.pop())
            real(table, path)
        monkeypatch.setattr(bundle_module, "_write_table", write_table)
        Bundle(minimal_manifest(), {**results_of_a_scan(), "late": late,
                                    "windows": Table({"cpu": np.zeros(2, np.int32),
                                                      "probe": np.array(["detour"] * 2, object),
                                                      "start_ns": np.array([0, 10]),
                                                      "end_ns": np.array([10, 20])})}
               ).write(tmp_path / "b")
    written = noisescope.load(tmp_path / "b")
    assert written.complete and written.table("late")["x"].tolist() == [0, 1, 2]
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 2 and err[1].startswith("noisescope: interrupt 2 (SIGINT): still saving")


def test_outside_a_write_every_stopping_signal_raises_keyboard_interrupt():
    previous = {signum: signal.getsignal(signum) for signum in interrupts.STOPPING}
    with interrupts.handled():
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signum)
                time.sleep(0.1)
    assert {signum: signal.getsignal(signum) for signum in interrupts.STOPPING} == previous


def test_sigterm_with_its_default_action_ends_the_process_once_the_bundle_is_written(tmp_path):
    """A library caller that never handled SIGTERM: the signal still ends the
    process, once the bundle is on disk."""
    script = textwrap.dedent(f"""
        import signal, sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        import noisescope.bundle as bundle_module
        from tests.unit.test_bundle import minimal_manifest, results_of_a_scan
        from tests.unit.test_interrupts import HelperThread, signalling_write_table
        with HelperThread() as helper:
            bundle_module._write_table = signalling_write_table(helper, [signal.SIGTERM])
            bundle_module.Bundle(minimal_manifest(), results_of_a_scan()).write({str(tmp_path / "b")!r})
            print("went on", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert "went on" not in done.stdout
    assert noisescope.load(tmp_path / "b").complete
    assert [p.name for p in tmp_path.iterdir()] == ["b"]


def test_a_wait_through_signals_ends_only_when_the_thread_has_and_returns_the_first_stop():
    """Two signals while waiting for a thread's end, each raising its own
    exception: the wait goes on until the thread has ended (after both were
    handled) and hands back the first."""
    class Second(Exception):
        pass

    handled: list[int] = []
    both_handled = threading.Event()

    def on_signal(signum, frame):
        handled.append(signum)
        if len(handled) == 2:
            both_handled.set()
        raise KeyboardInterrupt if len(handled) == 1 else Second

    ended = threading.Event()
    main = threading.main_thread().ident

    def thread_that_ends_after_two_signals():
        for count in (1, 2):
            time.sleep(0.1)  # the main thread in its wait (a signal before it is the test's)
            signal.pthread_kill(main, signal.SIGUSR1)
            while len(handled) < count:
                time.sleep(0.01)
        ended.set()

    previous = signal.signal(signal.SIGUSR1, on_signal)
    thread = threading.Thread(target=thread_that_ends_after_two_signals)
    try:
        thread.start()
        stop = interrupts.wait_through(ended)
    finally:
        thread.join()
        signal.signal(signal.SIGUSR1, previous)
    assert both_handled.is_set() and ended.is_set() and isinstance(stop, KeyboardInterrupt)
    assert interrupts.wait_through(ended) is None  # nothing came this time
