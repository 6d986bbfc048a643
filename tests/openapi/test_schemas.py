"""Schemas made self-contained: references inlined, cycles and depth cut, fan-out bounded,
remote references refused, OpenAPI 3.0's dialect turned into JSON Schema's."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from proxy.openapi.schemas import MAX_DEPTH, DocumentProblem, Resolver


def resolver(schemas: dict[str, Any], *, openapi_30: bool = False, **options: Any) -> Resolver:
    return Resolver({"components": {"schemas": schemas}}, openapi_30=openapi_30, **options)


def test_references_are_inlined_and_extensions_dropped() -> None:
    found = resolver({"A": {"type": "string", "format": "email", "x-secret": 1}}).schema(
        {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/A"}}}
    )
    assert found == {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}


def test_a_recursive_schema_is_cut_where_it_recurs_and_stays_a_valid_schema() -> None:
    node = {"type": "object", "properties": {"child": {"$ref": "#/components/schemas/Node"}}}
    found = resolver({"Node": node}).schema({"$ref": "#/components/schemas/Node"})
    assert found["properties"]["child"] == {"description": "(recursive: Node)"}
    jsonschema.Draft202012Validator.check_schema(found)


def test_mutually_recursive_references_end() -> None:
    schemas = {
        "A": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/B"}}},
        "B": {"type": "object", "properties": {"a": {"$ref": "#/components/schemas/A"}}},
    }
    found = resolver(schemas).schema({"$ref": "#/components/schemas/A"})
    assert found["properties"]["b"]["properties"]["a"] == {"description": "(recursive: A)"}


def test_nesting_past_the_depth_bound_is_cut() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(200):
        schema = {"type": "array", "items": schema}
    found = resolver({}).schema(schema)
    depth = 0
    while "items" in found:
        found, depth = found["items"], depth + 1
    assert depth <= MAX_DEPTH + 1
    assert "nested deeper" in found["description"]


def test_references_that_fan_out_exponentially_are_refused() -> None:
    schemas: dict[str, Any] = {
        f"L{i}": {"allOf": [{"$ref": f"#/components/schemas/L{i + 1}"}] * 4} for i in range(30)
    }
    schemas["L30"] = {"type": "string"}
    with pytest.raises(DocumentProblem, match="nodes"):
        resolver(schemas, max_nodes=10_000).schema({"$ref": "#/components/schemas/L0"})


@pytest.mark.parametrize(
    "ref", ["https://evil.example/schema.json", "other.yaml#/Pet", "file:///etc/passwd", "//evil/x"]
)
def test_a_remote_reference_is_refused(ref: str) -> None:
    with pytest.raises(DocumentProblem, match="remote references are refused"):
        resolver({}).schema({"$ref": ref})


def test_a_dangling_reference_is_refused() -> None:
    with pytest.raises(DocumentProblem, match="points at nothing"):
        resolver({}).schema({"$ref": "#/components/schemas/Missing"})


def test_openapi_30_nullable_and_boolean_bounds_become_json_schema() -> None:
    found = resolver({}, openapi_30=True).schema(
        {"type": "integer", "nullable": True, "maximum": 5, "exclusiveMaximum": True, "minimum": 1}
    )
    assert found == {"type": ["integer", "null"], "exclusiveMaximum": 5, "minimum": 1}
    jsonschema.Draft202012Validator.check_schema(found)


def test_a_nullable_enum_allows_null() -> None:
    found = resolver({}, openapi_30=True).schema({"type": "string", "enum": ["a"], "nullable": True})
    assert found == {"type": ["string", "null"], "enum": ["a", None]}
    jsonschema.validate(None, found)


def test_a_31_reference_keeps_its_sibling_description() -> None:
    found = resolver({"A": {"type": "string"}}).schema({"$ref": "#/components/schemas/A", "description": "d"})
    assert found == {"type": "string", "description": "d"}


def test_a_chain_of_references_to_itself_is_refused() -> None:
    loop = Resolver({"a": {"$ref": "#/b"}, "b": {"$ref": "#/a"}}, openapi_30=False)
    with pytest.raises(DocumentProblem, match="refers to itself"):
        loop.deref({"$ref": "#/a"})
