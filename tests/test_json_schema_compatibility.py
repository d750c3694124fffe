"""Every `--json` document keeps the fields it had: a field may be added, never dropped,
renamed, made optional or given another JSON type.

`tests/fixtures/json_schemas_before_records.json` is `synth schema` as it was before the
records were defined once (one pydantic model for the row, the document and the API);
the schemas printed now are compared with it field by field, `$ref`s followed, so a
document may be served by a model of another name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from synth_pipelines.contracts.documents import DOCUMENTS, schema
from tests.conftest import PROJECT_ROOT

BEFORE = json.loads(
    (PROJECT_ROOT / "tests" / "fixtures" / "json_schemas_before_records.json").read_text()
)


def _resolved(node: Any, defs: dict[str, Any], seen: frozenset[str] = frozenset()) -> Any:
    """`node` with every local `$ref` replaced by its definition (a recursive one once)."""
    if isinstance(node, list):
        return [_resolved(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if ref is not None:
        name = ref.removeprefix("#/$defs/")
        if name in seen:
            return {"recursive": True}
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolved(merged, defs, seen | {name})
    return {key: _resolved(value, defs, seen) for key, value in node.items() if key != "$defs"}


def _types(node: dict[str, Any]) -> set[str]:
    """The JSON types a value of this schema may take (an `anyOf` is the union)."""
    if "anyOf" in node:
        return set().union(*(_types(option) for option in node["anyOf"]))
    if "type" in node:
        kinds = node["type"]
        return set(kinds) if isinstance(kinds, list) else {kinds}
    if "enum" in node or "const" in node:
        values = node.get("enum", [node.get("const")])
        names = {str: "string", bool: "boolean", int: "integer", float: "number"}
        return {"null" if value is None else names[type(value)] for value in values}
    return {"any"}


def _options(node: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The parts of `node` (itself or its `anyOf` options) that describe a `kind` value."""
    found = [option for option in node.get("anyOf", [node]) if kind in _types(option)]
    return [option for part in found for option in part.get("anyOf", [part])]


def _lost(before: Any, now: Any, path: str) -> list[str]:
    """What a reader of `before` would miss in `now`, one line per field."""
    if not isinstance(before, dict) or before.get("recursive") or now.get("recursive"):
        return []
    problems: list[str] = []
    types_before, types_now = _types(before), _types(now)
    if "any" not in types_now and not types_before <= types_now | _widened(types_now):
        problems.append(f"{path}: type {sorted(types_before)} became {sorted(types_now)}")
    if "enum" in before and "enum" in now and not set(before["enum"]) <= set(now["enum"]):
        problems.append(f"{path}: values {sorted(set(before['enum']) - set(now['enum']))} gone")
    for old in _options(before, "object"):
        new = next(iter(_options(now, "object")), {})
        fields_now = new.get("properties", {})
        for name, field in old.get("properties", {}).items():
            if name not in fields_now:
                problems.append(f"{path}.{name}: gone")
                continue
            if name in old.get("required", []) and name not in new.get("required", []):
                problems.append(f"{path}.{name}: no longer always present")
            problems += _lost(field, fields_now[name], f"{path}.{name}")
        if isinstance(old.get("additionalProperties"), dict):
            extra = new.get("additionalProperties")
            problems += _lost(old["additionalProperties"], extra or {}, f"{path}[*]")
    for old in _options(before, "array"):
        new = next(iter(_options(now, "array")), {})
        if "items" in old:
            problems += _lost(old["items"], new.get("items", {}), f"{path}[]")
    return problems


def _widened(types: set[str]) -> set[str]:
    # An integer is still a number to a JSON reader; the reverse would not hold.
    return {"integer"} if "number" in types else set()


def test_every_command_that_had_a_json_document_still_has_one():
    assert set(BEFORE) <= set(DOCUMENTS)


@pytest.mark.parametrize("command", sorted(BEFORE))
def test_a_json_document_keeps_every_field_it_had(command: str):
    before, now = BEFORE[command], schema(command)
    lost = _lost(
        _resolved(before, before.get("$defs", {})), _resolved(now, now.get("$defs", {})), command
    )
    assert not lost, "\n".join(lost)


def test_the_comparison_notices_a_lost_field():
    # The check itself must be able to fail: drop one field of `run show` and one type.
    before = _resolved(BEFORE["run show"], BEFORE["run show"]["$defs"])
    trimmed = json.loads(json.dumps(before))
    del trimmed["properties"]["summary"]["properties"]["passed"]
    trimmed["properties"]["batches"] = {"type": "string"}
    lost = _lost(before, trimmed, "run show")
    assert "run show.summary.passed: gone" in lost
    assert any(line.startswith("run show.batches: type") for line in lost)
