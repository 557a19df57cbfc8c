"""Machine settings changed through a journal: restored in order, after errors,
and by the next run when the one that changed them died; SMT switched per
configuration and the CPUs that stay online with it off."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from noisescope.errors import UsageError
from noisescope.experiment import Configuration
from noisescope.host import read_host_facts
from noisescope.knobs import KnobJournal, restore_leftovers
from noisescope.leftovers import identity, process_start
from noisescope.placement import Placement, choose_cpus, domains
from noisescope.smt import SmtSwitch, first_threads, without_smt

from ..conftest import HOSTS


def knob(tmp_path, name: str, value: str):
    path = tmp_path / name
    path.write_text(value + "\n")
    return path


def test_changes_are_journalled_before_they_are_made_and_restored_in_reverse(tmp_path):
    a, b = knob(tmp_path, "a", "1"), knob(tmp_path, "b", "on")
    journal = KnobJournal("test", tmp_path / "journals")
    with journal:
        journal.change(a, "0")
        journal.change(b, "off")
        journal.change(a, "5")  # a second change keeps the first original
        saved = json.loads(journal.path.read_text())
        assert [(c["path"], c["restore"]) for c in saved["changes"]] == [(str(a), "1"),
                                                                         (str(b), "on")]
        assert saved["owner"]["pid"] == os.getpid()
        assert a.read_text() == "5" and b.read_text() == "off"
    assert a.read_text() == "1" and b.read_text() == "on"
    assert not journal.path.exists()


def test_a_change_that_cannot_be_written_is_not_journalled(tmp_path):
    journal = KnobJournal("test", tmp_path / "journals")
    with pytest.raises(OSError):
        journal.change(tmp_path / "missing" / "knob", "1", restore="0")
    assert journal.changes == [] and not journal.path.exists()


def test_a_run_that_changed_nothing_never_touches_the_journal_directory(tmp_path):
    """An unprivileged run cannot write /run/noisescope (root made it, 0700):
    a journal with nothing in it must not look there, not even to clean up."""
    unusable = tmp_path / "not-a-directory"
    unusable.write_text("")
    with KnobJournal("trace", unusable) as journal:
        assert journal.restore() == []
    assert unusable.is_file()


def test_the_next_run_restores_what_a_dead_run_changed(tmp_path):
    a = knob(tmp_path, "a", "changed")
    child = subprocess.Popen(["true"])
    child.wait()  # its pid is that of a process that is gone
    folder = tmp_path / "journals"
    folder.mkdir()
    me = identity()

    def journal(pid: int, owner: dict, restore: str):
        (folder / f"journal-smt-{pid}.json").write_text(json.dumps(
            {"owner": owner, "changes": [{"path": str(a), "value": "x", "restore": restore}]}))
        return folder / f"journal-smt-{pid}.json"

    dead = journal(child.pid, {**me, "pid": child.pid, "start": 1}, "original")
    alive = journal(os.getppid(), {**me, "pid": os.getppid(),
                                   "start": process_start(os.getppid())}, "not this")
    elsewhere = journal(1, {**me, "pid": 1, "boot_id": "", "host": "another-machine"}, "nor this")
    restored, failed = restore_leftovers(folder)
    assert restored == [f"{a} = original"] and failed == []
    assert a.read_text() == "original" and not dead.exists()
    assert alive.exists() and elsewhere.exists()


def test_smt_is_switched_only_when_it_changes_and_a_configuration_without_it_gets_the_original(
        tmp_path):
    control = knob(tmp_path, "control", "on")
    journal = KnobJournal("smt", tmp_path / "journals")
    with journal:
        switch = SmtSwitch(journal, str(control))
        switch.set("off")
        assert control.read_text() == "off"
        switch.set(None)  # as the machine was
        assert control.read_text() == "on"
        switch.set("off")
    assert control.read_text() == "on"


def test_cpus_chosen_for_a_nosmt_configuration_stay_online_with_smt_off():
    facts = read_host_facts(HOSTS / "tuned-node")  # 2 nodes, 16 CPUs, siblings n and n+8
    assert first_threads(facts) == tuple(range(8))
    off = without_smt(facts)
    assert off.online == tuple(range(8)) and off.threads_per_core == 1
    spread = choose_cpus(4, "spread", domains(off), set(off.online))
    assert set(spread) <= set(range(8)) and len(spread) == 4


def test_core_scheduling_with_smt_off_and_unknown_settings_are_refused():
    with pytest.raises(UsageError, match="core scheduling needs SMT"):
        Configuration("x", Placement(core_scheduling=True), smt="off")
    with pytest.raises(UsageError, match="unknown SMT setting"):
        Configuration("x", smt="nosmt")
