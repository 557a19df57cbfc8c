"""The system-setting actions of `tune` (tune/settings.py) on a tree of fake
knob files under tmp_path (the kernel's files as plain files with their
kernel's syntax): each change journalled before it is made and read back
after it, put back and refused when it does not read back as written, the
whole tree equal to what it was, value by value, after the journal's
restore, and after a SIGKILL followed by restore_leftovers(); a root-less
write refused with the reason. Two real knobs of this machine are changed
and restored where the test runs as root (a CPU's PM QoS resume latency,
/dev/cpu_dma_latency held open); the cpuset partition on a real kernel is
the rig's (tests/rig/test_tune_settings.py)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from noisescope import knobs
from noisescope.host import HostRoot
from noisescope.knobs import ABSENT, CREATED, DIRECTORY, KnobJournal, restore_leftovers
from noisescope.pmqos import MAX_US
from noisescope.tune import settings
from noisescope.tune.actions import KERNEL_CMDLINE, NotApplied
from noisescope.tune.plan import RUNTIME, PlanEntry, make_plan
from noisescope.tune.settings import (
    CMDLINE,
    SETTING_SNIPPET_HEADERS,
    SYSCTL,
    TMPFILES,
    partition_cgroup,
    setting_actions,
)

HOUSEKEEPING = (0, 1)
TARGETS = "2-3"
CGROUP = "/sys/fs/cgroup"
WQ = "sys/devices/virtual/workqueue/cpumask"
# A 4-CPU machine's knobs, as the kernel shows them.
TREE = {
    "proc/sys/kernel/osrelease": "6.1.192-rig",
    "proc/sys/vm/stat_interval": "1",
    "proc/sys/kernel/timer_migration": "1",
    "proc/sys/kernel/watchdog": "1",
    "proc/sys/kernel/nmi_watchdog": "1",
    "proc/sys/kernel/watchdog_cpumask": "0-3",
    "proc/sys/kernel/sched_rt_runtime_us": "950000",
    "sys/kernel/mm/transparent_hugepage/enabled": "[always] madvise never",
    "sys/kernel/mm/transparent_hugepage/defrag": "always defer defer+madvise [madvise] never",
    WQ: "f",
    "sys/devices/system/cpu/online": "0-3",
    "sys/devices/system/cpu/intel_pstate/no_turbo": "0",
    "sys/devices/system/clocksource/clocksource0/current_clocksource": "hpet",
    "sys/devices/system/clocksource/clocksource0/available_clocksource": "tsc hpet acpi_pm",
    "proc/mounts": f"cgroup2 {CGROUP} cgroup2 rw,nosuid,nodev,noexec,relatime 0 0",
    "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids",
    "sys/fs/cgroup/cgroup.subtree_control": "cpuset cpu",
}
for _cpu in range(4):
    TREE[f"sys/devices/system/cpu/cpu{_cpu}/power/pm_qos_resume_latency_us"] = "0"
    TREE[f"sys/devices/system/cpu/cpu{_cpu}/cpufreq/scaling_governor"] = "powersave"
    TREE[f"sys/devices/system/cpu/cpu{_cpu}/cpufreq/scaling_available_governors"] = \
        "performance powersave"
TARGET_FILES = [f"sys/devices/system/cpu/cpu{c}/{name}" for c in (2, 3)
                for name in ("power/pm_qos_resume_latency_us", "cpufreq/scaling_governor")]
# action -> the files it changes and what they hold then
CHANGED = {
    "workqueue-cpumask": {WQ: "3"},
    "vm.stat_interval": {"proc/sys/vm/stat_interval": "10"},
    "timer-migration": {"proc/sys/kernel/timer_migration": "0"},
    "watchdogs": {"proc/sys/kernel/watchdog_cpumask": "0-1"},
    "rt-throttling": {"proc/sys/kernel/sched_rt_runtime_us": "-1"},
    "thp": {"sys/kernel/mm/transparent_hugepage/enabled": "madvise"},
    "idle-states": {f"sys/devices/system/cpu/cpu{c}/power/pm_qos_resume_latency_us": "20"
                    for c in (2, 3)},
    "governor": {f"sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor": "performance"
                 for c in (2, 3)},
    "turbo": {"sys/devices/system/cpu/intel_pstate/no_turbo": "1"},
    "clocksource": {"sys/devices/system/clocksource/clocksource0/current_clocksource": "tsc"},
}


def make_tree(tmp_path: Path, tree: dict[str, str] = TREE) -> Path:
    root = tmp_path / "root"
    for name, text in tree.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return root


def snapshot(root: Path) -> dict[str, str]:
    """Every file and directory under `root`, with the files' values: as read_knob
    reads them (the kernel's files end in a newline, what is written back need not),
    a choice file's selected word (the kernel shows `always` as `[always] madvise never`)."""
    return {str(p.relative_to(root)): (settings._chosen(p.read_text().strip()) if p.is_file()
                                       else "<dir>") for p in sorted(root.rglob("*"))}


def entry(action: str, cpus: str | None = TARGETS) -> PlanEntry:
    return PlanEntry(None, action, RUNTIME, action, "evidence", cpus=cpus)


def journal_of(tmp_path: Path) -> KnobJournal:
    return KnobJournal("tune", tmp_path / "journals")


@pytest.fixture
def cgroupfs(monkeypatch):
    """mkdir/rmdir as cgroupfs does them: a new cgroup comes with its cpuset
    files, and goes with them."""
    real_mkdir, real_rmdir = os.mkdir, os.rmdir

    def mkdir(path, mode=0o777, **kwargs):
        real_mkdir(path, mode, **kwargs)
        if Path(path).name.startswith("noisescope-tune-"):
            (Path(path) / "cpuset.cpus").write_text("\n")
            (Path(path) / settings.PARTITION).write_text("member\n")

    def rmdir(path, **kwargs):
        if Path(path).name.startswith("noisescope-tune-"):
            for name in ("cpuset.cpus", settings.PARTITION):
                (Path(path) / name).unlink(missing_ok=True)
        real_rmdir(path, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "rmdir", rmdir)


def test_every_setting_is_made_as_planned_and_the_restore_puts_every_value_back(
        tmp_path, cgroupfs):
    root = make_tree(tmp_path)
    before = snapshot(root)
    actions = setting_actions(str(root))
    journal = journal_of(tmp_path)
    with journal:
        for action in [*CHANGED, "cpuset-partition"]:
            actions[action].make(journal, entry(action), HOUSEKEEPING)
        for action, files in CHANGED.items():
            for name, value in files.items():
                assert (root / name).read_text().strip() == value, (action, name)
        cgroup = root / partition_cgroup(CGROUP).lstrip("/")
        assert (cgroup / "cpuset.cpus").read_text() == TARGETS
        assert (cgroup / settings.PARTITION).read_text() == "isolated"
        # not changed: defrag was madvise already; the mask left the watchdogs on
        assert "[madvise]" in (root / "sys/kernel/mm/transparent_hugepage/defrag").read_text()
        assert (root / "proc/sys/kernel/watchdog").read_text() == "1\n"
        saved = {c["path"]: c for c in json.loads(journal.path.read_text())["changes"]}
        assert saved[str(root / WQ)]["restore"] == "f"
        assert saved[str(root / "sys/kernel/mm/transparent_hugepage/enabled")]["restore"] == \
            "always"  # the selected word, which is what the kernel takes back
        assert saved[str(cgroup)] | {"path": ""} == {"path": "", "value": CREATED,
                                                     "restore": ABSENT, "kind": DIRECTORY,
                                                     "start": None}
    assert snapshot(root) == before  # the cgroup is gone, every file holds what it held
    assert not journal.path.exists()


def test_a_setting_that_reads_back_otherwise_is_put_back_and_refused(tmp_path, monkeypatch):
    root = make_tree(tmp_path)
    before = snapshot(root)
    real = settings.read_knob
    # the kernel keeps timer migration on whatever is written
    monkeypatch.setattr(settings, "read_knob", lambda path: "1" if str(path).endswith(
        "timer_migration") else real(path))
    journal = journal_of(tmp_path)
    with pytest.raises(NotApplied, match=r"timer-migration: .*timer_migration read '1' after "
                                         r"'0' was written \(put back\)"):
        setting_actions(str(root))["timer-migration"].make(journal, entry("timer-migration"),
                                                           HOUSEKEEPING)
    assert snapshot(root) == before and journal.changes == [] and not journal.path.exists()


def test_a_setting_of_two_knobs_puts_the_first_back_when_the_second_is_refused(tmp_path):
    """Both watchdogs go off where there is no watchdog_cpumask; the kernel refuses
    nmi_watchdog (EINVAL, as one without a perf NMI may)."""
    tree = {k: v for k, v in TREE.items() if not k.endswith("watchdog_cpumask")}
    root = make_tree(tmp_path, tree)
    before = snapshot(root)
    journal = journal_of(tmp_path)
    change = journal.change

    def kernel(path, value, restore=None):
        if str(path).endswith("nmi_watchdog"):
            raise OSError(errno.EINVAL, "Invalid argument")
        change(path, value, restore)

    journal.change = kernel
    with pytest.raises(NotApplied, match=r"watchdogs: cannot write 0 to .*nmi_watchdog "
                                         r"\(Invalid argument\) \(put back\)"):
        setting_actions(str(root))["watchdogs"].make(journal, entry("watchdogs"), HOUSEKEEPING)
    assert snapshot(root) == before and journal.changes == [] and not journal.path.exists()


def test_watchdogs_go_off_where_the_mask_would_keep_no_cpu(tmp_path):
    tree = {**TREE, "proc/sys/kernel/watchdog_cpumask": "2-3"}
    root = make_tree(tmp_path, tree)
    journal = journal_of(tmp_path)
    with journal:
        setting_actions(str(root))["watchdogs"].make(journal, entry("watchdogs"), HOUSEKEEPING)
        assert [(root / f"proc/sys/kernel/{n}").read_text() for n in
                ("watchdog", "nmi_watchdog", "watchdog_cpumask")] == ["0", "0", "2-3\n"]
    assert snapshot(root) == snapshot(make_tree(tmp_path / "again", tree))


@pytest.mark.parametrize("action, missing, reason", [
    ("vm.stat_interval", "proc/sys/vm/stat_interval", "does not exist"),
    ("thp", "sys/kernel/mm/transparent_hugepage/enabled", "are not `always` already"),
    ("cpuset-partition", "sys/fs/cgroup/cgroup.controllers", "no cgroup v2 hierarchy offers"),
    ("clocksource", "sys/devices/system/clocksource/clocksource0/available_clocksource",
     "tsc=reliable"),
])
def test_a_setting_this_kernel_lacks_is_refused_and_nothing_is_journalled(
        tmp_path, action, missing, reason):
    root = make_tree(tmp_path, {k: v for k, v in TREE.items() if k != missing})
    before = snapshot(root)
    journal = journal_of(tmp_path)
    with pytest.raises(NotApplied, match=reason):
        setting_actions(str(root))[action].make(journal, entry(action), HOUSEKEEPING)
    assert snapshot(root) == before and journal.changes == []


def test_irqbalance_is_advised_only():
    actions = setting_actions("/nonexistent")
    with pytest.raises(NotApplied, match="systemctl stop irqbalance.*ban CPUs 2-3"):
        actions["irqbalance"].make(None, entry("irqbalance"), HOUSEKEEPING)
    assert actions["irqbalance"].persist(entry("irqbalance"), HOUSEKEEPING) == (
        "irqbalance.conf", "IRQBALANCE_BANNED_CPULIST=2-3\n")


def test_an_isolated_partition_the_kernel_calls_invalid_is_removed_and_refused(
        tmp_path, cgroupfs, monkeypatch):
    root = make_tree(tmp_path)
    before = snapshot(root)
    real = settings.read_knob
    monkeypatch.setattr(settings, "read_knob", lambda path: (
        "isolated invalid (Cpu list in cpuset.cpus not exclusive)"
        if str(path).endswith(settings.PARTITION) else real(path)))
    journal = journal_of(tmp_path)
    with pytest.raises(NotApplied, match=r"read 'isolated invalid \(Cpu list in cpuset.cpus not "
                                         r"exclusive\)' after 'isolated' was written \(put "
                                         r"back\)"):
        setting_actions(str(root))["cpuset-partition"].make(journal, entry("cpuset-partition"),
                                                            HOUSEKEEPING)
    assert snapshot(root) == before and journal.changes == [] and not journal.path.exists()


@pytest.mark.parametrize("journals_open", [False, True])
def test_without_root_a_setting_is_refused_with_the_reason(tmp_path, journals_open):
    """A real knob of this machine, by an unprivileged process (root's child that
    becomes nobody once its imports are done), with the journal directory root's
    (as /run/noisescope is) or open to all: refused, nothing journalled, the knob
    as it was."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a process that becomes nobody")
    knob = "/proc/sys/vm/stat_interval"
    before = Path(knob).read_text()
    journals = Path(tempfile.mkdtemp(prefix="noisescope-test-")) if journals_open \
        else tmp_path / "journals"
    journals.mkdir(mode=0o700, exist_ok=True)
    if journals_open:
        os.chmod(journals, 0o777)
    code = ("import os, sys\nfrom pathlib import Path\n"
            "from noisescope.knobs import KnobJournal\n"
            "from noisescope.tune.plan import PlanEntry\n"
            "from noisescope.tune.settings import SETTING_ACTIONS\n"
            "from noisescope.tune.actions import NotApplied\n"
            "journal = KnobJournal('tune', Path(sys.argv[1]))\n"
            "os.setresgid(65534, 65534, 65534)\n"
            "os.setresuid(65534, 65534, 65534)\n"
            "try:\n"
            "    SETTING_ACTIONS['vm.stat_interval'].make(journal, PlanEntry(None, "
            "'vm.stat_interval', 'runtime', '', '', cpus='1'), (0,))\n"
            "except NotApplied as error:\n"
            "    print(error)\n"
            "print(len(journal.changes))\n")
    try:
        done = subprocess.run([sys.executable, "-c", code, str(journals)], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            f"vm.stat_interval: cannot write 10 to {knob} (Permission denied; needs root)", "0"]
        assert Path(knob).read_text() == before and os.listdir(journals) == []
    finally:
        if journals_open:
            shutil.rmtree(journals)


def test_idle_states_without_the_per_cpu_knob_hold_a_request_until_the_restore(tmp_path):
    """/dev/cpu_dma_latency (a plain file here): held open by the journal while the
    change lasts, closed by the restore; nothing of it goes into the journal file."""
    tree = {k: v for k, v in TREE.items() if "pm_qos_resume_latency_us" not in k}
    root = make_tree(tmp_path, tree)
    device = root / "dev" / "cpu_dma_latency"
    device.parent.mkdir()
    device.write_bytes(b"")

    def open_on_device() -> int:
        return sum(os.path.realpath(f"/proc/self/fd/{fd}") == str(device)
                   for fd in os.listdir("/proc/self/fd"))

    journal = journal_of(tmp_path)
    with journal:
        setting_actions(str(root))["idle-states"].make(journal, entry("idle-states"),
                                                       HOUSEKEEPING)
        assert open_on_device() == 1 and device.read_bytes() == (20).to_bytes(4, "little")
        assert list(journal.held) == ["idle-states"] and not journal.path.exists()
    assert open_on_device() == 0 and journal.held == {}


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="writes a real kernel knob (root)")


@needs_root
def test_a_real_cpu_resume_latency_is_set_read_back_and_restored(tmp_path):
    cpu = max(os.sched_getaffinity(0))
    knob = Path(f"/sys/devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us")
    if not knob.exists():
        pytest.skip(f"no {knob}")
    before = knob.read_text()
    journal = journal_of(tmp_path)
    with journal:
        setting_actions("/")["idle-states"].make(journal, entry("idle-states", str(cpu)),
                                                 HOUSEKEEPING)
        assert knob.read_text() == "20\n"
    assert knob.read_text() == before


@needs_root
def test_a_real_cpu_dma_latency_request_lasts_while_the_journal_holds_it(tmp_path):
    """The kernel's own bound: 20 us while held, none (2000 s) once let go."""
    device = Path(settings.CPU_DMA_LATENCY)
    if not device.exists() or settings._dma_latency_now(device) != MAX_US:
        pytest.skip("no /dev/cpu_dma_latency, or another request holds it")
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "cpu_dma_latency").symlink_to(device)
    (root / "sys/devices/system/cpu").mkdir(parents=True)  # no per-CPU knob in this tree
    journal = journal_of(tmp_path)
    with journal:
        setting_actions(str(root))["idle-states"].make(journal, entry("idle-states", "1"),
                                                       HOUSEKEEPING)
        assert settings._dma_latency_now(device) == 20
    assert settings._dma_latency_now(device) == MAX_US


MAKER = """
import os, sys, time
from noisescope.knobs import KnobJournal
from noisescope.tune.plan import PlanEntry
from noisescope.tune.settings import setting_actions
journal = KnobJournal("tune")
actions = setting_actions(sys.argv[1])
for name in sys.argv[2:]:
    actions[name].make(journal, PlanEntry(None, name, "runtime", "", "", cpus="2-3"), (0, 1))
journal.create_directory(os.path.join(sys.argv[1], "made-by-the-run"))
print("changed", flush=True)
time.sleep(600)
"""


def test_after_sigkill_restore_leftovers_puts_every_setting_back(tmp_path):
    root = make_tree(tmp_path)
    before = snapshot(root)
    journals = tmp_path / "journals"
    maker = subprocess.Popen([sys.executable, "-c", MAKER, str(root), *CHANGED],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "NOISESCOPE_JOURNAL_DIR": str(journals)})
    try:
        assert maker.stdout.readline().strip() == "changed"
        assert snapshot(root) != before and (root / "made-by-the-run").is_dir()
    finally:
        maker.send_signal(signal.SIGKILL)
        maker.wait()
    restored, failed = restore_leftovers(journals)
    assert failed == []
    assert snapshot(root) == before
    assert f"directory {root / 'made-by-the-run'} = {ABSENT}" in restored
    assert len(restored) == sum(len(files) for files in CHANGED.values()) + 1
    assert os.listdir(journals) == []


def test_each_setting_says_what_makes_it_persistent(tmp_path):
    root = make_tree(tmp_path)
    actions = setting_actions(str(root))
    snippets = {name: actions[name].persist(entry(name), HOUSEKEEPING) for name in actions}
    assert {file for file, _ in snippets.values()} <= {*SETTING_SNIPPET_HEADERS, KERNEL_CMDLINE}
    assert snippets["vm.stat_interval"] == (SYSCTL, "vm.stat_interval = 10\n")
    assert snippets["timer-migration"] == (SYSCTL, "kernel.timer_migration = 0\n")
    assert snippets["watchdogs"] == (SYSCTL, "kernel.watchdog_cpumask = 0-1\n")
    assert snippets["rt-throttling"][1].endswith("kernel.sched_rt_runtime_us = -1\n")
    assert "hang" in snippets["rt-throttling"][1]  # the risk, said where it is installed
    assert snippets["thp"] == (TMPFILES, "w /sys/kernel/mm/transparent_hugepage/enabled - - - - "
                                         "madvise\nw /sys/kernel/mm/transparent_hugepage/defrag "
                                         "- - - - madvise\n")
    assert snippets["idle-states"][1].splitlines() == [
        f"w /sys/devices/system/cpu/cpu{c}/power/pm_qos_resume_latency_us - - - - 20"
        for c in (2, 3)]
    assert snippets["cpuset-partition"][1].endswith("isolcpus=2-3\n")
    # a 6.1 kernel has no workqueue.unbound_cpus= yet; 6.6 reads it at boot
    assert snippets["workqueue-cpumask"] == (TMPFILES, f"w /{WQ} - - - - 3\n")
    (root / "proc/sys/kernel/osrelease").write_text("6.6.0\n")
    assert actions["workqueue-cpumask"].persist(entry("workqueue-cpumask"), HOUSEKEEPING) == (
        CMDLINE, "workqueue.unbound_cpus=0-1\n")


def test_the_targets_of_an_entry_without_cpus_are_the_online_cpus_not_kept(tmp_path):
    root = make_tree(tmp_path)
    host = HostRoot(root)
    assert settings.targets_of(entry("governor", None), (0, 1), host) == (2, 3)
    assert settings.targets_of(PlanEntry(1, "watchdogs", RUNTIME, "", ""), (0,), host) == (1,)


def test_the_plan_proposes_an_isolated_partition_where_cgroup_v2_has_cpusets(tmp_path):
    """The planner's synthetic baseline (test_tune_plan): the movable tasks' time,
    63.5% of CPU 1's, is what an isolated partition would keep off it."""
    from .test_tune_plan import FINDINGS, HOST, synthetic

    causes, switches = synthetic()
    plain = make_plan(causes, switches, {1: 2 * 10**9}, (1,), (0,), HOST, FINDINGS)
    assert not [e for e in plain if e.action == "cpuset-partition"]  # the fixture: no cgroup2
    tree = tmp_path / "kvm-guest"
    shutil.copytree(HOST.root, tree)
    (tree / "proc" / "mounts").write_text(f"cgroup2 {CGROUP} cgroup2 rw 0 0\n")
    (tree / "sys/fs/cgroup").mkdir(parents=True)
    (tree / "sys/fs/cgroup/cgroup.controllers").write_text("cpu cpuset\n")
    plan = make_plan(causes, switches, {1: 2 * 10**9}, (1,), (0,), HostRoot(tree), FINDINGS)
    [partition] = [e for e in plan if e.action == "cpuset-partition"]
    assert (partition.cpu, partition.cpus, partition.applies) == (None, "1", RUNTIME)
    assert partition.share_pct == pytest.approx(63.5)
    assert "keeps them on CPUs 0" in partition.evidence
    assert all(e.cpus == "1" for e in plan if e.cpu is None)


def test_a_journalled_directory_is_removed_by_the_restore_and_a_held_resource_let_go(tmp_path):
    made = tmp_path / "cgroup"
    journal = journal_of(tmp_path)
    closed = []

    class Resource:
        def __enter__(self):
            return "held"

        def __exit__(self, *exc):
            closed.append(True)

    with journal:
        journal.create_directory(made)
        assert journal.hold("request", Resource()) == "held"
        with pytest.raises(FileExistsError):  # someone else's: refused, not journalled
            journal.create_directory(made)
        assert made.is_dir() and len(journal.changes) == 1
    assert not made.exists() and closed == [True] and not journal.path.exists()
    assert knobs.Change(str(made), CREATED, ABSENT, DIRECTORY).put_back()  # gone: nothing to do


def test_kept_affinities_are_put_back_after_something_else_rewrote_them(tmp_path):
    """What a cpuset partition does to the tasks outside it, done here by hand."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs this process may use")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        before = os.sched_getaffinity(child.pid)
        journal = journal_of(tmp_path)
        with journal:
            assert journal.keep_affinities([child.pid, 2**22 + 1]) == [f"/proc/{child.pid}"]
            assert os.sched_getaffinity(child.pid) == before  # kept, not changed
            os.sched_setaffinity(child.pid, {cpus[0]})  # the rewrite
        assert os.sched_getaffinity(child.pid) == before and not journal.path.exists()
    finally:
        child.kill()
        child.wait()
