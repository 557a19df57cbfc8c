"""`noisescope tune` (dry run) on this machine: a periodic CPU hog of known rate
and length on the target CPU must be in the plan with its pid and a time
bounded on both sides, and nothing on the machine may change; bad input gets
exit 2 and one line.

The hog busy-waits HOG_BUSY_NS every HOG_PERIOD_NS (absolute deadlines; a
missed one is skipped). It is pinned to the target CPU so that all of its
time lands there (issue 16 wants one allowed on all CPUs; the scheduler would
then move it off the busy sampler's CPU at will, and the test would measure
the load balancer). Needs root and tracefs; skips itself otherwise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import noisescope
from noisescope.host import HostRoot, parse_interrupts
from noisescope.units import parse_cpu_list as _cpus

from ..conftest import needs_root
from ..helpers import as_nobody

CLI = [sys.executable, "-m", "noisescope"]
HOG_PERIOD_NS = 5_000_000
HOG_BUSY_NS = 300_000
HOG = f"""
import os, time
os.sched_setaffinity(0, {{int(os.environ["HOG_CPU"])}})
period, busy = {HOG_PERIOD_NS}, {HOG_BUSY_NS}
next_ns = time.monotonic_ns()
while True:
    end = time.monotonic_ns() + busy
    while time.monotonic_ns() < end:
        pass
    next_ns += period
    now = time.monotonic_ns()
    if next_ns < now:  # missed (the CPU was taken): skip to the next deadline
        next_ns = now + period - (now - next_ns) % period
    time.sleep((next_ns - now) / 1e9)
"""
# What tune must not change: sysctls and files of every knob a later part may touch.
SETTINGS = ["/proc/sys/kernel/watchdog", "/proc/sys/kernel/nmi_watchdog",
            "/proc/sys/kernel/watchdog_cpumask", "/proc/sys/kernel/sched_rt_runtime_us",
            "/proc/sys/kernel/sched_rt_period_us", "/proc/sys/vm/stat_interval",
            "/proc/sys/kernel/timer_migration", "/sys/devices/virtual/workqueue/cpumask",
            "/sys/kernel/mm/transparent_hugepage/enabled",
            "/sys/kernel/mm/transparent_hugepage/defrag"]


def machine_state(hog: int) -> dict[str, str | None]:
    host = HostRoot("/")
    state: dict[str, str | None] = {path: host.text(path) for path in SETTINGS}
    for irq in host.listdir("/proc/irq"):
        if irq.isdigit():
            state[f"irq {irq}"] = host.text(f"/proc/irq/{irq}/smp_affinity")
    state["hog affinity"] = str(sorted(os.sched_getaffinity(hog)))
    return state


def run_seconds(pid: int) -> float:
    """The task's CPU time so far (schedstat: ns on the CPU)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def _tracing_reason() -> str | None:
    if not Path("/sys/kernel/tracing").is_dir():
        return "no tracefs at /sys/kernel/tracing"
    return None


@needs_root
def test_the_plan_names_an_injected_hog_with_its_pid_and_changes_nothing(tmp_path,
                                                                         live_facts):
    if _tracing_reason():
        pytest.skip(_tracing_reason())
    if len(live_facts.online) < 2:
        pytest.skip("needs two CPUs (a target and a housekeeping one)")
    target = live_facts.online[-1]
    hog = subprocess.Popen([sys.executable, "-c", HOG], env={**os.environ,
                                                            "HOG_CPU": str(target)})
    try:
        time.sleep(0.3)  # pinned and looping
        before, ran_before = machine_state(hog.pid), run_seconds(hog.pid)
        began = time.monotonic()
        done = subprocess.run([*CLI, "tune", "--cpus", str(target), "--duration", "3s", "-q",
                               "-o", str(tmp_path / "plan")],
                              capture_output=True, text=True, timeout=300)
        wall_s = time.monotonic() - began
        ran = run_seconds(hog.pid) - ran_before
        after = machine_state(hog.pid)
    finally:
        hog.kill()
        hog.wait()
    assert done.returncode == 0, done.stderr
    assert "Tuning plan" in done.stdout and f"(pid {hog.pid})" in done.stdout
    assert after == before  # value by value: affinities, IRQ masks, sysctls

    bundle = noisescope.load(tmp_path / "plan")  # validated against the schema
    manifest = bundle.manifest
    assert manifest["kind"] == "tune"
    found = [e for e in manifest["summaries"]["plan"]
             if e["pid"] == hog.pid and e["cpu"] == target]
    assert len(found) == 1, manifest["summaries"]["plan"]
    entry = found[0]
    assert entry["action"] == "task-affinity" and entry["applies"] == "runtime"
    comm = Path(sys.executable).name[:15]  # what the kernel names a task: its program's file
    assert entry["source"] == f"process {comm} (pid {hog.pid})"
    measured_s = next(s["measured_ns"] for s in manifest["summaries"]["detour"]
                      if s["cpu"] == target) / 1e9
    # The hog's own accounting is the ground truth: it ran `ran` s (schedstat) during the
    # whole command (asked for 60 ms a second; a busy machine gives it less, and it skips
    # missed periods). Its share of that in the measured window, if it ran evenly:
    in_window_s = ran * measured_s / wall_s
    assert ran > 0
    # Lower bound: half of that (the window is when the sampler competes for the CPU).
    # Upper bound: all it ran during the command, of which the window is a part, plus
    # one period's work.
    assert 0.5 * in_window_s * 1e9 <= entry["lost_ns"] <= (ran + HOG_BUSY_NS / 1e9) * 1e9
    # Its periods: one detour each, fewer where one detour held two (the sampler waited
    # for another task meanwhile), more where another task split one.
    periods = in_window_s * 1e9 / HOG_BUSY_NS
    assert 0.25 * periods <= entry["count"] <= 3 * measured_s * 1e9 / HOG_PERIOD_NS
    causes = bundle.table("detour_causes")
    lost = int(causes["duration_ns"][causes["cpu"] == target].sum())  # the CPU's lost time
    assert 0 < entry["share_pct"] <= 100
    assert entry["share_pct"] == pytest.approx(100 * entry["lost_ns"] / lost)
    claimed = sum(e["lost_ns"] for e in manifest["summaries"]["plan"]
                  if e["cpu"] == target and e["action"] != "boot:isolcpus")
    assert claimed <= lost
    # every IRQ named by number is the one /proc/interrupts calls by its name
    names = parse_interrupts(Path("/proc/interrupts").read_text()).descriptions
    for irq in [e for e in manifest["summaries"]["plan"] if e["irq"] is not None]:
        assert irq["source"].split()[2] in names[str(irq["irq"])].replace(",", " ").split()


def _one_line_error(done: subprocess.CompletedProcess, says: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("noisescope: error: ") and says in lines[0]


@needs_root
def test_bad_targets_are_refused_before_anything_runs(tmp_path, live_facts):
    every = f"{live_facts.online[0]}-{live_facts.online[-1]}"
    _one_line_error(subprocess.run([*CLI, "tune", "--cpus", every, "-o", str(tmp_path / "a")],
                                   capture_output=True, text=True, timeout=120),
                    "leave no housekeeping CPU")
    _one_line_error(subprocess.run([*CLI, "tune", "--cpus", "4095"], capture_output=True,
                                   text=True, timeout=120), "offline or does not exist")
    assert not (tmp_path / "a").exists()


@needs_root
def test_not_root_is_refused(live_facts):
    with as_nobody([Path(noisescope.__file__).parent]) as (prefix, scratch):
        done = subprocess.run([*prefix, *CLI, "tune", "--cpus", str(live_facts.online[-1]),
                               "-o", str(scratch / "x")], capture_output=True, text=True,
                              timeout=120, cwd=scratch, env={**os.environ, "HOME": str(scratch)})
        _one_line_error(done, "tune needs root")
        assert not (scratch / "x").exists()


MOVER = """
import sys, time
from noisescope.knobs import KnobJournal
from noisescope.tune.actions import NotApplied, move_irq, move_task
journal = KnobJournal("tune")
housekeeping = (int(sys.argv[2]),)
for irq in sys.argv[3:]:
    try:
        move_irq(journal, int(irq), housekeeping)
    except NotApplied as why:
        continue
    print("irq", irq, flush=True)
    break
move_task(journal, int(sys.argv[1]), housekeeping)
print("changed", flush=True)
time.sleep(600)
"""


@needs_root
def test_real_irq_and_task_moves_are_restored_by_cleanup_after_sigkill(tmp_path, live_facts):
    """The primitives a later `tune --measure` will use, on this machine: a process
    moves a device IRQ and the hog's affinity to the housekeeping CPU, journalled,
    and is killed with SIGKILL; `noisescope cleanup` puts both back (journals, and
    the leftovers it sweeps, kept under tmp_path)."""
    if len(live_facts.online) < 2:
        pytest.skip("needs two CPUs")
    housekeeping, target = live_facts.online[0], live_facts.online[-1]
    host = HostRoot("/")
    irqs = [irq for irq in host.listdir("/proc/irq") if irq.isdigit()
            and target in _cpus(host.text(f"/proc/irq/{irq}/smp_affinity_list") or "0-0")]
    if not irqs:
        pytest.skip(f"no IRQ may fire on CPU {target}")
    env = {**os.environ, "NOISESCOPE_JOURNAL_DIR": str(tmp_path / "journals"),
           "TMPDIR": str(tmp_path)}
    hog = subprocess.Popen([sys.executable, "-c", HOG], env={**env, "HOG_CPU": str(target)})
    try:
        time.sleep(0.3)
        before = machine_state(hog.pid)
        mover = subprocess.Popen([sys.executable, "-c", MOVER, str(hog.pid), str(housekeeping),
                                  *irqs], stdout=subprocess.PIPE, text=True, env=env)
        said = [mover.stdout.readline().split() for _ in range(2)]
        assert said[-1] == ["changed"], said
        moved_irq = said[0][1] if said[0][0] == "irq" else None
        changed = machine_state(hog.pid)
        assert changed["hog affinity"] == str([housekeeping])
        if moved_irq is not None:
            assert changed[f"irq {moved_irq}"] != before[f"irq {moved_irq}"]
        mover.send_signal(signal.SIGKILL)
        mover.wait()
        done = subprocess.run([*CLI, "cleanup"], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env=env)
        after = machine_state(hog.pid)
    finally:
        hog.kill()
        hog.wait()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"restored CPU affinity of task {hog.pid} = " in done.stdout
    if moved_irq is not None:
        assert f"/proc/irq/{moved_irq}/smp_affinity_list" in done.stdout
    assert after == before  # value by value


# -- --measure, --apply, --restore --------------------------------------------------------
# The trials move only the hog (--only pid:N) and, where this VM lets one move, a
# device IRQ routed to the target CPU first: other processes on this shared machine
# (other people's tests) are left where they are.

# A device IRQ of known rate: the network device's transmit completions, one for
# each UDP packet sent to the default gateway (a packet to its discard port; on this
# VM 2,692 packets sent raised virtio2-output.0 2,572 times), sent by a process on
# the housekeeping CPU.
PACKETS_PER_S = 1000
SENDER = """
import os, socket, sys, time
os.sched_setaffinity(0, {int(sys.argv[2])})
out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
period, due = 1 / float(sys.argv[3]), time.monotonic()
while True:
    out.sendto(b"noisescope tune test", (sys.argv[1], 9))
    due += period
    time.sleep(max(0.0, due - time.monotonic()))
"""


def network_tx_irq() -> tuple[str, str] | None:
    """(the default gateway, the IRQ of the device that reaches it's transmit queue
    0), if the route goes through a virtio network device."""
    for line in (HostRoot("/").text("/proc/net/route") or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":  # the default route
            gateway = ".".join(str(b) for b in int(fields[2], 16).to_bytes(4, "little"))
            device = Path(f"/sys/class/net/{fields[0]}/device").resolve().name  # virtioN
            names = parse_interrupts(HostRoot("/").text("/proc/interrupts") or "").descriptions
            for irq, text in names.items():
                if irq.isdigit() and f"{device}-output.0" in text.split():
                    return gateway, irq
    return None


def movable_irq(target: int, housekeeping: int, journal) -> str | None:
    """A virtio device's IRQ that may be routed to `target` alone and back (its
    smp_affinity_list reads back what was written), routed there through
    `journal`, the network device's transmit IRQ first; None if this VM has none
    (managed IRQs refuse: EIO/EPERM; on the VM this was written on virtio1-req.0,
    the disk's, refuses, the network's and vsock's move)."""
    from noisescope.tune.actions import NotApplied, move_irq

    host = HostRoot("/")
    names = parse_interrupts(host.text("/proc/interrupts") or "").descriptions
    virtio = [i for i, text in names.items() if i.isdigit() and "virtio" in text]
    network = network_tx_irq()
    first = network[1] if network else None
    for irq in sorted(virtio, key=lambda i: (i != first, int(i))):
        now = host.text(f"/proc/irq/{irq}/smp_affinity_list") or ""
        if not now or target not in _cpus(now) or housekeeping not in _cpus(now):
            continue
        try:
            move_irq(journal, int(irq), (target,))
        except NotApplied:
            continue
        return irq
    return None


@pytest.fixture
def hog_on_target(tmp_path, live_facts):
    """The hog on the target CPU, a movable IRQ routed there (journalled under
    tmp_path, put back afterwards), and the environment tune runs in (its
    journals and leftovers under tmp_path)."""
    from noisescope.knobs import KnobJournal

    if _tracing_reason():
        pytest.skip(_tracing_reason())
    if len(live_facts.online) < 2:
        pytest.skip("needs two CPUs (a target and a housekeeping one)")
    housekeeping, target = live_facts.online[0], live_facts.online[-1]
    env = {**os.environ, "NOISESCOPE_JOURNAL_DIR": str(tmp_path / "journals"),
           "TMPDIR": str(tmp_path)}
    hog = subprocess.Popen([sys.executable, "-c", HOG], env={**env, "HOG_CPU": str(target)})
    sender = None
    with KnobJournal("test-route", tmp_path / "routes") as routes:
        irq = movable_irq(target, housekeeping, routes)
        network = network_tx_irq()
        if network is not None and irq == network[1]:
            sender = subprocess.Popen([sys.executable, "-c", SENDER, network[0],
                                       str(housekeeping), str(PACKETS_PER_S)])
        try:
            time.sleep(0.3)  # pinned and looping
            yield hog, target, housekeeping, irq, env
        finally:
            for process in (hog, sender):
                if process is not None:
                    process.kill()
                    process.wait()


def no_journals(tmp_path: Path) -> bool:
    return not (tmp_path / "journals").exists() or os.listdir(tmp_path / "journals") == []


def _tune(args, env, **kwargs):
    return [*CLI, "tune", *args], dict(env=env, text=True, **kwargs)


def _trial(bundle, pid: int) -> dict:
    found = [t for t in bundle.summaries["trials"] if t["pid"] == pid]
    assert len(found) == 1, bundle.summaries["trials"]
    return found[0]


def _targeted(trial: dict, cpu: int) -> dict:
    return next(r for r in trial["comparison"] if r["metric"] == "targeted_pct" and r["cpu"] == cpu)


@needs_root
def test_measure_moves_the_hog_measures_its_share_gone_and_restores_everything(tmp_path,
                                                                               hog_on_target):
    hog, target, housekeeping, irq, env = hog_on_target
    before = machine_state(hog.pid)
    only = f"pid:{hog.pid}" + (f",irq:{irq}" if irq else "")
    argv, kwargs = _tune(["--cpus", str(target), "--measure", "--rounds", "2", "--duration", "2s",
                          "--only", only, "-q", "-o", str(tmp_path / "measured")], env)
    done = subprocess.run(argv, capture_output=True, timeout=300, cwd=tmp_path, **kwargs)
    after = machine_state(hog.pid)
    assert done.returncode == 0, done.stdout + done.stderr
    assert after == before  # value by value: the hog's affinity, every IRQ's, the sysctls
    assert no_journals(tmp_path)
    assert "every change was put back" in done.stdout and "Trials" in done.stdout

    bundle = noisescope.load(tmp_path / "measured")  # validated against the schema
    trial = _trial(bundle, hog.pid)
    assert trial["status"] == "measured" and trial["rounds"] == 4 and trial["kept"] is None
    share = _targeted(trial, target)
    # Ground truth: the hog asks for 300 us every 5 ms, 6% of the CPU; a busy machine
    # gives it less (the dry-run test above saw half and more). Its time on the CPU is
    # its run plus its wakeup and the two switches around it (about 30 us on this VM,
    # docs: a 45 us injection shows as a 74 us detour; up to 60 us seen here when busy):
    # with 100 us allowed, (300 + 100) / 5000 = 8%. Moved to the housekeeping CPU, it
    # cannot run on the target at all: exactly 0.
    assert 1.0 <= share["before_median"] <= 8.0
    assert share["after_median"] == 0
    assert all(r["targeted_ns"] == 0 for r in bundle.summaries["rounds"]
               if r["trial"] == trial["trial"] and r["phase"] == "changed")
    assert share["significant"] and share["verdict"] == "better" and share["pairs_agree"]
    assert share["ci_low"] <= share["change"] <= share["ci_high"] < 0
    assert trial["verdict"] in ("helps", "hurts")  # never "no effect": its share went
    # every round of the trial: on the target CPU, labelled by phase, 2 s measured
    rounds = [r for r in bundle.summaries["rounds"] if r["trial"] == trial["trial"]]
    assert [r["phase"] for r in rounds] == ["baseline", "changed"] * 2
    assert all(1.9e9 <= r["measured_ns"] <= 2.1e9 and r["cpu"] == target for r in rounds)
    assert bundle.has_table("round_causes") and bundle.has_table("round_histogram")
    irq_trials = [t for t in bundle.summaries["trials"] if irq and t["irq"] == int(irq)]
    network = network_tx_irq()
    if network is not None and irq == network[1]:
        # Ground truth: PACKETS_PER_S transmit completions a second, routed to the
        # target: the IRQ is a candidate, tried, and moved away its share is gone.
        assert len(irq_trials) == 1, bundle.summaries["trials"]
        irq_share = _targeted(irq_trials[0], target)
        assert irq_share["before_median"] > 0 and irq_share["after_median"] == 0
        assert irq_share["significant"] and irq_share["verdict"] == "better"
        counts = [r["count"] for r in bundle.summaries["plan"] if r.get("irq") == int(irq)]
        seconds = bundle.summaries["detour"][0]["measured_ns"] / 1e9
        # at most one handler run per packet; at least a tenth of them counted
        # (the device may complete several packets in one interrupt)
        assert 0.1 * PACKETS_PER_S <= counts[0] / seconds <= 1.2 * PACKETS_PER_S, counts
    for t in irq_trials:  # tried only if it fired enough in the baseline
        assert t["status"] == "measured"
    report = subprocess.run([*CLI, "report", str(tmp_path / "measured"), "-o",
                             str(tmp_path / "report.html")], capture_output=True, text=True,
                            timeout=300)
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "report.html").read_text()
    assert "Trials (each change measured" in html and "Before and after" in html


def _wait_until_moved(tune: subprocess.Popen, hog: int, housekeeping: int) -> None:
    """Until tune is in a changed round of the hog's trial (its affinity moved)."""
    deadline = time.monotonic() + 120
    while os.sched_getaffinity(hog) != {housekeeping}:
        assert tune.poll() is None, tune.communicate()
        assert time.monotonic() < deadline, "the hog was never moved"
        time.sleep(0.05)


def _wait_until_sampling(tune: subprocess.Popen, cpu: int) -> None:
    """Until tune's detour sampler thread on `cpu` runs (the native core names it
    ns-detour/CPU): the round's scan has set up and measures."""
    deadline = time.monotonic() + 60
    while True:
        names = [HostRoot("/").text(f"/proc/{tune.pid}/task/{tid}/comm") or ""
                 for tid in HostRoot("/").listdir(f"/proc/{tune.pid}/task")]
        if f"ns-detour/{cpu}" in names:
            return
        assert tune.poll() is None, tune.communicate()
        assert time.monotonic() < deadline, "the round never started measuring"
        time.sleep(0.02)


def _start_measuring(tmp_path: Path, env: dict, hog: int, target: int, name: str
                     ) -> subprocess.Popen:
    """tune --measure of the hog alone, 3 pairs of 1 s rounds, into tmp_path/name."""
    argv, kwargs = _tune(["--cpus", str(target), "--measure", "--rounds", "3", "--duration", "1s",
                          "--only", f"pid:{hog}", "-q", "-o", str(tmp_path / name)], env)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                            **kwargs)


@needs_root
def test_sigterm_mid_round_restores_and_keeps_what_was_measured(tmp_path, hog_on_target):
    hog, target, housekeeping, irq, env = hog_on_target
    before = machine_state(hog.pid)
    tune = _start_measuring(tmp_path, env, hog.pid, target, "stopped")
    _wait_until_moved(tune, hog.pid, housekeeping)
    _wait_until_sampling(tune, target)
    time.sleep(0.3)  # inside the changed round's measurement (1 s)
    tune.send_signal(signal.SIGTERM)
    out, err = tune.communicate(timeout=120)
    after = machine_state(hog.pid)
    assert tune.returncode == 130, out + err
    assert after == before
    assert no_journals(tmp_path)
    bundle = noisescope.load(tmp_path / "stopped")
    assert not bundle.complete
    assert any(w.code.value == "interrupted" and "trials" in w.message for w in bundle.warnings)
    trial = _trial(bundle, hog.pid)
    assert trial["status"] == "interrupted" and 2 <= trial["rounds"] < 6
    assert [r["phase"] for r in bundle.summaries["rounds"]][-1] == "changed"


@needs_root
def test_sigkill_mid_round_then_cleanup_restores(tmp_path, hog_on_target):
    hog, target, housekeeping, irq, env = hog_on_target
    before = machine_state(hog.pid)
    tune = _start_measuring(tmp_path, env, hog.pid, target, "killed")
    _wait_until_moved(tune, hog.pid, housekeeping)
    tune.send_signal(signal.SIGKILL)
    tune.communicate(timeout=60)
    assert machine_state(hog.pid) != before  # left moved
    done = subprocess.run([*CLI, "cleanup"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"restored CPU affinity of task {hog.pid} = {target}" in done.stdout
    assert machine_state(hog.pid) == before
    assert not (tmp_path / "killed").exists()


@needs_root
def test_apply_keeps_only_what_helped_and_restore_puts_it_back(tmp_path, hog_on_target):
    hog, target, housekeeping, irq, env = hog_on_target
    before = machine_state(hog.pid)
    for attempt in range(3):  # bounded: a noisy round may call the move "hurts" (not kept)
        out = tmp_path / f"applied-{attempt}"
        argv, kwargs = _tune(["--cpus", str(target), "--apply", "--rounds", "2", "--duration",
                              "2s", "--only", f"pid:{hog.pid}", "-q", "-o", str(out)], env)
        done = subprocess.run(argv, capture_output=True, timeout=300, cwd=tmp_path, **kwargs)
        assert done.returncode == 0, done.stdout + done.stderr
        trial = _trial(noisescope.load(out), hog.pid)
        assert trial["kept"] is (trial["verdict"] == "helps")
        if trial["kept"]:
            break
        assert machine_state(hog.pid) == before and "kept nothing" in done.stdout
    else:
        pytest.fail(f"the hog's move never helped in 3 runs: {trial}")
    assert os.sched_getaffinity(hog.pid) == {housekeeping}  # kept
    assert "noisescope tune --restore" in done.stdout
    kept = os.listdir(tmp_path / "journals")
    assert len(kept) == 1 and kept[0].startswith("kept-tune-")
    snippet = (out / "persistent" / "task-affinity.sh").read_text()
    assert snippet.startswith("#!/bin/sh\n") and f"taskset -a -p -c {housekeeping} {hog.pid}" in snippet
    # the tune process is gone, yet cleanup leaves the kept change alone
    subprocess.run([*CLI, "cleanup"], capture_output=True, timeout=120, cwd=tmp_path, env=env)
    assert os.sched_getaffinity(hog.pid) == {housekeeping}
    restored = subprocess.run([*CLI, "tune", "--restore"], capture_output=True, text=True,
                              timeout=120, env=env)
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert f"restored CPU affinity of task {hog.pid} = {target}" in restored.stdout
    assert machine_state(hog.pid) == before and os.listdir(tmp_path / "journals") == []
