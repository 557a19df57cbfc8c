"""Read-only facts about the machine, from /proc and /sys.

Everything is read through a root directory so that tests can use captured
trees (tests/fixtures/hosts/*). Nothing here changes the machine.
"""

from __future__ import annotations

import gzip
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import UsageError
from .units import format_cpu_list, parse_cpu_list

# Boot parameters that change how much noise a CPU sees.
NOISE_PARAMETERS = (
    "isolcpus", "nohz_full", "nohz", "rcu_nocbs", "rcu_nocb_poll", "irqaffinity", "nosmt",
    "mitigations", "idle", "intel_idle.max_cstate", "processor.max_cstate", "intel_pstate",
    "amd_pstate", "cpufreq.default_governor", "skew_tick", "tsc", "clocksource", "nosoftlockup",
    "nmi_watchdog", "nowatchdog", "preempt", "threadirqs", "transparent_hugepage",
    "housekeeping", "kthread_cpus", "workqueue.power_efficient", "audit", "selinux",
)

_HYPERVISOR_SIGNATURES = {
    "KVMKVMKVM": "KVM",
    "Microsoft Hv": "Hyper-V",
    "VMwareVMware": "VMware",
    "XenVMMXenVMM": "Xen",
    "TCGTCGTCGTCG": "QEMU (TCG)",
    "bhyve bhyve ": "bhyve",
    "ACRNACRNACRN": "ACRN",
    " lrpepyh  vr": "Parallels",
    "QNXQVMBSQG": "QNX",
}


class HostRoot:
    """A filesystem root to read /proc and /sys from ('/' on a live machine)."""

    def __init__(self, root: str | os.PathLike[str] = "/"):
        self.root = Path(root)

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def text(self, absolute: str) -> str | None:
        try:
            return self.path(absolute).read_text(errors="replace").strip()
        except OSError:
            return None

    def integer(self, absolute: str) -> int | None:
        value = self.text(absolute)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    def listdir(self, absolute: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(absolute)))
        except OSError:
            return []

    @property
    def is_live(self) -> bool:
        return self.root.resolve() == Path("/")


def mount_points(mounts_text: str, fstype: str) -> list[Path]:
    """Mount points of the file systems of type `fstype` in /proc/mounts text."""
    found = []
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == fstype:
            found.append(Path(fields[1].replace("\\040", " ")))
    return found


def cgroup2_with_cpuset(host: HostRoot) -> str | None:
    """Where the cgroup v2 hierarchy is mounted, if its root offers the cpuset
    controller (not bound to a v1 hierarchy); None otherwise."""
    for mount in mount_points(host.text("/proc/mounts") or "", "cgroup2"):
        if "cpuset" in (host.text(f"{mount}/cgroup.controllers") or "").split():
            return str(mount)
    return None


@dataclass(frozen=True)
class Virtualization:
    hypervisor: bool
    vendor: str | None = None


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    kernel_release: str
    kernel_version: str
    kernel_cmdline: str
    noise_parameters: dict[str, str]
    cpu_model: str
    cpu_vendor: str
    online_cpus: str
    sockets: int
    cores: int
    threads_per_core: int
    smt_control: str | None
    smt_siblings: list[str]
    numa_nodes: dict[str, str]
    isolated_cpus: str
    nohz_full_cpus: str
    clocksource: str | None
    available_clocksources: list[str]
    tsc_flags: list[str]
    governors: dict[str, str]
    virtualization: Virtualization
    preemption: str | None
    config_hz: int | None
    memory_total_kib: int | None
    rt_runtime_us: int | None
    rt_period_us: int | None
    hz_estimate: dict[str, object] = field(default_factory=dict)
    packages: dict[str, str] = field(default_factory=dict)  # socket id -> its online CPUs
    tracers: list[str] = field(default_factory=list)  # the kernel's ftrace tracers (osnoise, ...)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> HostFacts:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        virt = known.get("virtualization") or {"hypervisor": False}
        known["virtualization"] = Virtualization(**virt)
        return cls(**known)

    # The CPU sets as integer tuples. The fields keep the kernel's list text, as
    # the manifest records it (readable, and what `system show` quotes); callers
    # read these views and never parse that text themselves.
    @property
    def online(self) -> tuple[int, ...]:
        return _cpus(self.online_cpus)

    @property
    def isolated(self) -> tuple[int, ...]:
        return _cpus(self.isolated_cpus)

    @property
    def nohz_full(self) -> tuple[int, ...]:
        return _cpus(self.nohz_full_cpus)

    @property
    def sibling_groups(self) -> tuple[tuple[int, ...], ...]:
        """The hardware threads of each core, one tuple per core."""
        return tuple(_cpus(group) for group in self.smt_siblings)

    @property
    def node_cpus(self) -> dict[int, tuple[int, ...]]:
        """NUMA node -> its online CPUs, by node number."""
        return _numbered_cpus(self.numa_nodes)

    @property
    def package_cpus(self) -> dict[int, tuple[int, ...]]:
        """Socket -> its online CPUs, by socket number."""
        return _numbered_cpus(self.packages)


def _cpus(text: str) -> tuple[int, ...]:
    return parse_cpu_list(text) if text else ()


def _numbered_cpus(groups: dict[str, str]) -> dict[int, tuple[int, ...]]:
    return {int(key): _cpus(cpus) for key, cpus in sorted(groups.items(), key=lambda g: int(g[0]))}


def parse_cmdline(cmdline: str) -> dict[str, str]:
    """The noise-relevant boot parameters and their values ('' for flags)."""
    found: dict[str, str] = {}
    for token in cmdline.split():
        if token == "--":  # everything after belongs to init
            break
        key, _, value = token.partition("=")
        if key in NOISE_PARAMETERS:
            found[key] = value
    return found


def parse_cpuinfo(text: str) -> tuple[dict[str, str], set[str]]:
    """The first processor's fields and the flags common to all CPUs."""
    first: dict[str, str] = {}
    flags: set[str] | None = None
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if not fields:
            continue
        if not first:
            first = fields
        cpu_flags = set(fields.get("flags", "").split())
        flags = cpu_flags if flags is None else flags & cpu_flags
    return first, flags or set()


def read_kernel_config(host: HostRoot, release: str) -> dict[str, str]:
    raw: bytes | None = None
    try:
        raw = gzip.decompress(host.path("/proc/config.gz").read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile):
        try:
            raw = host.path(f"/boot/config-{release}").read_bytes()
        except OSError:
            return {}
    config = {}
    for line in raw.decode(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.startswith("CONFIG_"):
            config[key] = value
    return config


def preemption_model(host: HostRoot, cmdline: dict[str, str], config: dict[str, str],
                     version: str) -> str | None:
    # debugfs shows the live choice of a PREEMPT_DYNAMIC kernel as "(full)".
    live = host.text("/sys/kernel/debug/sched/preempt")
    if live:
        match = re.search(r"\((\w+)\)", live)
        if match:
            return match.group(1)
    if config.get("CONFIG_PREEMPT_RT") == "y" or "PREEMPT_RT" in version:
        return "rt"
    if "preempt" in cmdline and config.get("CONFIG_PREEMPT_DYNAMIC") == "y":
        return cmdline["preempt"]
    for option, model in (("CONFIG_PREEMPT_NONE", "none"), ("CONFIG_PREEMPT_VOLUNTARY", "voluntary"),
                          ("CONFIG_PREEMPT_LAZY", "lazy"), ("CONFIG_PREEMPT", "full")):
        if config.get(option) == "y":
            return model
    if "PREEMPT" in version:
        return "full"
    return None


def virtualization(host: HostRoot, cpu_flags: set[str], cpuid_signature: str | None) -> Virtualization:
    if "hypervisor" not in cpu_flags and not cpuid_signature:
        return Virtualization(hypervisor=False)
    if cpuid_signature:
        for signature, name in _HYPERVISOR_SIGNATURES.items():
            if cpuid_signature.startswith(signature.rstrip()):
                return Virtualization(hypervisor=True, vendor=name)
    xen = host.text("/sys/hypervisor/type")
    if xen:
        return Virtualization(hypervisor=True, vendor=xen.capitalize())
    product = " ".join(filter(None, (host.text("/sys/class/dmi/id/sys_vendor"),
                                     host.text("/sys/class/dmi/id/product_name"))))
    return Virtualization(hypervisor=True, vendor=product or None)


def _topology(host: HostRoot, cpus: tuple[int, ...]) -> tuple[dict[str, str], int, list[str]]:
    packages: dict[str, list[int]] = {}
    cores: set[tuple[str, str]] = set()
    siblings: set[str] = set()
    for cpu in cpus:
        base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        package = host.text(f"{base}/physical_package_id") or "0"
        packages.setdefault(package, []).append(cpu)
        cores.add((package, host.text(f"{base}/core_id") or str(cpu)))
        group = host.text(f"{base}/thread_siblings_list")
        if group:
            siblings.add(format_cpu_list(parse_cpu_list(group)))
    package_cpus = {p: format_cpu_list(members) for p, members in sorted(packages.items())}
    return package_cpus, len(cores), sorted(siblings, key=lambda g: parse_cpu_list(g)[0])


def _kernel_cpu_mask(text: str | None) -> str:
    """A CPU list from sysfs; '' where the kernel has no mask at all: a kernel
    with CONFIG_CPUMASK_OFFSTACK (Debian, Ubuntu) prints an unallocated mask,
    such as nohz_full without nohz_full=, as "(null)"."""
    return "" if not text or text == "(null)" else text


def _numa_nodes(host: HostRoot) -> dict[str, str]:
    nodes = {}
    for entry in host.listdir("/sys/devices/system/node"):
        match = re.fullmatch(r"node(\d+)", entry)
        cpulist = host.text(f"/sys/devices/system/node/{entry}/cpulist") if match else None
        if match and cpulist:
            nodes[match.group(1)] = cpulist
    return nodes


def _governors(host: HostRoot, cpus: tuple[int, ...]) -> dict[str, str]:
    governors = {}
    for cpu in cpus:
        governor = host.text(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")
        if governor:
            governors[str(cpu)] = governor
    return governors


# Tracers noisescope cares about, by the kernel option that builds them in.
TRACER_OPTIONS = {"CONFIG_OSNOISE_TRACER": "osnoise", "CONFIG_TIMERLAT_TRACER": "timerlat",
                  "CONFIG_HWLAT_TRACER": "hwlat", "CONFIG_FUNCTION_TRACER": "function",
                  "CONFIG_FUNCTION_GRAPH_TRACER": "function_graph"}


def _tracers(host: HostRoot, config: dict[str, str]) -> list[str]:
    """available_tracers where tracefs is mounted, else what the kernel configuration builds in."""
    for mountpoint in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        listed = host.text(f"{mountpoint}/available_tracers")
        if listed is not None:
            return sorted(set(listed.split()) - {"nop"})
    return sorted(name for option, name in TRACER_OPTIONS.items() if config.get(option) == "y")


def _memory_total_kib(host: HostRoot) -> int | None:
    match = re.search(r"^MemTotal:\s+(\d+)", host.text("/proc/meminfo") or "", re.M)
    return int(match.group(1)) if match else None


def read_host_facts(root: str | os.PathLike[str] = "/", *,
                    cpuid_signature: str | None = None) -> HostFacts:
    """Everything about the machine a result needs to be interpreted later."""
    host = HostRoot(root)
    release = host.text("/proc/sys/kernel/osrelease") or ""
    version = host.text("/proc/sys/kernel/version") or ""
    cmdline_text = host.text("/proc/cmdline") or ""
    cmdline = parse_cmdline(cmdline_text)
    first, flags = parse_cpuinfo(host.text("/proc/cpuinfo") or "")
    online_text = host.text("/sys/devices/system/cpu/online") or ""
    online = parse_cpu_list(online_text) if online_text else ()
    packages, cores, siblings = _topology(host, online)
    config = read_kernel_config(host, release)
    config_hz = config.get("CONFIG_HZ")
    clocksource_dir = "/sys/devices/system/clocksource/clocksource0"
    return HostFacts(
        hostname=host.text("/proc/sys/kernel/hostname") or "",
        kernel_release=release,
        kernel_version=version,
        kernel_cmdline=cmdline_text,
        noise_parameters=cmdline,
        cpu_model=first.get("model name", first.get("Model", "")),
        cpu_vendor=first.get("vendor_id", first.get("CPU implementer", "")),
        online_cpus=format_cpu_list(online),
        sockets=max(len(packages), 1),
        cores=max(cores, 1),
        threads_per_core=max(1, round(len(online) / cores)) if cores else 1,
        smt_control=host.text("/sys/devices/system/cpu/smt/control"),
        smt_siblings=siblings,
        numa_nodes=_numa_nodes(host),
        isolated_cpus=_kernel_cpu_mask(host.text("/sys/devices/system/cpu/isolated")),
        nohz_full_cpus=_kernel_cpu_mask(host.text("/sys/devices/system/cpu/nohz_full")),
        clocksource=host.text(f"{clocksource_dir}/current_clocksource"),
        available_clocksources=(host.text(f"{clocksource_dir}/available_clocksource") or "").split(),
        tsc_flags=sorted(f for f in flags if "tsc" in f),
        governors=_governors(host, online),
        virtualization=virtualization(host, flags, cpuid_signature),
        preemption=preemption_model(host, cmdline, config, version),
        config_hz=int(config_hz) if config_hz and config_hz.isdigit() else None,
        memory_total_kib=_memory_total_kib(host),
        rt_runtime_us=host.integer("/proc/sys/kernel/sched_rt_runtime_us"),
        rt_period_us=host.integer("/proc/sys/kernel/sched_rt_period_us"),
        packages=packages,
        tracers=_tracers(host, config),
    )


@dataclass(frozen=True)
class InterruptCounts:
    """/proc/interrupts: per-source counts for each online CPU."""

    cpus: tuple[int, ...]
    counts: dict[str, tuple[int, ...]]
    descriptions: dict[str, str]

    def delta(self, earlier: InterruptCounts) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for source, now in self.counts.items():
            before = earlier.counts.get(source, (0,) * len(now))
            out[source] = {cpu: now[i] - before[i] for i, cpu in enumerate(self.cpus)}
        return out


def parse_interrupts(text: str) -> InterruptCounts:
    lines = text.splitlines()
    if not lines:
        return InterruptCounts((), {}, {})
    cpus = tuple(int(name[3:]) for name in lines[0].split() if name.startswith("CPU"))
    counts: dict[str, tuple[int, ...]] = {}
    descriptions: dict[str, str] = {}
    for line in lines[1:]:
        source, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        values = []
        for value in fields[: len(cpus)]:
            if not value.isdigit():
                break
            values.append(int(value))
        if len(values) != len(cpus) or len(cpus) == 1 and len(fields) == 1:
            continue  # e.g. "ERR: 0" holds one total, not per-CPU counts
        counts[source.strip()] = tuple(values)
        descriptions[source.strip()] = " ".join(fields[len(values):])
    return InterruptCounts(cpus, counts, descriptions)


def read_interrupts(root: str | os.PathLike[str] = "/") -> InterruptCounts:
    return parse_interrupts(HostRoot(root).text("/proc/interrupts") or "")


def estimate_hz(local_timer_per_cpu: dict[int, float]) -> int | None:
    """The tick rate a busy CPU shows, rounded to the nearest usual CONFIG_HZ.

    Rates from CPUs that were busy for the whole interval (the measured
    ones); other timers add a little, so the nearest candidate is taken only
    when it explains the median rate within 15%."""
    rates = sorted(r for r in local_timer_per_cpu.values() if r > 0)
    if not rates:
        return None
    median = rates[len(rates) // 2]
    best = min((100, 250, 300, 1000), key=lambda hz: abs(hz - median))
    return best if abs(median - best) <= 0.15 * best else None


def cpuid_hypervisor_signature() -> str | None:
    """The CPUID 0x40000000 vendor string on x86 (live machine only)."""
    from . import _native

    regs = _native.cpuid(0x40000000, 0)
    if regs is None:
        return None
    raw = b"".join(r.to_bytes(4, "little") for r in regs[1:])
    text = raw.rstrip(b"\0").decode("ascii", errors="replace")
    return text if text.strip() and text.isprintable() else None


def live_host_facts() -> HostFacts:
    """This machine's facts, as a measurement records them."""
    return read_host_facts("/", cpuid_signature=cpuid_hypervisor_signature())


def usable_cpus(facts: HostFacts) -> tuple[int, ...]:
    """The online CPUs a thread of this process may be pinned to: those of its
    cpuset. That is wider than its affinity where `isolcpus=` took the isolated
    CPUs out of the default affinity; pinning to them still works, and they are
    the CPUs people tune and measure. Found by asking the kernel: a throwaway
    thread sets its affinity to every online CPU, and the kernel keeps those
    the cpuset allows (the thread stays where it runs: no migration)."""
    found: list[set[int]] = []

    def ask() -> None:
        try:
            os.sched_setaffinity(0, facts.online or os.sched_getaffinity(0))
        except OSError:  # none of them allowed: the affinity stands
            pass
        found.append(os.sched_getaffinity(0))

    probe = threading.Thread(target=ask, name="noisescope-cpus")
    probe.start()
    probe.join()
    return tuple(c for c in facts.online if c in found[0])


def default_cpus(facts: HostFacts) -> tuple[int, ...]:
    """The CPUs to measure when none are named: every usable CPU, isolated ones
    included, unless something narrowed this process's affinity on purpose
    (taskset, an MPI launcher's binding); then those. An affinity that only
    leaves out the isolated CPUs is the boot default, not a choice."""
    usable = usable_cpus(facts)
    affinity = set(os.sched_getaffinity(0)) & set(usable)
    isolated = set(facts.isolated)
    if affinity in (set(usable), set(usable) - isolated):
        return usable
    return tuple(sorted(affinity))


def check_cpus(requested: tuple[int, ...] | None, facts: HostFacts) -> tuple[int, ...]:
    """`requested` checked against the CPUs this process may use (None: the default set)."""
    if requested is None:
        chosen = default_cpus(facts)
        if not chosen:
            raise UsageError("no online CPU is allowed for this process",
                             "check taskset / cgroup cpusets")
        return chosen
    usable = usable_cpus(facts)
    for cpu in requested:
        if cpu not in facts.online:
            raise UsageError(f"CPU {cpu} is offline or does not exist (online: "
                             f"{facts.online_cpus})", f"pick CPUs from {facts.online_cpus}")
        if cpu not in usable:
            raise UsageError(f"CPU {cpu} is outside this process's cpuset "
                             f"({format_cpu_list(usable)})",
                             f"pick CPUs from {format_cpu_list(usable)} or widen the cpuset "
                             f"(cgroup cpuset.cpus)")
    return requested
