"""The noise probes: configure -> run the native core -> numpy tables.

detour: selfish-detour / Hourglass sampler; ftq: fixed time quantum;
fwq: fixed work quantum; timerlat: timer wakeup latency (cyclictest).
Each is a `Probe` (base.py) in its own module, listed once in REGISTRY: it
runs with a ProbeContext (CPUs, windows, clock, injections) and its settings,
and returns a ProbeResult (tables and per-CPU summaries).
"""

from .base import Probe, ProbeContext, ProbeResult
from .detour import DETOUR
from .injection import Injection
from .quantum import FTQ, FWQ
from .timerlat import TIMERLAT

# The order is the order of `--probes` choices and of a scan's checks.
REGISTRY: dict[str, Probe] = {probe.name: probe for probe in (DETOUR, FTQ, FWQ, TIMERLAT)}
PROBES = tuple(REGISTRY)
DEFAULT_PROBES = tuple(name for name, probe in REGISTRY.items() if probe.default)


def manifest_constants() -> dict:
    """Every probe's fixed parameters (what its samples mean), recorded by every scan."""
    return {key: value for probe in REGISTRY.values() for key, value in probe.constants.items()}


__all__ = ["DEFAULT_PROBES", "PROBES", "REGISTRY", "Injection", "Probe", "ProbeContext",
           "ProbeResult", "manifest_constants"]
