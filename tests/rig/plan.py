"""What each rig boot runs in the guest, in order (the tests read the results).

One boot per kernel keeps the rig's share of the suite small: booting takes
~10 s, and every noisescope command ~10-20 s of TCG time before it measures
anything. Paths are relative to the shared output folder (/run/out in the
guest). Timings inside the guest are emulation artefacts: the steps measure
briefly, and the tests check behaviour, structure and counts.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from .guest import HERE, Step

NOISESCOPE = (sys.executable, "-m", "noisescope")
SPINNER = ("sh", "-c", "while :; do :; done")
SMT = "/sys/devices/system/cpu/smt"
WORKLOAD_MS = 300
BESIDE_S = 25  # noisescope's measuring window, around rtla's run (~10 s under TCG)
RTLA_S = 3
OCCUPANCY_RUNS = 2  # each configuration's shares are pooled over its runs
RUNS = 3


def experiment_file(name: str, runs: int, workload: Path,
                    configurations: dict[str, str]) -> str:
    """An experiment file: the spinning workload under each configuration
    (name -> its TOML lines)."""
    text = f"""
[experiment]
name = "{name}"
runs = {runs}
warmup = 0

[[workload]]
name = "spin"
command = ["{workload}", "{WORKLOAD_MS}"]
"""
    for configuration, lines in configurations.items():
        text += f"\n[[configuration]]\nname = \"{configuration}\"\n{lines}\n"
    return text


def occupancy_experiment(workload: Path) -> str:
    """Sibling occupancy with real siblings (0-1, 2-3, 4-5, 6-7), core scheduling,
    an isolated CPU and NUMA placement: CPU 5 runs a foreign spinner throughout.
    The workload reports where it ran (RIG_REPORT); in same-sibling it forks its
    own second task onto CPU 7 (RIG_SIBLING)."""
    placements = {
        "idle-sibling": 'cpus = "6"',
        "same-sibling": 'cpus = "6"',
        "foreign-sibling": 'cpus = "4"',
        "coresched": 'cpus = "4"\ncore_scheduling = true',
        "isolated": 'cpus = "3"',
        "spread": 'ncpus = 2\nlayout = "spread"',
        "packed": 'ncpus = 2\nlayout = "packed"',
    }
    configurations = {}
    for name, placement in placements.items():
        sibling = ', RIG_SIBLING = "7"' if name == "same-sibling" else ""
        configurations[name] = (f'{placement}\nenv = {{ RIG_CONFIG = "{name}", '
                                f'RIG_REPORT = "reports.jsonl"{sibling} }}')
    return experiment_file("rig-occupancy", OCCUPANCY_RUNS, workload, configurations)


def study_experiment(workload: Path) -> str:
    """The core-scheduling study's three configurations, from one file: a
    workload on CPU 4 while other tenants' spinners may run anywhere on node 1."""
    return experiment_file("rig-study", RUNS, workload, {
        "baseline": 'cpus = "4"',
        "nosmt": 'cpus = "4"\nsmt = "off"',
        "coresched": 'cpus = "4"\ncore_scheduling = true',
    })


def beside(name: str, noisescope: tuple[str, ...], rtla: list[tuple[str, ...]]) -> Step:
    """A noisescope run with rtla runs inside its recording: they start once
    noisescope's measuring threads (ns-*) exist, and each writes NAME.rtlaN.txt
    and its exit status to NAME.rtlaN.rc. The tests find rtla's own threads
    (osnoise/N, timerlat/N) in noisescope's trace: that is rtla's window. The
    step's output is noisescope's."""
    quote = shlex.join
    lines = [f"{quote(noisescope)} &", "run=$!",
             "until grep -qs '^ns-' /proc/[0-9]*/task/*/comm; do",
             "    kill -0 $run 2>/dev/null || break; sleep 0.2", "done"]
    for index, command in enumerate(rtla):
        prefix = f"{name}.rtla{index}"
        lines.append(f"{quote(command)} > {prefix}.txt 2>&1; echo $? > {prefix}.rc")
    lines.append("wait $run")
    return Step(name, ("sh", "-c", "\n".join(lines)), timeout_s=360)


def rig_kernel_steps(out: Path, workload: Path) -> list[Step]:
    """The core-scheduling kernel, booted with isolcpus=2,3 nohz_full=2,3."""
    (out / "occupancy.toml").write_text(occupancy_experiment(workload))
    (out / "study.toml").write_text(study_experiment(workload))
    quiet = ("-q", "--no-report")
    return [
        Step("affinity", (sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))")),
        # Default CPUs (isolated ones included), topology, nohz_full ticks, the
        # osnoise tracer's events beside the standard ones, eight CPUs at once.
        Step("scan-all", (*NOISESCOPE, "scan", "--probes", "detour", "--duration", "2s",
                          "--osnoise", "on", *quiet, "-o", "scan-all"), timeout_s=240),
        Step("system-show", (*NOISESCOPE, "system", "show", "--cpus", "0-7"), timeout_s=60),
        # CPU 2 (isolated, nohz_full, named with --cpus) beside CPU 0 and
        # housekeeping CPU 6. (5 s: explaining 10 s of three traced CPUs took
        # two minutes under TCG.)
        Step("scan", (*NOISESCOPE, "scan", "--cpus", "0,2,6", "--probes", "detour",
                      "--duration", "5s", *quiet, "-o", "scan"), timeout_s=240),
        # rtla timerlat measuring CPU 0 while noisescope timerlat does (issue 12,
        # item 7), in one window; noisescope's also measures isolated CPU 2. (No
        # rtla osnoise: its workload thread froze the emulated guest, twice in
        # three boots, also with a 20% runtime.)
        # (Wakeups explained from 1 ms late: under TCG most are 50 us late, and
        # explaining each one took minutes.)
        beside("timerlat", (*NOISESCOPE, "timerlat", "--cpus", "0,2", "-D", f"{BESIDE_S}s",
                            "--trace-threshold", "1ms", "-q", "-o", "timerlat"),
               [("rtla", "timerlat", "top", "-c", "0", "-d", str(RTLA_S), "-q")]),
        Step("inject-isolated", (*NOISESCOPE, "inject", "--cpu", "3", "--rate", "100Hz",
                                 "--length", "100us", "--for", "1s"), timeout_s=90),
        Step("cluster-default", ("mpirun", "--allow-run-as-root", "--oversubscribe",
                                 "--bind-to", "none", "--mca", "btl", "self,vader", "-n", "2",
                                 *NOISESCOPE, "cluster", "scan", "--probes", "detour",
                                 "--duration", "1s", "--no-trace", *quiet, "-o", "cluster"),
             timeout_s=240),
        # tune's kernel-thread affinity, workqueue cpumask and cpuset partition on
        # CPUs 4-5, counted by sched_switch events (~50 s). After the measuring
        # steps: it restores every setting, but kernel threads that refuse affinity
        # changes keep all CPUs, isolated ones included, once the partition is gone.
        # Before the long experiment runs (which check placement only), where the
        # emulated guest froze most often.
        Step("tune-settings", (sys.executable, str(HERE / "tune_settings_job.py")),
             timeout_s=240),
        # Sibling occupancy, core scheduling and NUMA placement (a foreign spinner on CPU 5).
        Step("spinner-5", ("taskset", "-c", "5", *SPINNER), background=True),
        Step("occupancy", (*NOISESCOPE, "run", "occupancy.toml", "-q", "-o", "occupancy"),
             timeout_s=300),
        Step("stop-spinner-5", stop="spinner-5"),
        # baseline / nosmt / coresched, with two other tenants' spinners on node 1.
        Step("tenant-a", ("taskset", "-c", "4-7", *SPINNER), background=True),
        Step("tenant-b", ("taskset", "-c", "4-7", *SPINNER), background=True),
        Step("study", (*NOISESCOPE, "run", "study.toml", "-q", "-o", "study"), timeout_s=300),
        Step("stop-tenant-a", stop="tenant-a"),
        Step("stop-tenant-b", stop="tenant-b"),
        Step("smt-after", ("cat", f"{SMT}/control", "/sys/devices/system/cpu/online")),
    ]


def rt_kernel_steps() -> list[Step]:
    """Debian's PREEMPT_RT kernel: its facts and the osnoise tracer's events."""
    return [
        Step("scan-rt", (*NOISESCOPE, "scan", "--cpus", "0,2", "--probes", "detour",
                         "--duration", "2s", "--osnoise", "on", "-q", "--no-report",
                         "-o", "scan-rt"), timeout_s=240),
        Step("osnoise-options-after", ("sh", "-c", "mount -t tracefs nodev /sys/kernel/tracing "
                                   "2>/dev/null; cat /sys/kernel/tracing/osnoise/options")),
    ]
