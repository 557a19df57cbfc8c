"""The typed manifest and the shipped JSON Schema describe the same document:
the same top-level keys, the same required ones, and the typed parts of the
schema ($defs tool, warning, import_source, host, clock) with the fields the
code writes. Every builder goes through new_manifest, whose bundles the other
tests validate against the schema per kind; here new_manifest's own contract."""

from __future__ import annotations

import json
from dataclasses import fields
from importlib import resources

import pytest

from noisescope.clock import MeasurementClock
from noisescope.diagnostics import Code, Diagnostic
from noisescope.host import HostFacts
from noisescope.manifest import (
    SCHEMA_VERSION,
    ImportSource,
    Manifest,
    Tool,
    WarningEntry,
    new_manifest,
)


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(resources.files("noisescope").joinpath("schema/manifest.schema.json")
                      .read_text())


def keys(typed) -> tuple[set[str], set[str]]:
    return set(typed.__annotations__), set(typed.__required_keys__)


def test_the_manifest_has_the_schemas_top_level_keys_in_its_order(schema):
    assert list(Manifest.__annotations__) == list(schema["properties"])
    assert Manifest.__required_keys__ == set(schema["required"])
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION


@pytest.mark.parametrize("typed, definition", [
    (WarningEntry, "warning"), (ImportSource, "import_source")])
def test_typed_sections_match_their_schema_definitions(schema, typed, definition):
    described = schema["$defs"][definition]
    every, required = keys(typed)
    assert every == set(described["properties"])
    assert required == set(described["required"])


def test_tool_matches_the_schema(schema):
    assert keys(Tool) == ({"name", "version"}, set(schema["properties"]["tool"]["required"]))


def test_what_the_code_writes_covers_the_schema_of_host_clock_and_warning(schema):
    """The schema describes a subset of the host facts and the clock; every
    field it names, and every one it requires, is one the code writes."""
    host_fields = {f.name for f in fields(HostFacts)}
    assert set(schema["$defs"]["host"]["properties"]) <= host_fields
    assert set(schema["$defs"]["host"]["required"]) <= host_fields
    clock_fields = {f.name for f in fields(MeasurementClock)}
    assert set(schema["$defs"]["clock"]["properties"]) <= clock_fields
    assert set(schema["$defs"]["clock"]["required"]) <= clock_fields
    assert set(Diagnostic(Code.INTERRUPTED, "m").to_dict()) == set(
        WarningEntry.__annotations__)


def test_new_manifest_fills_the_head_and_orders_keys_as_the_schema():
    made = new_manifest("prediction", label="a", started_utc="2026-01-01T00:00:00.000000Z",
                        complete=False, argv=["noisescope", "predict"], parameters={"procs": 8},
                        summaries={"prediction": []}, warnings=[], system=[])
    assert list(made) == [k for k in Manifest.__annotations__ if k in made]
    assert made["schema_version"] == SCHEMA_VERSION and made["tool"]["name"] == "noisescope"
    assert made["finished_utc"] >= made["started_utc"] and made["tables"] == {}
    assert made["argv"] == ["noisescope", "predict"] and made["complete"] is False


def test_new_manifest_refuses_a_section_the_schema_does_not_have():
    with pytest.raises(TypeError, match="not a manifest section: hosts"):
        new_manifest("scan", label=None, started_utc="x", complete=True, parameters={},
                     summaries={}, warnings=[], hosts={})
