"""`system show`: a read-only check of what adds noise on this machine.

Each check looks at one knob (frequency governor, turbo, idle states, SMT,
CPU isolation, IRQs, RT throttling, watchdogs, THP, vm.stat_interval, timer
migration, the unbound workqueue cpumask, timer tick, clocksource,
virtualization) for the CPUs one measures and returns one Finding: "ok",
"advice" (it adds noise; how to change it) or "error" (it could not be
checked). Everything is read through a HostRoot, so captured trees can be
checked too; nothing here changes the machine.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from .errors import UsageError
from .host import (
    HostFacts,
    HostRoot,
    cpuid_hypervisor_signature,
    parse_interrupts,
    read_host_facts,
)
from .units import cpumask_text, format_cpu_list, parse_cpu_list

OK, ADVICE, ERROR = "ok", "advice", "error"
# Exit status of `system show`: 0 nothing to advise, 1 something to act on (advice, or a
# check that could not be made); 2 stays the usage error every command exits with.
EXIT_CODES = {OK: 0, ADVICE: 1, ERROR: 1}
DEEP_IDLE_LATENCY_US = 20  # idle states that take longer than this to leave
SHALLOW_IDLE_NAMES = re.compile(r"^(POLL|C1|C1-\w+|haltpoll.*)$", re.I)
FAST_CLOCKSOURCES = {
    "tsc",
    "kvm-clock",
    "arch_sys_counter",
    "hyperv_clocksource_tsc_page",
    "timebase",
    "riscv_clocksource",
}


@dataclass(frozen=True)
class Finding:
    check: str
    state: str  # ok, advice or error
    message: str
    advice: str | None = None
    cpus: tuple[int, ...] = ()  # the checked CPUs the advice is about, where it names some

    def to_dict(self) -> dict:
        return {**asdict(self), "cpus": list(self.cpus)}

    @classmethod
    def from_dict(cls, data: dict) -> Finding:
        return cls(data["check"], data["state"], data["message"], data.get("advice"),
                   tuple(data.get("cpus", ())))


def _cpus(cpus: tuple[int, ...]) -> str:
    return f"CPU{'s' if len(cpus) > 1 else ''} {format_cpu_list(cpus)}"


def ok(message: str) -> Finding:
    return Finding("", OK, message)


def advice(message: str, fix: str, cpus: tuple[int, ...] = ()) -> Finding:
    return Finding("", ADVICE, message, fix, cpus)


@dataclass
class Machine:
    """What the checks read: the root, its host facts and the measured CPUs."""

    host: HostRoot
    facts: HostFacts
    cpus: tuple[int, ...]

    @property
    def cpu_text(self) -> str:
        return format_cpu_list(self.cpus) if self.cpus else "(none)"

    @property
    def housekeeping(self) -> tuple[int, ...]:
        return tuple(c for c in self.facts.online if c not in self.cpus)

    def cpu_set(self, text: str | None) -> set[int]:
        if not text:
            return set()
        if text.strip() == "all":
            return set(self.facts.online)
        # isolcpus may start with flags: isolcpus=nohz,domain,2-7
        return set(parse_cpu_list(",".join(p for p in text.split(",") if p[:1].isdigit())))

    def not_in(self, cpus: set[int]) -> tuple[int, ...]:
        return tuple(c for c in self.cpus if c not in cpus)


def _governor(m: Machine) -> Finding:
    governors = {c: m.facts.governors.get(str(c)) for c in m.cpus}
    if not any(governors.values()):
        return ok("no cpufreq governor: the platform or hypervisor sets the frequency")
    slow = sorted({g for g in governors.values() if g and g != "performance"})
    if not slow:
        return ok(f"performance on {_cpus(m.cpus)}")
    return advice(
        f"governor {', '.join(slow)} on measured CPUs: the clock "
        "speed follows the load, so work per quantum changes",
        f"cpupower -c {m.cpu_text} frequency-set -g performance",
    )


def _turbo(m: Machine) -> Finding:
    no_turbo = m.host.text("/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = m.host.text("/sys/devices/system/cpu/cpufreq/boost")
    if no_turbo == "0":
        return advice(
            "turbo is on (intel_pstate): the frequency depends on temperature and on the load of other cores",
            "echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo",
        )
    if boost == "1":
        return advice(
            "frequency boost is on: the frequency depends on temperature and on the load of other cores",
            "echo 0 > /sys/devices/system/cpu/cpufreq/boost",
        )
    if no_turbo is None and boost is None:
        return ok("no turbo control exposed")
    return ok("turbo is off")


def _is_deep(m: Machine, state_dir: str) -> bool:
    latency = m.host.integer(f"{state_dir}/latency")
    if latency is not None:
        return latency > DEEP_IDLE_LATENCY_US
    return not SHALLOW_IDLE_NAMES.match(m.host.text(f"{state_dir}/name") or "")


def _idle_states(m: Machine) -> Finding:
    deep: set[str] = set()
    for cpu in m.cpus:
        base = f"/sys/devices/system/cpu/cpu{cpu}/cpuidle"
        for state in m.host.listdir(base):
            path = f"{base}/{state}"
            if m.host.text(f"{path}/disable") == "0" and _is_deep(m, path):
                deep.add(m.host.text(f"{path}/name") or state)
    if not deep:
        return ok("no deep idle state enabled on the measured CPUs")
    return advice(
        f"deep idle states enabled ({', '.join(sorted(deep))}): "
        "waking from them adds latency to the first interrupt or wakeup",
        f"cpupower -c {m.cpu_text} idle-set -D {DEEP_IDLE_LATENCY_US}, or boot with "
        "intel_idle.max_cstate=1 processor.max_cstate=1",
    )


def _smt(m: Machine) -> Finding:
    control = m.facts.smt_control
    active = m.host.text("/sys/devices/system/cpu/smt/active")
    if control != "on" or active == "0":
        return ok(f"SMT {control or 'not reported'}")
    measured = set(m.cpus)
    quiet = measured & set(m.facts.isolated)
    # a core whose other thread may run housekeeping work shares it with the measurement
    exposed = [g for g in m.facts.sibling_groups if set(g) & measured and not set(g) <= quiet]
    if not exposed:
        return ok("SMT is on; the siblings of the measured CPUs are measured and isolated too")
    return advice(
        f"SMT is on and {len(exposed)} cores hold a measured CPU beside one that runs other work "
        f"(e.g. {', '.join(format_cpu_list(g) for g in exposed[:3])}): work on the sibling "
        "thread slows the measured CPU down",
        "isolate the siblings of measured CPUs too and keep them idle, or boot with nosmt",
    )


def _isolation(
    cpus: Callable[[Machine], str | None], parameter: str, effect: str
) -> Callable[[Machine], Finding]:
    def check(m: Machine) -> Finding:
        missing = m.not_in(m.cpu_set(cpus(m)))
        if not missing:
            return ok(f"{parameter} includes {_cpus(m.cpus)}")
        keep = format_cpu_list(m.housekeeping) if m.housekeeping else "at least one CPU"
        return advice(
            f"{parameter} does not include {_cpus(missing)}: {effect}",
            f"boot with {parameter}={format_cpu_list(missing)} (and keep {keep} for housekeeping)",
            missing,
        )

    return check


def _irqbalance(m: Machine) -> Finding:
    for entry in m.host.listdir("/proc"):
        if entry.isdigit() and m.host.text(f"/proc/{entry}/comm") == "irqbalance":
            return advice(
                f"irqbalance is running (pid {entry}): it moves device interrupts, also onto measured CPUs",
                f"systemctl stop irqbalance, or set IRQBALANCE_BANNED_CPULIST="
                f"{m.cpu_text} in its configuration",
            )
    return ok("irqbalance is not running")


def _irq_affinity(m: Machine) -> Finding:
    counts = parse_interrupts(m.host.text("/proc/interrupts") or "")
    index = {cpu: i for i, cpu in enumerate(counts.cpus)}
    reaching = []
    for irq in m.host.listdir("/proc/irq"):
        affinity = m.host.text(f"/proc/irq/{irq}/smp_affinity_list")
        if not irq.isdigit() or not affinity:
            continue
        fired = counts.counts.get(irq)
        if (
            set(m.cpu_set(affinity)) & set(m.cpus)
            and fired
            and any(fired[index[c]] for c in m.cpus if c in index)
        ):
            reaching.append(irq)
    if not reaching:
        return ok(f"no device interrupt is routed to {_cpus(m.cpus)}")
    names = [
        " ".join([irq, *counts.descriptions.get(irq, "").split()[-1:]]) for irq in sorted(reaching, key=int)
    ]
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    target = format_cpu_list(m.housekeeping) if m.housekeeping else "a CPU you do not measure"
    return advice(
        f"{len(reaching)} device IRQs are routed to measured CPUs and fired there: {shown}",
        f"write {target} to /proc/irq/N/smp_affinity_list, or boot with irqaffinity="
        f"{format_cpu_list(m.housekeeping) if m.housekeeping else 'HOUSEKEEPING'}",
    )


def _rt_throttling(m: Machine) -> Finding:
    runtime, period = m.facts.rt_runtime_us, m.facts.rt_period_us
    if runtime is None or period is None:
        return ok("RT throttling settings not readable")
    if runtime < 0 or runtime >= period:
        return ok("RT throttling is off")
    stall = (period - runtime) / 1000
    return advice(
        f"RT tasks may run {runtime / 1000:g} ms of every "
        f"{period / 1000:g} ms: a spinning SCHED_FIFO task is stopped for {stall:g} ms "
        "each period (scan --rt measures in windows around it)",
        "for RT work on isolated CPUs: sysctl kernel.sched_rt_runtime_us=-1 (a "
        "runaway RT task can then hang its CPU)",
    )


def _watchdogs(m: Machine) -> Finding:
    on = [name for name in ("watchdog", "nmi_watchdog") if m.host.text(f"/proc/sys/kernel/{name}") == "1"]
    mask = m.host.text("/proc/sys/kernel/watchdog_cpumask")
    if on and mask is not None and not set(m.cpus) & m.cpu_set(mask):
        return ok(f"{', '.join(on)} on, but not on {_cpus(m.cpus)} (watchdog_cpumask)")
    if not on:
        return ok("lockup watchdogs are off")
    return advice(
        f"{' and '.join(on)} on: a periodic timer and (NMI) perf interrupt check every CPU for lockups",
        "sysctl kernel.watchdog=0 kernel.nmi_watchdog=0, or boot with nowatchdog",
    )


STAT_INTERVAL_S = 10  # vm.stat_interval at least this: vmstat work every 10 s, not every second


def _vm_stat_interval(m: Machine) -> Finding:
    interval = m.host.integer("/proc/sys/vm/stat_interval")
    if interval is None:
        return ok("vm.stat_interval not readable")
    if interval >= STAT_INTERVAL_S:
        return ok(f"vm.stat_interval={interval} s")
    return advice(
        f"vm.stat_interval={interval} s: every CPU folds its memory statistics in a kworker "
        f"(vmstat_update) every {interval} s",
        f"sysctl vm.stat_interval={STAT_INTERVAL_S}",
    )


def _timer_migration(m: Machine) -> Finding:
    if m.host.text("/proc/sys/kernel/timer_migration") != "1":
        return ok("timer migration is off (or not reported)")
    return advice(
        "timer migration is on: timers of idle CPUs are run by a busy one, which may be a "
        "measured CPU",
        "sysctl kernel.timer_migration=0",
    )


WORKQUEUE_CPUMASK = "/sys/devices/virtual/workqueue/cpumask"


def _workqueue_cpumask(m: Machine) -> Finding:
    text = m.host.text(WORKQUEUE_CPUMASK)
    if not text:
        return ok("unbound workqueue cpumask not available")
    allowed = int(text.replace(",", ""), 16)
    on = tuple(c for c in m.cpus if allowed >> c & 1)
    if not on or not m.housekeeping:  # with no CPU left over, the work has to run somewhere
        return ok(f"unbound workqueue cpumask {text}")
    return advice(
        f"unbound workqueue work may run on {_cpus(on)} (cpumask {text})",
        f"echo {cpumask_text(m.housekeeping)} > {WORKQUEUE_CPUMASK} (the CPUs not measured)",
        on,
    )


def _transparent_hugepages(m: Machine) -> Finding:
    enabled = m.host.text("/sys/kernel/mm/transparent_hugepage/enabled")
    chosen = re.search(r"\[(\w+)\]", enabled or "")
    if not chosen:
        return ok("transparent huge pages not available")
    if chosen.group(1) == "always":
        return advice(
            "transparent huge pages: always (khugepaged and "
            "compaction on page faults take CPU time at random moments)",
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
        )
    return ok(f"transparent huge pages: {chosen.group(1)}")


def _timer_tick(m: Machine) -> Finding:
    hz = m.facts.config_hz
    nohz = set(m.facts.nohz_full)
    if hz is None:
        return ok("CONFIG_HZ unknown (no /proc/config.gz or /boot/config-*)")
    if not m.not_in(nohz):
        return ok(f"HZ={hz}; the measured CPUs are nohz_full (the tick stops while one task runs)")
    if hz >= 1000:
        return advice(
            f"HZ={hz}: the tick interrupts every measured CPU {hz} times a second",
            "nohz_full= on the measured CPUs stops it while one "
            "task runs (or use a kernel with CONFIG_HZ=250)",
        )
    return ok(f"HZ={hz}: the tick interrupts each CPU {hz} times a second")


def _clocksource(m: Machine) -> Finding:
    current = m.facts.clocksource
    if current is None:
        return ok("clocksource not reported")
    if current in FAST_CLOCKSOURCES:
        return ok(f"clocksource {current}")
    if "tsc" in m.facts.tsc_flags and "tsc" not in m.facts.available_clocksources:
        # The clocksource watchdog dropped the TSC; the scheduler clock is then
        # unstable too, which keeps the tick on every CPU, nohz_full ones included.
        return advice(
            f"clocksource {current}: the kernel marked the TSC unstable, so clock reads are "
            "slow and nohz_full CPUs keep their tick",
            "if the TSC is in fact reliable (constant_tsc; a VM with an invariant TSC), "
            "boot with tsc=reliable",
        )
    better = "tsc" if "tsc" in m.facts.available_clocksources else None
    return advice(
        f"clocksource {current}: every clock read goes through the kernel or slow hardware",
        f"echo {better} > /sys/devices/system/clocksource/clocksource0/current_clocksource"
        if better
        else "use a kernel/platform with a fast clocksource (tsc)",
    )


def _steal_share(m: Machine) -> float | None:
    line = (m.host.text("/proc/stat") or "").partition("\n")[0].split()
    if len(line) < 9 or line[0] != "cpu":
        return None
    values = [int(v) for v in line[1:9]]
    return values[7] / sum(values) if sum(values) else None


def _virtualization(m: Machine) -> Finding:
    virt = m.facts.virtualization
    if not virt.hypervisor:
        return ok("bare metal (no hypervisor)")
    steal = _steal_share(m)
    stolen = f"; {100 * steal:.2f}% of CPU time stolen since boot" if steal is not None else ""
    return advice(
        f"guest of {virt.vendor or 'a hypervisor'}: the host takes vCPUs away for its own work{stolen}",
        "measure on bare metal, or pin the vCPUs to dedicated, isolated host cores",
    )


CHECKS: dict[str, Callable[[Machine], Finding]] = {
    "governor": _governor,
    "turbo": _turbo,
    "idle states": _idle_states,
    "smt": _smt,
    "isolcpus": _isolation(
        lambda m: m.facts.isolated_cpus, "isolcpus", "the scheduler balances other tasks onto them"
    ),
    "nohz_full": _isolation(
        lambda m: m.facts.nohz_full_cpus, "nohz_full", "the timer tick keeps interrupting them"
    ),
    "rcu_nocbs": _isolation(
        lambda m: m.facts.noise_parameters.get("rcu_nocbs"), "rcu_nocbs", "RCU callbacks run on them"
    ),
    "irqbalance": _irqbalance,
    "irq affinity": _irq_affinity,
    "rt throttling": _rt_throttling,
    "watchdogs": _watchdogs,
    "thp": _transparent_hugepages,
    "vm.stat_interval": _vm_stat_interval,
    "timer migration": _timer_migration,
    "workqueue cpumask": _workqueue_cpumask,
    "timer tick": _timer_tick,
    "clocksource": _clocksource,
    "virtualization": _virtualization,
}


def default_cpus(facts: HostFacts) -> tuple[int, ...]:
    """The CPUs one would measure: the isolated ones, or else all online CPUs."""
    return facts.isolated or facts.online


@dataclass(frozen=True)
class SystemCheck:
    cpus: tuple[int, ...]  # the CPUs the checks were made for
    findings: list[Finding]

    @property
    def exit_code(self) -> int:
        """0 when there is nothing to advise, 1 when advice applies or a check could not
        be made (never 2: that is bad input)."""
        return max((EXIT_CODES[f.state] for f in self.findings), default=0)

    def to_list(self) -> list[dict]:
        return [f.to_dict() for f in self.findings]


def check_system(root: str = "/", cpus: tuple[int, ...] | None = None,
                 facts: HostFacts | None = None) -> SystemCheck:
    """Run every check for `cpus` (default: isolated CPUs, else all online)."""
    if facts is None:
        live = HostRoot(root).is_live
        facts = read_host_facts(root, cpuid_signature=cpuid_hypervisor_signature() if live else None)
    machine = Machine(HostRoot(root), facts, cpus or default_cpus(facts))
    offline = [c for c in machine.cpus if c not in facts.online]
    if facts.online and offline:
        raise UsageError(f"CPU {offline[0]} is offline or does not exist (online: "
                         f"{facts.online_cpus})", f"pick CPUs from {facts.online_cpus}")
    if not machine.facts.online:
        return SystemCheck((), [Finding("cpus", ERROR, f"cannot read the online CPUs under {root} "
                                                       "(/sys/devices/system/cpu/online)")])
    findings = []
    for name, check in CHECKS.items():
        try:
            findings.append(replace(check(machine), check=name))
        except (OSError, ValueError, UsageError) as error:  # unreadable or malformed files
            findings.append(Finding(name, ERROR, f"could not check: {error}"))
    return SystemCheck(machine.cpus, findings)
