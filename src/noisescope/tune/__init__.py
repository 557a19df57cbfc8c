"""`noisescope tune`: a traced baseline of the target CPUs, the plan of
candidate actions it supports (`plan.py`), and with --measure/--apply each
action tried in interleaved rounds (`measure.py`), kept only where it helped.

The names are imported on first use (PEP 562), so that the renderers can
read `tune.plan` without loading the scan."""

from __future__ import annotations

import importlib

_API = {"TuneOptions": "baseline", "TuneResult": "baseline", "tune": "baseline",
        "restore_applied": "baseline", "PlanEntry": "plan", "make_plan": "plan"}
__all__ = sorted(_API)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_API[name]}", __name__), name)
