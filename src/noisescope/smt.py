"""SMT switched off and on at run time: an experiment's `nosmt` configuration.

Writing "off" to /sys/devices/system/cpu/smt/control takes every CPU but
the first thread of each core offline (what booting with `nosmt` does);
"on" brings them back. An experiment switches it before each run of a
configuration that sets `smt`, through a KnobJournal: the original setting
comes back after the last run, on Ctrl-C and errors, and after a SIGKILL
with the next run or `noisescope cleanup`. Core scheduling needs SMT:
every PR_SCHED_CORE call fails with ENODEV while it is off.
"""

from __future__ import annotations

from dataclasses import replace

from .errors import UsageError
from .host import HostFacts
from .knobs import KnobJournal, read_knob
from .privileges import is_root
from .units import format_cpu_list, parse_cpu_list

SMT_CONTROL = "/sys/devices/system/cpu/smt/control"
SETTINGS = ("on", "off")


def check_switchable(facts: HostFacts) -> None:
    """Raise UsageError unless this process can switch SMT here."""
    if facts.smt_control not in SETTINGS:
        raise UsageError(f"SMT cannot be switched on this machine (smt/control: "
                         f"{facts.smt_control or 'missing'})",
                         "drop smt from the configurations, or run where SMT is on or off "
                         "(not notsupported, forceoff or notimplemented)")
    if not is_root():
        raise UsageError("switching SMT needs root (it writes /sys/devices/system/cpu/smt/control)",
                         "run as root, or drop smt from the configurations")


def first_threads(facts: HostFacts) -> tuple[int, ...]:
    """The CPUs that stay online with SMT off: the first thread of each core."""
    later = {cpu for group in facts.sibling_groups for cpu in group[1:]}
    return tuple(c for c in facts.online if c not in later)


def without_smt(facts: HostFacts) -> HostFacts:
    """The machine as it is with SMT off (for choosing CPUs before switching)."""
    online = set(first_threads(facts))

    def keep(cpus: str) -> str:
        return format_cpu_list(c for c in parse_cpu_list(cpus) if c in online) if cpus else ""

    return replace(facts, online_cpus=format_cpu_list(sorted(online)), threads_per_core=1,
                   smt_control="off",
                   smt_siblings=[format_cpu_list([c]) for c in sorted(online)],
                   numa_nodes={n: keep(c) for n, c in facts.numa_nodes.items() if keep(c)},
                   packages={p: keep(c) for p, c in facts.packages.items() if keep(c)},
                   isolated_cpus=keep(facts.isolated_cpus), nohz_full_cpus=keep(facts.nohz_full_cpus))


class SmtSwitch:
    """Sets SMT for each run (only when it changes), journalled in `journal`;
    a configuration without a setting runs as the machine was."""

    def __init__(self, journal: KnobJournal, control: str = SMT_CONTROL):
        self.journal = journal
        self.control = control
        self.original = read_knob(control)

    def set(self, setting: str | None) -> None:
        wanted = setting or self.original
        if read_knob(self.control) != wanted:
            self.journal.change(self.control, wanted)
