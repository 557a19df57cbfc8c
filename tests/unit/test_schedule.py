import pytest

from noisescope.diagnostics import Code
from noisescope.errors import UsageError
from noisescope.probes.schedule import plan_windows, rt_budget_ns

S = 1_000_000_000


def test_normal_priority_measures_back_to_back_one_second_windows():
    schedule, notes = plan_windows(10 * S, rt=False)
    assert (schedule.runtime_ns, schedule.period_ns, schedule.windows) == (S, S, 10)
    assert schedule.measured_ns == schedule.elapsed_ns == 10 * S
    assert notes == []


def test_rt_leaves_the_kernel_time_in_every_period():
    schedule, _ = plan_windows(10 * S, rt=True, rt_budget=rt_budget_ns(950_000, 1_000_000))
    assert schedule.runtime_ns == 900_000_000 and schedule.period_ns == S
    assert schedule.windows == 12  # 10 s of measuring in 900 ms windows
    assert schedule.measured_ns == 10 * S
    assert schedule.elapsed_ns > schedule.measured_ns


def test_rt_windows_are_shortened_to_the_kernel_budget():
    schedule, notes = plan_windows(3 * S, rt=True, runtime_ns=S, rt_budget=rt_budget_ns(
        950_000, 1_000_000))
    assert schedule.runtime_ns <= 950_000_000 - 20_000_000
    assert [n.code for n in notes] == [Code.RT_THROTTLING]


def test_unthrottled_kernel_keeps_the_requested_window():
    schedule, notes = plan_windows(3 * S, rt=True, runtime_ns=S, rt_budget=rt_budget_ns(-1, 10**6))
    assert schedule.runtime_ns == S and notes == []


def test_partial_last_window():
    schedule, _ = plan_windows(2_500_000_000, rt=False)
    assert schedule.windows == 3 and schedule.last_runtime_ns == 500_000_000


def test_runtime_longer_than_period_is_an_error():
    with pytest.raises(UsageError):
        plan_windows(S, rt=False, runtime_ns=2 * S, period_ns=S)
