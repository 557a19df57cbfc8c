"""The rig itself fails cleanly: a command that hangs is killed at its limit
and the next ones still run; a kernel that panics before the job gives one
error with the console's tail, never a hung test suite."""

from __future__ import annotations

import pytest

from .conftest import available_kernel, boot_or_fail
from .guest import RigError, Step, boot, rig_kernel


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
