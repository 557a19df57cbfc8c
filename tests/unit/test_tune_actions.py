"""The journal-backed change/restore primitives for IRQ and task affinity
(tune/actions.py, knobs.KnobJournal): each change journalled before it is
made, read back after it, put back when the kernel did not take it as asked,
restored by the journal, and by restore_leftovers() (`noisescope cleanup`)
after the process that made it was killed with SIGKILL.

IRQs are files in a tree under tmp_path here (a real IRQ is moved in
tests/e2e/test_tune.py); tasks are this test's own children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from noisescope.knobs import AFFINITY, Change, KnobJournal, restore_leftovers
from noisescope.leftovers import process_start
from noisescope.tune import actions
from noisescope.tune.actions import NotApplied, move_irq, move_task

CPUS = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs this process may use")
# A child with two threads that sleeps until it is killed.
SLEEPER = ("import threading, time\n"
           "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
           "print('ready', flush=True)\n"
           "time.sleep(600)\n")


def irq_tree(tmp_path: Path, irq: int = 36, affinity: str = "0-1") -> tuple[str, Path]:
    knob = tmp_path / "root" / "proc" / "irq" / str(irq) / "smp_affinity_list"
    knob.parent.mkdir(parents=True)
    knob.write_text(affinity + "\n")
    return str(tmp_path / "root"), knob


def journal_of(tmp_path: Path) -> KnobJournal:
    return KnobJournal("tune", tmp_path / "journals")


def test_an_irq_is_moved_journalled_first_and_restored(tmp_path):
    root, knob = irq_tree(tmp_path)
    journal = journal_of(tmp_path)
    with journal:
        move_irq(journal, 36, (0,), root)
        assert knob.read_text() == "0"
        saved = json.loads(journal.path.read_text())["changes"]
        assert [(c["path"], c["restore"]) for c in saved] == [(str(knob), "0-1")]
    assert knob.read_text() == "0-1" and not journal.path.exists()


def test_an_irq_whose_affinity_reads_back_otherwise_is_put_back_and_refused(tmp_path, monkeypatch):
    """The kernel may narrow a mask (to the CPUs of a vector domain, say): the file
    then reads something else than what was written."""
    root, knob = irq_tree(tmp_path)
    journal = journal_of(tmp_path)
    monkeypatch.setattr(actions, "read_knob", lambda path: "1")
    with pytest.raises(NotApplied, match="IRQ 36: its affinity read 1 after 0 was written"):
        move_irq(journal, 36, (0,), root)
    assert knob.read_text() == "0-1" and journal.changes == [] and not journal.path.exists()


def test_an_irq_the_kernel_refuses_is_not_journalled(tmp_path):
    root, knob = irq_tree(tmp_path)
    knob.unlink()
    knob.mkdir()  # a write fails (as EIO does for a managed IRQ)
    journal = journal_of(tmp_path)
    with pytest.raises(NotApplied, match="IRQ 36: the kernel refused affinity 0"):
        move_irq(journal, 36, (0,), root)
    assert journal.changes == [] and not journal.path.exists()


@pytest.fixture
def sleeper():
    child = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    yield child
    child.kill()
    child.wait()


def affinities(pid: int) -> dict[int, set[int]]:
    return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")}


@needs_two_cpus
def test_every_thread_of_a_process_is_moved_and_restored(tmp_path, sleeper):
    before = affinities(sleeper.pid)
    assert len(before) == 2
    journal = journal_of(tmp_path)
    with journal:
        moved = move_task(journal, sleeper.pid, (CPUS[0],))
        assert sorted(moved) == sorted(before)
        assert set(map(frozenset, affinities(sleeper.pid).values())) == {frozenset({CPUS[0]})}
        saved = json.loads(journal.path.read_text())["changes"]
        assert {c["kind"] for c in saved} == {AFFINITY} and len(saved) == 2
    assert affinities(sleeper.pid) == before and not journal.path.exists()


def test_a_task_that_refuses_puts_back_the_threads_already_moved(tmp_path, sleeper, monkeypatch):
    """The second thread refuses (as a per-CPU kernel thread does, EINVAL): the
    first is put back, nothing stays journalled."""
    before = affinities(sleeper.pid)
    journal = journal_of(tmp_path)
    change_affinity = journal.change_affinity
    calls = []

    def refuse_second(tid, cpus):
        calls.append(tid)
        if len(calls) == 2:
            raise OSError(22, "Invalid argument")
        change_affinity(tid, cpus)

    monkeypatch.setattr(journal, "change_affinity", refuse_second)
    with pytest.raises(NotApplied, match="refused affinity"):
        move_task(journal, sleeper.pid, (CPUS[0],))
    assert len(calls) == 2 and affinities(sleeper.pid) == before
    assert journal.changes == [] and not journal.path.exists()


def test_a_gone_process_is_refused(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(NotApplied, match="is gone"):
        move_task(journal_of(tmp_path), child.pid, (CPUS[0],))


def test_a_restore_never_touches_a_later_task_with_the_same_id(sleeper):
    """The journal names the task by id and start time: a start time that differs is
    another task (the id was reused), and its affinity is left alone."""
    before = os.sched_getaffinity(sleeper.pid)
    stranger = Change(f"/proc/{sleeper.pid}", "0", str(CPUS[0]), AFFINITY,
                      process_start(sleeper.pid) + 1)
    assert stranger.put_back() is False
    assert os.sched_getaffinity(sleeper.pid) == before


MAKER = """
import os, sys, time
from noisescope.knobs import KnobJournal
from noisescope.tune.actions import move_irq, move_task
journal = KnobJournal("tune")
move_irq(journal, 36, (0,), sys.argv[1])
move_task(journal, int(sys.argv[2]), (int(sys.argv[3]),))
print("changed", flush=True)
time.sleep(600)
"""


@needs_two_cpus
def test_after_sigkill_restore_leftovers_puts_everything_back(tmp_path, sleeper):
    root, knob = irq_tree(tmp_path)
    journals = tmp_path / "journals"
    before = affinities(sleeper.pid)
    maker = subprocess.Popen(
        [sys.executable, "-c", MAKER, root, str(sleeper.pid), str(CPUS[0])],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "NOISESCOPE_JOURNAL_DIR": str(journals)})
    assert maker.stdout.readline().strip() == "changed"
    assert knob.read_text() == "0" and affinities(sleeper.pid) != before
    maker.send_signal(signal.SIGKILL)
    maker.wait()
    restored, failed = restore_leftovers(journals)
    assert failed == []
    assert knob.read_text() == "0-1" and affinities(sleeper.pid) == before
    assert sorted(restored) == sorted([f"{knob} = 0-1"] + [
        f"CPU affinity of task {tid} = {actions.format_cpu_list(before[tid])}" for tid in before])
    assert os.listdir(journals) == []


def test_after_sigkill_an_ended_task_needs_no_restoring(tmp_path):
    """The journalled task ended too: nothing to restore, nothing failed."""
    journals = tmp_path / "journals"
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        maker = subprocess.Popen(
            [sys.executable, "-c", "import sys, time\nfrom noisescope.knobs import KnobJournal\n"
             "KnobJournal('tune').change_affinity(int(sys.argv[1]), (int(sys.argv[2]),))\n"
             "print('changed', flush=True)\ntime.sleep(600)", str(target.pid), str(CPUS[0])],
            stdout=subprocess.PIPE, text=True,
            env={**os.environ, "NOISESCOPE_JOURNAL_DIR": str(journals)})
        assert maker.stdout.readline().strip() == "changed"
    finally:
        target.kill()
        target.wait()
    maker.send_signal(signal.SIGKILL)
    maker.wait()
    time.sleep(0.05)
    assert restore_leftovers(journals) == ([], [])
    assert os.listdir(journals) == []
