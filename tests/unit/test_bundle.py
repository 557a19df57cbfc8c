import json
import os
from importlib import resources

import jsonschema
import numpy as np
import pyarrow as pa
import pytest

import noisescope
from noisescope.bundle import SCHEMA_VERSION, Bundle, check_destination
from noisescope.errors import UsageError
from noisescope.tables import Table


def schema():
    text = resources.files("noisescope").joinpath("schema/manifest.schema.json").read_text()
    return json.loads(text)


def validate(manifest):
    jsonschema.validate(manifest, schema(), cls=jsonschema.Draft202012Validator)


def minimal_manifest(**extra):
    return {"schema_version": SCHEMA_VERSION, "kind": "import", "tool": {"name": "noisescope",
            "version": "0"}, "argv": [], "started_utc": "2026-01-01T00:00:00Z", "complete": True,
            "parameters": {}, "summaries": {}, "warnings": [], "tables": {},
            "source": {"tool": "cyclictest", "version": None, "command": None, "file": "x.txt",
                       "sha256": "0" * 64, "format": "text"}, **extra}


def test_round_trip(tmp_path):
    detours = Table({"cpu": np.array([0, 1], np.int32), "start_ns": np.array([5, 9]),
                     "duration_ns": np.array([1000, 2000])})
    written = Bundle(minimal_manifest(label="x"), {"detours": detours}).write(tmp_path / "b")
    loaded = noisescope.load(written)
    assert loaded.label == "x"
    assert loaded.manifest["tables"]["detours"]["rows"] == 2
    assert loaded.detours.where(cpu=1).duration_ns.tolist() == [2000]
    validate(loaded.manifest)


def test_write_refuses_a_non_empty_destination(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not an empty directory"):
        Bundle(minimal_manifest()).write(tmp_path / "b")
    assert (tmp_path / "b" / "keep.txt").read_text() == "mine"


def test_write_into_an_empty_directory(tmp_path):
    (tmp_path / "b").mkdir()
    Bundle(minimal_manifest()).write(tmp_path / "b")
    assert (tmp_path / "b" / "manifest.json").exists()


def test_failed_write_leaves_nothing_behind(tmp_path):
    bad = Table({"x": np.array([object()], dtype=object)})  # pyarrow cannot store it
    with pytest.raises((pa.ArrowException, TypeError)):
        Bundle(minimal_manifest(), {"bad": bad}).write(tmp_path / "b")
    assert os.listdir(tmp_path) == []


def test_destination_checks(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        check_destination(tmp_path / "missing" / "b")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError):
        check_destination(tmp_path / "file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_destination_not_writable(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UsageError, match="cannot write"):
        check_destination(locked / "b")


def test_destination_on_read_only_filesystem():
    with pytest.raises(UsageError, match="cannot write"):
        check_destination(__import__("pathlib").Path("/proc/noisescope-bundle"))


def test_load_errors(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        noisescope.load(tmp_path / "nope")
    with pytest.raises(UsageError, match="not a noisescope bundle"):
        noisescope.load(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(UsageError, match="corrupt"):
        noisescope.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "scan"}))
    with pytest.raises(UsageError, match="corrupt"):
        noisescope.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps(minimal_manifest(schema_version=99)))
    with pytest.raises(UsageError, match="newer noisescope"):
        noisescope.load(tmp_path)


def test_damaged_table_is_a_usage_error(tmp_path):
    written = Bundle(minimal_manifest(), {"t": Table({"a": np.arange(3)})}).write(tmp_path / "b")
    (written / "t.parquet").write_bytes(b"garbage")
    with pytest.raises(UsageError, match="unreadable"):
        noisescope.load(written).table("t")


def test_schema_rejects_bad_manifests():
    with pytest.raises(jsonschema.ValidationError):
        validate(minimal_manifest(warnings=[{"code": "made_up", "message": "", "hint": ""}]))
    with pytest.raises(jsonschema.ValidationError):
        validate({**minimal_manifest(), "kind": "scan"})  # a scan needs host and clock
