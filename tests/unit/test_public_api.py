"""The public API: `import noisescope` is cheap, every exported name is the
library's own object, and `explain` works without the CLI."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import noisescope
from noisescope.errors import UsageError

BUNDLES = Path(__file__).parent.parent / "fixtures" / "bundles"

# public name -> (module, attribute) it is; None: the module itself (also callable)
EXPORTED = {
    "load": ("noisescope.bundle", "load"), "Bundle": ("noisescope.bundle", "Bundle"),
    "UsageError": ("noisescope.errors", "UsageError"),
    "Injection": ("noisescope.probes.inject", "Injection"),
    "scan": ("noisescope.scan", None), "ScanOptions": ("noisescope.scan", "ScanOptions"),
    "timerlat": ("noisescope.timerlat", None),
    "TimerlatOptions": ("noisescope.timerlat", "TimerlatOptions"),
    "bench": ("noisescope.experiment.running", "measure"),
    "run": ("noisescope.experiment.running", "run_experiment"),
    "Experiment": ("noisescope.experiment.model", "Experiment"),
    "Configuration": ("noisescope.experiment.model", "Configuration"),
    "load_experiment": ("noisescope.experiment.files", "load_experiment"),
    "Workload": ("noisescope.workload", "Workload"),
    "compare": ("noisescope.analysis.compare", "compare"),
    "predict": ("noisescope.analysis.predict.model", "predict"),
    "explain": ("noisescope.explanation", "explain"),
}


def _modules_after(code: str) -> set[str]:
    probe = f"{code}; import sys; print(' '.join(sys.modules))"
    return set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              check=True).stdout.split())


def test_importing_noisescope_loads_no_heavy_library():
    loaded = _modules_after("import noisescope")
    heavy = {"numpy", "pyarrow", "scipy", "click", "rich", "matplotlib", "jinja2"}
    assert "noisescope" in loaded
    assert not heavy & {name.split(".")[0] for name in loaded}
    assert not {name for name in loaded if name.startswith("noisescope.")}


def test_every_public_name_is_the_library_object():
    assert set(noisescope.__all__) == {"__version__", *EXPORTED}
    for name, (module, attribute) in EXPORTED.items():
        home = importlib.import_module(module)
        assert getattr(noisescope, name) is (home if attribute is None else getattr(home, attribute))
        assert name in dir(noisescope)
    with pytest.raises(AttributeError):
        noisescope.no_such_name  # noqa: B018


@pytest.mark.parametrize("name", ["scan", "timerlat"])
def test_scan_and_timerlat_are_their_functions_whatever_was_imported_first(name, monkeypatch):
    # imported as a module first (as the CLI does), the attribute is still callable
    code = f"import noisescope.{name}, noisescope; print(callable(noisescope.{name}))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.split() == ["True"]
    module = getattr(noisescope, name)
    calls = []
    monkeypatch.setattr(module, name, lambda *args, **kwargs: calls.append((args, kwargs)) or "done")
    assert module("options", argv=["x"]) == "done" and calls == [(("options",), {"argv": ["x"]})]


def test_explain_without_the_cli():
    found = noisescope.explain(BUNDLES / "scan-161b2c8", worst=2)
    assert found.bundle.name == "scan-161b2c8" and found.detours
    for row in found.detours:
        assert row["cpu"] in found.bundle.parameters["cpus"] and 0 < len(row["worst"]) <= 2
        assert row["detours"] == found.bundle.detours.where(cpu=row["cpu"]).rows
    by_text = noisescope.explain(found.bundle, cpus="1", worst=0)
    assert [r["cpu"] for r in by_text.detours] == [1] and all(not r["worst"] for r in by_text.detours)
    timerlat = BUNDLES / "timerlat-161b2c8"
    as_ns = noisescope.explain(timerlat, trace_threshold=5_000).late_wakeups
    assert as_ns == noisescope.explain(timerlat, trace_threshold="5").late_wakeups  # plain: us
    assert all(row["threshold_ns"] == 5_000 for row in as_ns)
    with pytest.raises(UsageError, match="did not measure CPUs 7,9"):
        noisescope.explain(found.bundle, cpus=[9, 7])
    with pytest.raises(UsageError, match="no kernel trace"):
        noisescope.explain(BUNDLES / "bench-161b2c8")


def test_explain_reads_the_detours_and_their_causes_a_cpu_and_a_row_group_at_a_time(monkeypatch):
    """An hour's bundle holds tens of millions of cause rows: explain never
    reads them whole (a whole read fails here), and says what it said with the
    tables in memory."""
    import noisescope.bundle

    in_memory = noisescope.load(BUNDLES / "scan-161b2c8")
    in_memory.detours, in_memory.detour_causes  # noqa: B018 - loaded whole, kept
    expected = noisescope.explain(in_memory, worst=3)
    whole_read = noisescope.bundle._read_table

    def refused(path, *args):
        assert path.name not in ("detours.parquet", "detour_causes.parquet"), f"{path} read whole"
        return whole_read(path, *args)

    monkeypatch.setattr(noisescope.bundle, "_read_table", refused)
    found = noisescope.explain(BUNDLES / "scan-161b2c8", worst=3)
    assert found.detours == expected.detours and len(found.detours) >= 1
    assert any(row["worst"] and row["causes"] for row in found.detours)
    assert noisescope.explain(BUNDLES / "scan-161b2c8", cpus="1", worst=3).detours == [
        row for row in expected.detours if row["cpu"] == 1]
