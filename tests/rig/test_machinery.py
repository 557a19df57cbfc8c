"""The rig itself fails cleanly: a command that hangs is killed at its limit
and the next ones still run; a guest that goes silent is a hang found long
before its step's limit; a kernel that panics before the job gives one error
with the console's tail, never a hung test suite."""

from __future__ import annotations

import json
import re
import sys

import pytest

from . import conftest
from .conftest import available_kernel, boot_or_fail
from .guest import GuestHung, GuestRun, RigError, Step, StepResult, _watch, boot, rig_kernel


def test_a_hanging_command_is_killed_and_the_next_one_still_runs(tmp_path):
    """...and its output says where it hung: each thread's Python traceback
    and the state of its tasks."""
    run = boot_or_fail(rig_kernel, lambda _: [
        Step("hangs", (sys.executable, "-c", "import time\ntime.sleep(600)"), timeout_s=3),
        Step("after", ("echo", "still here")),
    ], tmp_path)
    hung = run.step("hangs")
    assert hung.returncode is None  # killed at its limit
    assert "Fatal Python error: Aborted" in hung.stderr
    assert 'File "<string>", line 2' in hung.stderr  # the line it hung on
    assert "rig: killed at its limit; its tasks then:" in hung.stderr
    # pid/tid, state, kernel wait channel, last CPU, command
    assert re.search(r"^  \d+/\d+ S \S+ cpu\d+ python", hung.stderr, re.M)
    assert run.step("after").returncode == 0 and run.step("after").stdout == "still here\n"


def test_a_kernel_that_panics_gives_one_error_with_the_console_tail(tmp_path):
    kernel = available_kernel(rig_kernel)
    with pytest.raises(RigError) as raised:
        boot(kernel, [Step("never", ("true",))], tmp_path, append="rdinit=/no-such-init")
    message = str(raised.value)
    assert "stopped before its job ended" in message
    assert "Kernel panic" in message  # the console's tail says why


def test_a_guest_whose_job_goes_silent_is_a_hang_well_before_the_step_limit(tmp_path):
    """The job stopped (as when the emulated CPUs freeze): no heartbeat, no
    step end. Found after the silence allowance, not after the step's 600 s
    limit. (20 s here: the job stops at once, so its 30 s heartbeat, which a
    real allowance must exceed, never comes.)"""
    kernel = available_kernel(rig_kernel)
    with pytest.raises(GuestHung) as raised:
        boot(kernel, [Step("freezes", ("sh", "-c", "kill -STOP $PPID; sleep 600"),
                           timeout_s=600)], tmp_path, silence_s=20)
    assert "went silent in step freezes: no line from its job for 20 s" in str(raised.value)


class _Emulator:
    """A QEMU process as _watch sees it: running for `polls` looks, then exited."""

    def __init__(self, polls: int):
        self.polls = polls

    def poll(self):
        self.polls -= 1
        return None if self.polls >= 0 else 0


# The console of a CI boot that froze (its first lines after the job started).
FROZEN_CONSOLE = """rig: job starts at uptime 3.40 s
rig: step scan-all starts (uptime 5.85 s)
[   38.584228] rcu: INFO: rcu_preempt self-detected stall on CPU
[   38.608623] rcu: \t7-...!: (23 GPs behind) idle=a094/1/0x4000000000000000 softirq=629/629 fqs=0
"""


def test_an_rcu_stall_report_is_a_hang_at_once(tmp_path):
    """Under TCG a guest whose kernel reported a stall never came back; waiting
    for its silence cost 2-4 minutes a boot in CI. Other kernel lines are not
    hangs, whatever they say."""
    console = tmp_path / "console.log"
    console.write_text(FROZEN_CONSOLE)
    stuck = _watch(_Emulator(polls=600), console, [Step("scan-all", timeout_s=240)], 120)
    assert stuck == ("reported an RCU stall in step scan-all: [   38.584228] rcu: INFO: "
                     "rcu_preempt self-detected stall on CPU")
    console.write_text(FROZEN_CONSOLE.replace("self-detected stall", "stall warnings enabled"))
    assert _watch(_Emulator(polls=2), console, [Step("scan-all", timeout_s=240)], 120) is None


def test_a_step_whose_tasks_outlive_sigkill_ends_the_job_and_is_a_hang(tmp_path, monkeypatch):
    """A task the kernel holds (on an emulated CPU that stopped: CI's scan-rt,
    still there 10 s after SIGKILL) is the guest's doing: the job ends there,
    unsaved, and the host boots again for it. The job runs here on the host;
    the task that outlives SIGKILL is stood in for by the states it reads."""
    from . import guest_job

    lines = []
    monkeypatch.setattr(guest_job, "console", lines.append)
    monkeypatch.setattr(guest_job, "ABORT_GRACE_S", 1)
    monkeypatch.setattr(guest_job, "task_states", lambda session: ["D"])
    monkeypatch.setattr(guest_job.resource, "setrlimit", lambda *limit: None)  # (this process's)
    (tmp_path / "steps.json").write_text(json.dumps([
        Step("hangs", (sys.executable, "-c", "import time; time.sleep(600)"), timeout_s=1).to_dict(),
        Step("after", ("true",)).to_dict()]))
    monkeypatch.chdir(tmp_path)
    guest_job.main(str(tmp_path))
    assert "rig: step hangs outlived SIGKILL: its tasks are stuck" in lines
    assert not any(line.startswith("rig: step after") for line in lines)
    assert not (tmp_path / "results.json").exists()  # nothing ended
    console = tmp_path / "console.log"
    console.write_text("rig: job starts at uptime 3.40 s\n" + "\n".join(lines) + "\n")
    assert _watch(_Emulator(polls=600), console, [Step("hangs", timeout_s=1)], 120) == (
        "hung in step hangs: its tasks outlived SIGKILL at its limit (stuck in the guest's "
        "kernel, or on an emulated CPU that stopped)")


def fake_boots(monkeypatch, ended_in_boot: list[dict[str, str]]):
    """boot() replaced: boot k ends the steps ended_in_boot[k] (name -> stdout,
    each writing a file of that name) and hangs unless it is the last; the list
    of (folder, step names) each boot was given."""
    boots = []

    def fake_boot(kernel, steps, out):
        boots.append((out, [s.name for s in steps]))
        ended = ended_in_boot[len(boots) - 1]
        for name, text in ended.items():
            (out / name).write_text(text)
        run = GuestRun(kernel, out, {name: StepResult(name, 0, text, "", 1.0)
                                     for name, text in ended.items()})
        if len(boots) < len(ended_in_boot):
            raise GuestHung(f"froze in boot {len(boots)}", run)
        return run

    monkeypatch.setattr(conftest, "available_kernel", lambda kernel_of: "kernel")
    monkeypatch.setattr(conftest, "boot", fake_boot)
    return boots


def steps_with_a_spinner(folder):
    (folder / "prepared").write_text("yes")
    return [Step("spin", ("sh",), background=True), Step("a", ("true",)),
            Step("b", ("true",)), Step("stop-spin", stop="spin"), Step("c", ("true",))]


def test_a_guest_that_hung_boots_again_for_the_steps_that_did_not_end(tmp_path, monkeypatch):
    """No emulator here: the first boot hangs in step b, the second in c, the
    third runs. The steps of each boot are prepared in that boot's own folder,
    which exists by then (the rig guest compiles its workload there); the
    second boot starts the spinner b ran beside again, then b and what follows;
    the third only c (the spinner was stopped). The run returned has every
    step's result and finds each output in the folder of the boot that wrote it."""
    boots = fake_boots(monkeypatch, [{"spin": "", "a": "first"},
                                     {"spin": "", "b": "second", "stop-spin": ""},
                                     {"c": "third"}])
    with pytest.warns(UserWarning) as caught:
        run = boot_or_fail(rig_kernel, steps_with_a_spinner, tmp_path)
    assert [str(w.message) for w in caught] == [
        f"rig: booting again after a hang: froze in boot {k}" for k in (1, 2)]
    again = tmp_path / "again"
    assert boots == [(tmp_path, ["spin", "a", "b", "stop-spin", "c"]),
                     (again, ["spin", "b", "stop-spin", "c"]), (again / "again", ["c"])]
    assert (again / "prepared").read_text() == (again / "again" / "prepared").read_text() == "yes"
    assert {name: run.step(name).stdout for name in ("a", "b", "c")} == {
        "a": "first", "b": "second", "c": "third"}
    assert [run.path(name) for name in ("a", "b", "c")] == [
        tmp_path / "a", again / "b", again / "again" / "c"]
    assert run.succeeded("a").stdout == "first"
    with pytest.raises(RigError):
        run.step("never")


def test_a_guest_that_hangs_at_every_boot_has_its_tests_skipped_with_every_hang(
        tmp_path, monkeypatch):
    boots = fake_boots(monkeypatch, [{}] * (conftest.BOOTS + 1))
    with pytest.warns(UserWarning), pytest.raises(pytest.skip.Exception) as skipped:
        boot_or_fail(rig_kernel, steps_with_a_spinner, tmp_path)
    assert len(boots) == conftest.BOOTS
    assert all(f"froze in boot {k}" in str(skipped.value) for k in range(1, conftest.BOOTS + 1))
