"""The noise probes: configure -> run the native core -> numpy tables.

detour: selfish-detour / Hourglass sampler; ftq: fixed time quantum;
fwq: fixed work quantum; timerlat: timer wakeup latency (cyclictest).
Each takes a ProbeContext (CPUs, windows, clock, injections) and returns a
ProbeResult (tables and per-CPU summaries).
"""

from .base import ProbeContext, ProbeResult
from .injection import Injection

PROBES = ("detour", "ftq", "fwq", "timerlat")
DEFAULT_PROBES = ("detour", "ftq", "fwq")  # timerlat sleeps; `noisescope timerlat` is its home

__all__ = ["DEFAULT_PROBES", "PROBES", "Injection", "ProbeContext", "ProbeResult"]
