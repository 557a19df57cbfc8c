"""`noisescope tune`: a traced baseline of the target CPUs and the plan of
candidate actions it supports (`plan.py`). This part is a dry run: it
measures and advises, and changes nothing on the machine."""

from .baseline import TuneOptions, TuneResult, tune
from .plan import PlanEntry, make_plan

__all__ = ["PlanEntry", "TuneOptions", "TuneResult", "make_plan", "tune"]
