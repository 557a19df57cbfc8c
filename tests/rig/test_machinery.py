"""The rig itself fails cleanly: a command that hangs is killed at its limit
and the next ones still run; a guest that goes silent is a hang found long
before its step's limit; a kernel that panics before the job gives one error
with the console's tail, never a hung test suite."""

from __future__ import annotations

import pytest

from . import conftest
from .conftest import available_kernel, boot_or_fail
from .guest import GuestHung, RigError, Step, boot, rig_kernel


def test_a_hanging_command_is_killed_and_the_next_one_still_runs(tmp_path):
    run = boot_or_fail(rig_kernel, lambda _: [
        Step("hangs", ("sleep", "600"), timeout_s=3),
        Step("after", ("echo", "still here")),
    ], tmp_path)
    assert run.step("hangs").returncode is None  # killed at its limit
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
    step end. Found after the silence allowance (45 s here, with the job's
    30 s heartbeat), not after the step's 600 s limit."""
    kernel = available_kernel(rig_kernel)
    with pytest.raises(GuestHung) as raised:
        boot(kernel, [Step("freezes", ("sh", "-c", "kill -STOP $PPID; sleep 600"),
                           timeout_s=600)], tmp_path, silence_s=45)
    assert "went silent in step freezes: no line from its job for 45 s" in str(raised.value)


def test_a_guest_that_hung_boots_again_with_its_steps_prepared_in_a_fresh_folder(
        tmp_path, monkeypatch):
    """No emulator here: the first boot hangs, the second runs. The steps of
    each boot are prepared in that boot's own folder, which exists by then (the
    rig guest compiles its workload there)."""
    boots = []

    def fake_boot(kernel, steps, out):
        boots.append((out, steps))
        if len(boots) == 1:
            raise GuestHung("froze at its first step")
        return "the second run"

    def steps_of(folder):
        (folder / "prepared").write_text("yes")
        return [Step(folder.name, ("true",))]

    monkeypatch.setattr(conftest, "available_kernel", lambda kernel_of: "kernel")
    monkeypatch.setattr(conftest, "boot", fake_boot)
    with pytest.warns(UserWarning, match="booting again after a hang: froze at its first step"):
        assert boot_or_fail(rig_kernel, steps_of, tmp_path) == "the second run"
    assert [out for out, _ in boots] == [tmp_path, tmp_path / "again"]
    assert (tmp_path / "again" / "prepared").read_text() == "yes"
    assert boots[1][1] == [Step("again", ("true",))]
