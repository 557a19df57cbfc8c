"""Boot an emulated SMT/NUMA guest and run a list of commands in it.

The guest (QEMU with TCG: 8 CPUs as 2 sockets x 2 cores x 2 threads, two
NUMA nodes of 1 GiB) runs the host's own root file system, shared read-only
over 9p under a tmpfs overlay, so it runs the same Python and the same
noisescope as the tests. A second, writable 9p share (`out`, /run/out in the
guest) carries the plan in and the results back. TCG runs the guest about 20x
slower than the host: what runs there is checked for behaviour, structure and
counts, never for timings.

    kernel = rig_kernel()                       # or debian_rt_kernel(cache)
    run = boot(kernel, [Step("scan", [...])], out_dir)
    run.step("scan").returncode, run.path("scan-bundle")

Every failure of the machinery (no QEMU, a kernel that panics, a guest that
hangs, a package that does not download) raises RigError with one line of
reason and the tail of the guest's console; a command that fails inside the
guest is only a result (the tests judge it).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import noisescope

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GUEST_JOB = HERE / "guest_job.py"
QEMU = "qemu-system-x86_64"
BUSYBOX = Path("/bin/busybox")
# The topology the rig promises its tests.
SMP = "8,sockets=2,cores=2,threads=2"
NODES = ((0, "0-3"), (1, "4-7"))
MEMORY_MB = 2048
ISOLATION = "isolcpus=2,3 nohz_full=2,3"
BOOT_ALLOWANCE_S = 120  # from QEMU's start to the guest's job
STEP_GRACE_S = 60  # a step this far past its own limit: the guest has stopped
# No line from the guest job for this long (it prints one every 30 s: three
# missed): the guest froze. Kernel messages do not count (but RCU_STALL).
SILENCE_S = 90
# The guest kernel's report of a CPU stuck for 21 s (rcu_cpu_stall_timeout):
# under TCG a guest that printed one never recovered (the reports repeat every
# minute until the silence above is found, 2-4 minutes later); no boot that
# went on to end its job printed one.
RCU_STALL = re.compile(r"rcu: INFO: rcu_\w+ (?:self-)?detected stalls?")
WATCH_INTERVAL_S = 1
# Modules a modular distribution kernel needs before it can mount the shared root.
GUEST_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
CONSOLE_TAIL_LINES = 30


class RigError(Exception):
    """The rig itself failed (not a command inside the guest)."""


class GuestHung(RigError):
    """The guest stopped making progress (it printed nothing it should have
    in time); unlike a panic or a failed command, the emulator's doing as
    often as the kernel's. `run` holds the steps that ended before."""

    def __init__(self, message: str, run: GuestRun | None = None):
        super().__init__(message)
        self.run = run


@dataclass(frozen=True)
class Kernel:
    name: str
    image: Path
    modules: tuple[Path, ...] = ()  # loaded in this order by the initramfs
    release: str = ""
    cmdline: str = ""  # the kernel's own boot parameters


@dataclass(frozen=True)
class Step:
    """A command the guest runs (argv[0] is looked up on the guest's PATH,
    which starts with the directory of the tests' Python). A background step
    is started and left running until `stop` names it or the job ends."""

    name: str
    argv: tuple[str, ...] = ()
    timeout_s: float = 120
    background: bool = False
    stop: str | None = None  # the name of a background step to end instead
    env: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict:
        return {"name": self.name, "argv": list(self.argv), "timeout_s": self.timeout_s,
                "background": self.background, "stop": self.stop, "env": dict(self.env)}


@dataclass
class StepResult:
    name: str
    returncode: int | None  # None: it timed out (and was killed)
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        # a step killed at its limit: its stderr ends with where it hung
        lines = 15 if self.returncode is not None else 80
        return (f"step {self.name}: rc={self.returncode} after {self.seconds:.1f} s\n"
                f"--- stdout (tail)\n{_tail(self.stdout)}\n"
                f"--- stderr (tail)\n{_tail(self.stderr, lines)}")


@dataclass
class GuestRun:
    kernel: Kernel
    out: Path  # the host side of /run/out
    steps: dict[str, StepResult] = field(default_factory=dict)
    console: str = ""
    # the boot that hung before this one, whose ended steps this one did not run again
    earlier: GuestRun | None = None

    def step(self, name: str) -> StepResult:
        if name not in self.steps:
            if self.earlier is not None and name in self.earlier.ended():
                return self.earlier.step(name)
            raise RigError(f"the guest did not get to step {name!r}; console tail:\n"
                           f"{_tail(self.console, CONSOLE_TAIL_LINES)}")
        return self.steps[name]

    def path(self, relative: str) -> Path:
        """A file or directory the guest wrote under /run/out (in the earlier
        boot's folder when this boot did not write it)."""
        here = self.out / relative
        if self.earlier is not None and not here.exists():
            return self.earlier.path(relative)
        return here

    def ended(self) -> set[str]:
        """The steps that ended, in this boot or an earlier one."""
        return set(self.steps) | (self.earlier.ended() if self.earlier is not None else set())

    def succeeded(self, name: str, returncodes: tuple[int, ...] = (0,)) -> StepResult:
        """The step's result; an AssertionError with its output unless it ended
        with one of `returncodes`."""
        step = self.step(name)
        assert step.returncode in returncodes, step.describe()
        return step

    def bundle(self, step: str, relative: str | None = None):
        """The bundle a step wrote (at `relative`, default: the step's name)."""
        self.succeeded(step)
        return noisescope.load(self.path(relative or step))


def steps_left(steps: list[Step], ended: set[str]) -> list[Step]:
    """What a boot after a hang runs: the steps from the first that did not
    end, after the background steps started before it and not yet stopped
    (a spinner a later step measures beside)."""
    first = next((i for i, s in enumerate(steps) if s.name not in ended), len(steps))
    stopped = {s.stop for s in steps[:first] if s.stop}
    running = [s for s in steps[:first] if s.background and s.name not in stopped]
    return running + steps[first:]


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])


# -- kernels ------------------------------------------------------------------

def rig_dir() -> Path | None:
    """The folder with the core-scheduling kernel ($NOISESCOPE_RIG_DIR, else
    ../shared/rig beside the repository)."""
    for candidate in (os.environ.get("NOISESCOPE_RIG_DIR"), REPO.parent / "shared" / "rig"):
        if candidate and (Path(candidate) / "bzImage").is_file():
            return Path(candidate)
    return None


def rig_kernel() -> Kernel:
    """The kernel built with CONFIG_SCHED_CORE, the osnoise/timerlat tracers,
    NUMA, NO_HZ_FULL and everything the guest needs built in."""
    folder = rig_dir()
    if folder is None:
        raise RigError("no rig kernel: set NOISESCOPE_RIG_DIR to the folder holding bzImage "
                       "(see docs/rig.md), or put it in ../shared/rig")
    image = folder / "bzImage"
    expected = folder / "bzImage.sha256"
    if expected.is_file():
        digest = hashlib.sha256(image.read_bytes()).hexdigest()
        if expected.read_text().split()[0] != digest:
            raise RigError(f"{image} does not match {expected.name}: the rig kernel is damaged")
    # tsc=reliable: under TCG the clocksource watchdog marks the TSC unstable
    # now and then, which keeps the tick on nohz_full CPUs (system show says
    # so). (Debian's RT kernel hung with it once: it boots without.)
    return Kernel("rig", image, cmdline="tsc=reliable")


def debian_rt_kernel(cache: Path) -> Kernel:
    """Debian's PREEMPT_RT kernel (linux-image-rt-amd64), downloaded with
    apt-get once and kept in `cache`: the image and the few modules the guest
    needs to mount its root."""
    package = _resolve_package("linux-image-rt-amd64")
    folder = cache / package
    ready = folder / "kernel.json"
    if not ready.is_file():
        _unpack_kernel(package, folder)
    meta = json.loads(ready.read_text())
    return Kernel(f"debian-rt ({package})", folder / meta["image"],
                  tuple(folder / m for m in meta["modules"]), meta["release"])


def _resolve_package(meta_package: str) -> str:
    """The real package a meta-package points at (apt-cache depends)."""
    done = _run(["apt-cache", "depends", meta_package], f"resolve {meta_package}")
    for line in done.stdout.splitlines():
        name = line.strip().removeprefix("Depends:").strip()
        if line.strip().startswith("Depends:") and name.startswith("linux-image-"):
            return name
    raise RigError(f"apt-cache depends {meta_package} names no linux-image package "
                   f"(is the Debian archive in the apt sources?)")


def _unpack_kernel(package: str, folder: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="noisescope-rig-") as work:
        workdir = Path(work)
        _run(["apt-get", "download", package], f"download {package}", cwd=workdir)
        debs = sorted(workdir.glob("*.deb"))
        if not debs:
            raise RigError(f"apt-get download {package} brought no .deb")
        tree = workdir / "tree"
        _run(["dpkg-deb", "-x", str(debs[0]), str(tree)], f"unpack {debs[0].name}")
        images = sorted((tree / "boot").glob("vmlinuz-*"))
        if not images:
            raise RigError(f"{package} holds no boot/vmlinuz-*")
        release = images[0].name.removeprefix("vmlinuz-")
        modules = _module_order(tree / "lib" / "modules" / release, GUEST_MODULES)
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "modules").mkdir(parents=True)
        shutil.copy2(images[0], staging / "vmlinuz")
        names = []
        for index, module in enumerate(modules):
            name = f"modules/{index:02d}-{module.name}"
            shutil.copy2(module, staging / name)
            names.append(name)
        (staging / "kernel.json").write_text(json.dumps(
            {"package": package, "release": release, "image": "vmlinuz", "modules": names}))
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)


def _module_order(tree: Path, wanted: tuple[str, ...]) -> list[Path]:
    """The .ko files of `wanted` and everything they depend on, dependencies
    first (from modinfo, as the package ships no modules.dep)."""
    by_name = {p.name.split(".ko")[0].replace("-", "_"): p for p in tree.rglob("*.ko*")}
    ordered: list[Path] = []

    def visit(name: str, chain: tuple[str, ...]) -> None:
        key = name.replace("-", "_")
        if key not in by_name:
            raise RigError(f"module {name} (needed by {' <- '.join(chain) or 'the guest'}) "
                           f"is not in {tree}")
        path = by_name[key]
        if path in ordered or key in chain:
            return
        depends = _run(["modinfo", "-F", "depends", str(path)], f"modinfo {path.name}").stdout
        for dependency in filter(None, depends.strip().split(",")):
            visit(dependency, (*chain, key))
        ordered.append(path)

    for name in wanted:
        visit(name, ())
    for path in ordered:
        if path.suffix != ".ko":
            raise RigError(f"{path.name} is compressed; the rig loads plain .ko modules")
    return ordered


def _run(argv: list[str], what: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=600)
    except FileNotFoundError:
        raise RigError(f"cannot {what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise RigError(f"cannot {what}: {argv[0]} did not finish in 600 s") from None
    if done.returncode != 0:
        raise RigError(f"cannot {what}: {' '.join(argv)} failed: "
                       f"{(done.stderr.strip().splitlines() or ['(no message)'])[-1]}")
    return done


# -- what the host needs --------------------------------------------------------

def missing_tools() -> str | None:
    """Why the rig cannot run on this host (None: it can)."""
    if shutil.which(QEMU) is None:
        return f"{QEMU} is not installed (apt-get install qemu-system-x86)"
    if not BUSYBOX.is_file() or not _is_static(BUSYBOX):
        return f"{BUSYBOX} is not a static busybox (apt-get install busybox-static)"
    if shutil.which("cpio") is None:
        return "cpio is not installed (apt-get install cpio)"
    return None


def _is_static(path: Path) -> bool:
    """An ELF file without a program interpreter (PT_INTERP) needs no shared libraries."""
    with open(path, "rb") as elf:
        header = elf.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit ELF only
            return False
        phoff, = struct.unpack_from("<Q", header, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
        elf.seek(phoff)
        table = elf.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))


# -- booting --------------------------------------------------------------------

INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
exec </dev/console >/dev/console 2>&1
fail() { echo "rig-init: $*"; echo o > /proc/sysrq-trigger; sleep 30; }
for module in /modules/*.ko; do
    [ -e "$module" ] || continue
    insmod "$module" || fail "insmod $module"
done
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose root /lower || fail "9p root"
mount -t tmpfs -o mode=755 rw /rw && mkdir -p /rw/u /rw/w
mount -t overlay -o lowerdir=/lower,upperdir=/rw/u,workdir=/rw/w overlay /newroot || fail "overlay"
mount -t tmpfs -o mode=1777 tmp /newroot/tmp
mount -t tmpfs -o mode=755 run /newroot/run
mkdir -p /newroot/run/out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out /newroot/run/out || fail "9p out"
mount --move /dev /newroot/dev; mount --move /proc /newroot/proc; mount --move /sys /newroot/sys
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts; mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
mount -t cgroup2 cgroup2 /newroot/sys/fs/cgroup
ip link set lo up; hostname rig  # MPI's launcher wants an interface and a host name
exec switch_root /newroot /bin/sh -c '
. /run/out/guest.env
echo "rig: job starts at uptime $(cut -d" " -f1 /proc/uptime) s"
"$RIG_PYTHON" /run/out/guest_job.py /run/out > /run/out/job.log 2>&1
echo "rig: job ended rc=$? at uptime $(cut -d" " -f1 /proc/uptime) s"
sync; echo o > /proc/sysrq-trigger; sleep 30'
"""


def boot(kernel: Kernel, steps: list[Step], out: Path, *, isolation: str = ISOLATION,
         append: str = "", silence_s: float = SILENCE_S) -> GuestRun:
    """Boot `kernel`, run `steps` in order and power off; the results of
    every step that ran (also when a later one hangs the guest)."""
    reason = missing_tools()
    if reason:
        raise RigError(reason)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(GUEST_JOB, out / "guest_job.py")
    (out / "steps.json").write_text(json.dumps([s.to_dict() for s in steps]))
    package_root = Path(noisescope.__file__).resolve().parents[1]
    (out / "guest.env").write_text(
        f"export RIG_PYTHON={sys.executable}\n"
        f"export PATH={Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:"
        f"/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"export PYTHONPATH={package_root} HOME=/root PYTHONDONTWRITEBYTECODE=1 TERM=dumb\n")
    console = out / "console.log"
    with tempfile.TemporaryDirectory(prefix="noisescope-rig-") as work:
        initrd = _initramfs(Path(work), kernel)
        command = _qemu_command(kernel, initrd, out, console, f"{isolation} {append}".strip())
        qemu = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            stuck = _watch(qemu, console, steps, silence_s)
        finally:
            qemu.kill()
            qemu.wait()
    if stuck:
        run = _collect(kernel, out, console)
        raise GuestHung(f"the {kernel.name} guest {stuck} (steps done: "
                        f"{', '.join(run.steps) or 'none'}); console tail:\n"
                        f"{_tail(run.console, CONSOLE_TAIL_LINES)}", run)
    run = _collect(kernel, out, console)
    if "rig: job ended" not in run.console:
        raise RigError(f"the {kernel.name} guest stopped before its job ended; console tail:\n"
                       f"{_tail(run.console, CONSOLE_TAIL_LINES)}")
    return run


def _watch(qemu: subprocess.Popen, console: Path, steps: list[Step],
           silence_s: float) -> str | None:
    """Wait for QEMU to exit; None, or what went wrong when the guest hangs:
    it does not reach its job in BOOT_ALLOWANCE_S, its job prints nothing for
    `silence_s` (the guest froze), or a step runs past its own time limit by
    STEP_GRACE_S (the guest job kills a step at its limit, so a step that
    overruns it means the guest itself stopped making progress), its kernel
    reports an RCU stall (RCU_STALL), or a step's tasks outlive SIGKILL."""
    limits = {s.name: s.timeout_s for s in steps}
    began = time.monotonic()
    current, since, heard = None, began, None
    seen = 0
    while qemu.poll() is None:
        time.sleep(WATCH_INTERVAL_S)
        text = console.read_text(errors="replace") if console.exists() else ""
        for line in text[seen:].splitlines():
            if line.startswith("rig: "):
                heard = time.monotonic()
            if match := re.match(r"rig: step (\S+) (starts|ended)", line):
                current = match[1] if match[2] == "starts" else None
                since = time.monotonic()
            elif line.startswith("rig: job starts"):
                since = time.monotonic()
            elif RCU_STALL.search(line):
                return f"reported an RCU stall in step {current}: {line.strip()}"
            elif match := re.match(r"rig: step (\S+) outlived SIGKILL", line):
                return (f"hung in step {match[1]}: its tasks outlived SIGKILL at its limit "
                        f"(stuck in the guest's kernel, or on an emulated CPU that stopped)")
        seen = len(text)
        waited = time.monotonic() - since
        if current is None and "rig: job starts" not in text and waited > BOOT_ALLOWANCE_S:
            return f"did not reach its job within {BOOT_ALLOWANCE_S} s"
        if heard is not None and time.monotonic() - heard > silence_s:
            return (f"went silent in step {current}: no line from its job for "
                    f"{silence_s:.0f} s")
        if current is not None and waited > limits.get(current, 0) + STEP_GRACE_S:
            return (f"hung in step {current}: no end after {waited:.0f} s (its limit is "
                    f"{limits.get(current, 0):.0f} s)")
    return None


def _collect(kernel: Kernel, out: Path, console: Path) -> GuestRun:
    run = GuestRun(kernel, out, console=console.read_text(errors="replace")
                   if console.exists() else "")
    results = out / "results.json"
    if results.is_file():
        for entry in json.loads(results.read_text()):
            run.steps[entry["name"]] = StepResult(**entry)
    return run


def _initramfs(work: Path, kernel: Kernel) -> Path:
    root = work / "root"
    for folder in ("bin", "dev", "proc", "sys", "lower", "rw", "newroot", "modules"):
        (root / folder).mkdir(parents=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for module in kernel.modules:
        shutil.copy2(module, root / "modules" / module.name)
    (root / "init").write_text(INIT)
    (root / "init").chmod(0o755)
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*")) + ["."]
    archive = subprocess.run(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, check=True,
                             input="\n".join(names).encode(), capture_output=True).stdout
    initrd = work / "initrd.gz"
    initrd.write_bytes(gzip.compress(archive, compresslevel=1))
    return initrd


def _qemu_command(kernel: Kernel, initrd: Path, out: Path, console: Path,
                  extra: str) -> list[str]:
    half = MEMORY_MB // 2
    command = [QEMU, "-accel", "tcg,thread=multi", "-cpu", "max,vendor=GenuineIntel",
               "-m", str(MEMORY_MB), "-smp", SMP]
    for node, cpus in NODES:
        command += ["-object", f"memory-backend-ram,id=m{node},size={half}M",
                    "-numa", f"node,nodeid={node},cpus={cpus},memdev=m{node}"]
    return command + [
        "-kernel", str(kernel.image), "-initrd", str(initrd),
        "-append", f"console=ttyS0 quiet panic=-1 {kernel.cmdline} {extra}",
        "-virtfs", "local,path=/,mount_tag=root,security_model=none,readonly=on,multidevs=remap",
        "-virtfs", f"local,path={out},mount_tag=out,security_model=none",
        "-display", "none", "-nodefaults", "-no-reboot", "-serial", f"file:{console}"]
