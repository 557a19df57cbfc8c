"""`system show` on captured and synthetic /proc and /sys trees."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from noisescope.errors import UsageError
from noisescope.system import check_system

from ..conftest import HOSTS


def states(root, cpus=None):
    result = check_system(str(root), cpus)
    return {f.check: f.state for f in result.findings}, result


def test_tuned_node_has_nothing_to_advise():
    found, result = states(HOSTS / "tuned-node")
    assert result.cpus == (2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15)  # the isolated CPUs
    assert set(found.values()) == {"ok"}, [f for f in result.findings if f.state != "ok"]
    assert result.exit_code == 0


def test_tuned_node_housekeeping_cpus_get_advice():
    found, result = states(HOSTS / "tuned-node", (0, 1))
    assert found["isolcpus"] == found["nohz_full"] == found["rcu_nocbs"] == "advice"
    assert found["irq affinity"] == "advice"  # the NIC queues are routed to 0-1
    assert found["smt"] == "advice"  # 0 and 8 share a core; 8 is not measured
    assert result.exit_code == 1


def test_laptop_defaults_get_advice_on_everything_a_tuned_node_changes():
    found, result = states(HOSTS / "laptop")
    advised = {name for name, state in found.items() if state == "advice"}
    assert advised == {"governor", "turbo", "idle states", "smt", "isolcpus", "nohz_full",
                       "rcu_nocbs", "irqbalance", "irq affinity", "rt throttling", "watchdogs",
                       "thp", "timer migration"}
    by_check = {f.check: f for f in result.findings}
    assert "C10" in by_check["idle states"].message and "C1E" not in by_check["idle states"].message
    assert "pid 1234" in by_check["irqbalance"].message
    assert "powersave" in by_check["governor"].message
    assert all(f.advice for f in result.findings if f.state == "advice")
    assert result.exit_code == 1


def test_kvm_guest_captured_from_this_machine():
    found, result = states(HOSTS / "kvm-guest")
    assert found["virtualization"] == "advice"
    assert found["governor"] == found["smt"] == found["idle states"] == found["thp"] == "ok"
    assert found["irq affinity"] == "advice" and found["watchdogs"] == "advice"
    steal = [f for f in result.findings if f.check == "virtualization"][0].message
    assert "stolen since boot" in steal
    assert result.exit_code == 1


def test_a_tsc_marked_unstable_is_named_with_what_it_costs_nohz_full(tmp_path):
    """The clocksource watchdog took the TSC off the list (seen in the rig's
    emulated guest: its nohz_full CPUs then ticked at HZ like the others)."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "tuned-node", root)
    clocksource = root / "sys/devices/system/clocksource/clocksource0"
    (clocksource / "available_clocksource").write_text("hpet acpi_pm\n")
    (clocksource / "current_clocksource").write_text("hpet\n")
    found, result = states(root)
    (finding,) = [f for f in result.findings if f.check == "clocksource"]
    assert finding.state == "advice" and "TSC unstable" in finding.message
    assert "nohz_full CPUs keep their tick" in finding.message
    assert "tsc=reliable" in finding.advice
    (clocksource / "available_clocksource").write_text("tsc hpet acpi_pm\n")  # only slower
    found, result = states(root)
    (finding,) = [f for f in result.findings if f.check == "clocksource"]
    assert "echo tsc >" in finding.advice and "unstable" not in finding.message


def test_vmstat_interval_timer_migration_and_the_workqueue_cpumask(tmp_path):
    """kvm-guest: timer_migration 1, workqueue cpumask 3 (CPUs 0-1), no vm.stat_interval."""
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "kvm-guest", root)
    found, result = states(root, (1,))
    by_check = {f.check: f for f in result.findings}
    assert found["timer migration"] == "advice"
    assert "kernel.timer_migration=0" in by_check["timer migration"].advice
    assert found["vm.stat_interval"] == "ok"  # not readable
    queue = by_check["workqueue cpumask"]
    assert queue.state == "advice" and queue.cpus == (1,)
    assert queue.advice.startswith("echo 1 > /sys/devices/virtual/workqueue/cpumask")
    found, _ = states(root, (0, 1))  # every CPU measured: the work has to run on one of them
    assert found["workqueue cpumask"] == "ok"
    (root / "sys/devices/virtual/workqueue/cpumask").write_text("1\n")  # CPU 0 only
    assert states(root, (1,))[0]["workqueue cpumask"] == "ok"
    (root / "proc/sys/vm").mkdir()
    for interval, state in (("1", "advice"), ("10", "ok")):
        (root / "proc/sys/vm/stat_interval").write_text(interval + "\n")
        found, result = states(root, (1,))
        assert found["vm.stat_interval"] == state
    (root / "proc/sys/kernel/timer_migration").write_text("0\n")
    assert states(root, (1,))[0]["timer migration"] == "ok"


def test_a_tree_without_cpu_information_is_an_error(tmp_path):
    result = check_system(str(tmp_path))
    assert [f.state for f in result.findings] == ["error"]
    assert result.exit_code == 1


def test_a_broken_check_is_reported_not_raised(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(HOSTS / "kvm-guest", root)
    (root / "proc/irq/24/smp_affinity_list").write_text("0-x\n")  # unreadable CPU list
    found, result = states(root)
    assert found["irq affinity"] == "error"
    assert result.exit_code == 1


def test_offline_cpu_is_a_usage_error():
    with pytest.raises(UsageError, match="CPU 99 is offline"):
        check_system(str(HOSTS / "laptop"), (99,))


@pytest.mark.parametrize("host, code", [("tuned-node", 0), ("laptop", 1)])
def test_cli_exit_codes(host, code):
    """0 nothing to advise, 1 advice; 2 is reserved for bad input (below), so that a
    script can tell "tune this machine" from "you called me wrong"."""
    done = subprocess.run([sys.executable, "-m", "noisescope", "system", "show", "--root",
                           str(HOSTS / host)], capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert f"(exit status {code})" in done.stdout
    assert "governor" in done.stdout


def test_cli_bad_root_is_one_line_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "noisescope", "system", "show", "--root",
                           str(tmp_path / "missing")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "does not exist" in done.stderr


def test_cli_an_offline_cpu_is_bad_input_not_advice():
    done = subprocess.run([sys.executable, "-m", "noisescope", "system", "show", "--root",
                           str(HOSTS / "laptop"), "--cpus", "99"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("noisescope: error: CPU 99 is offline")
