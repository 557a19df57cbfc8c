"""noisescope: measure operating-system noise on Linux CPUs, explain where it
comes from, compare configurations and predict what it costs at scale.

    >>> import noisescope
    >>> bundle = noisescope.load("noisescope-myhost-20261130T063836Z")
    >>> bundle.summaries["detour"][0]["noise_pct"]
    >>> bundle.detours.where(cpu=1).duration_ns
    >>> fresh = noisescope.scan(noisescope.ScanOptions(cpus=(1,), duration_ns=2_000_000_000))
    >>> noisescope.explain(bundle, cpus="1").detours[0]["causes"]

The names in `__all__` are the public API; every other module is internal
(docs/architecture.md). They are imported on first use (PEP 562), so that
`import noisescope` loads neither numpy nor pyarrow: a scan keeps its memory.
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

# public name -> "module:attribute" (relative to this package); "module:" is the module itself
_API = {
    "load": "bundle:load",
    "Bundle": "bundle:Bundle",
    "UsageError": "errors:UsageError",
    "Injection": "probes:Injection",
    "scan": "scan:",
    "ScanOptions": "scan:ScanOptions",
    "timerlat": "timerlat:",
    "TimerlatOptions": "timerlat:TimerlatOptions",
    "bench": "experiment:measure",
    "run": "experiment:run_experiment",
    "Experiment": "experiment:Experiment",
    "Configuration": "experiment:Configuration",
    "load_experiment": "experiment:load_experiment",
    "Workload": "workload:Workload",
    "compare": "analysis.compare:compare",
    "predict": "analysis.predict:predict",
    "explain": "explanation:explain",
}

__all__ = ["__version__", *_API]


class _CallableModule(types.ModuleType):
    """A module that is also its main function: `noisescope.scan(options)` runs
    `noisescope.scan.scan(options)`. The functions `scan` and `timerlat` share
    their names with their (internal) modules, and the import system sets the
    package attribute to the module whenever it is imported; a callable module
    makes both meanings one object, whatever was imported first."""

    def __call__(self, *args, **kwargs):
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value) -> None:
        if _API.get(name) == f"{name}:" and isinstance(value, types.ModuleType):
            value.__class__ = _CallableModule  # the import system attaching the submodule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _API[name].split(":")
    found = importlib.import_module(f".{module}", __name__)
    return getattr(found, attribute) if attribute else found


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
