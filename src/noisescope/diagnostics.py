"""Diagnostics (warnings): a closed set, each with a hint saying what to do about it.

A warning never replaces data: the measurement is kept and the warning says
how far to trust it. Bundles store them as {code, message, hint}.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum


class Code(str, Enum):
    TOO_SHORT = "too_short"
    MACHINE_BUSY = "machine_busy"
    CPU_NOT_ISOLATED = "cpu_not_isolated"
    FREQUENCY_SCALING = "frequency_scaling"
    RT_THROTTLING = "rt_throttling"
    BUFFER_OVERFLOW = "buffer_overflow"
    TRACING_UNAVAILABLE = "tracing_unavailable"
    TRACE_EVENTS_LOST = "trace_events_lost"
    PRIVILEGES = "privileges"
    INTERRUPTED = "interrupted"
    CLOCK = "clock"
    RUN_EXCLUDED = "run_excluded"
    METRIC_MISSING = "metric_missing"
    TOO_FEW_RUNS = "too_few_runs"
    PLACEMENT = "placement"
    RANK_MISSING = "rank_missing"
    MISALIGNED = "misaligned"
    WRITE_FAILED = "write_failed"
    RESTORE_FAILED = "restore_failed"
    NOT_KEPT = "not_kept"


HINTS = {
    Code.TOO_SHORT: "measure longer (--duration 10s or more) for stable tails",
    Code.MACHINE_BUSY: "other tasks took the measured CPUs; stop them or measure idle/isolated CPUs",
    Code.CPU_NOT_ISOLATED: "for a tuned baseline boot with isolcpus=, nohz_full= and rcu_nocbs= "
                           "for the measured CPUs",
    Code.FREQUENCY_SCALING: "set the 'performance' governor (cpupower frequency-set -g performance)",
    Code.RT_THROTTLING: "windows were shortened to stay inside the kernel's RT budget "
                        "(/proc/sys/kernel/sched_rt_runtime_us)",
    Code.BUFFER_OVERFLOW: "percentiles come from the histogram meanwhile; for detours raise "
                          "--max-detours",
    Code.TRACING_UNAVAILABLE: "run as root on a kernel with tracefs to explain detours",
    Code.TRACE_EVENTS_LOST: "raise --trace-buffer (per CPU) or measure for a shorter --duration",
    Code.PRIVILEGES: "run as root (or grant CAP_SYS_NICE and CAP_IPC_LOCK) for SCHED_FIFO "
                     "and mlockall",
    Code.INTERRUPTED: "the bundle holds what was measured before the interruption",
    Code.CLOCK: "durations depend on the clock rate; check 'clock' in the manifest",
    Code.RUN_EXCLUDED: "excluded runs are kept in the bundle with their reason",
    Code.METRIC_MISSING: "check the --metric regular expression against the command's output",
    Code.TOO_FEW_RUNS: "use --runs 5 or more for a comparison between configurations",
    Code.PLACEMENT: "spread and packed differ only on machines with several NUMA nodes or sockets",
    Code.RANK_MISSING: "the fleet summary leaves these ranks out; see their own messages, fix "
                       "the cause and measure again",
    Code.MISALIGNED: "ranks did not measure at the same moments; a loaded node starts late "
                     "(use --rt, or a longer --timeout if set-up is slow)",
    Code.WRITE_FAILED: "make room (or grant permission) where the output goes, or choose another -o",
    Code.RESTORE_FAILED: "the journal in /run/noisescope keeps the original value: run "
                         "noisescope cleanup as root to put it back",
    Code.NOT_KEPT: "install its persistent snippet (the bundle's persistent/ directory) to keep it",
}


@dataclass(frozen=True)
class Diagnostic:
    code: Code
    message: str

    @property
    def hint(self) -> str:
        return HINTS[self.code]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["code"] = self.code.value
        data["hint"] = self.hint
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Diagnostic:
        return cls(Code(data["code"]), data["message"])

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})"
