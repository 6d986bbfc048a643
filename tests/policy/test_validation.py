"""SchemaValidators: arguments and structured results against the tool's schemas, offline, cached."""

from __future__ import annotations

import socket
import urllib.request
from typing import Any

import pytest

from proxy.catalog.merge import Entry
from proxy.policy.validation import MAX_PROBLEMS, Check, SchemaValidators

COUNTER = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 0}, "name": {"type": "string"}},
    "required": ["count"],
    "additionalProperties": False,
}


def tool(input_schema: Any = COUNTER, output_schema: Any = None, **extra: Any) -> Entry:
    definition: dict[str, Any] = {"name": "t.count", **extra}
    if input_schema is not None:
        definition["inputSchema"] = input_schema
    if output_schema is not None:
        definition["outputSchema"] = output_schema
    return Entry("t.count", "t", "count", definition)


@pytest.fixture
def network_attempts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records (and refuses) every attempt to reach the network; a refusal alone could be swallowed."""
    attempts: list[str] = []

    def refuse(name: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            attempts.append(name)
            raise OSError(f"no network in tests ({name})")

        return refused

    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(urllib.request, "urlopen", refuse("urlopen"))
    return attempts


def test_valid_arguments_have_no_problems() -> None:
    assert SchemaValidators().check_arguments(tool(), {"count": 3, "name": "x"}) == []


def test_each_problem_names_its_json_path() -> None:
    problems = SchemaValidators().check_arguments(tool(), {"count": "x", "extra": 1})
    assert sorted(problems) == [
        "arguments.count: 'x' is not of type 'integer'",
        "arguments: Additional properties are not allowed ('extra' was unexpected)",
    ]


def test_paths_show_list_indexes_and_odd_keys() -> None:
    schema = {"type": "object", "properties": {"a b": {"type": "array", "items": {"type": "integer"}}}}
    problems = SchemaValidators().check_arguments(tool(schema), {"a b": [1, "two"]})
    assert problems == ["arguments['a b'][1]: 'two' is not of type 'integer'"]


def test_a_missing_required_argument_is_a_problem() -> None:
    assert SchemaValidators().check_arguments(tool(), {}) == ["arguments: 'count' is a required property"]


def test_a_tool_without_input_schema_accepts_anything() -> None:
    assert SchemaValidators().check_arguments(tool(input_schema=None), {"whatever": 1}) == []


def test_the_number_of_problems_is_capped() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    problems = SchemaValidators().check_arguments(tool(schema), {f"k{n}": "x" for n in range(50)})

    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1] == "(more problems not shown)"


def test_long_messages_are_shortened() -> None:
    problems = SchemaValidators().check_arguments(tool(), {"count": "x" * 10_000})
    assert len(problems) == 1
    assert len(problems[0]) == 200
    assert problems[0].endswith("...")


def test_the_default_dialect_is_2020_12() -> None:
    # prefixItems exists in 2020-12 only; draft-07 would ignore it.
    schema = {"type": "object", "properties": {"pair": {"prefixItems": [{"type": "string"}]}}}
    problems = SchemaValidators().check_arguments(tool(schema), {"pair": [1]})
    assert problems == ["arguments.pair[0]: 1 is not of type 'string'"]


def test_a_declared_dialect_is_honoured() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"pair": {"prefixItems": [{"type": "string"}]}},
    }
    assert SchemaValidators().check_arguments(tool(schema), {"pair": [1]}) == []


def test_formats_are_not_checked() -> None:
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}}}
    assert SchemaValidators().check_arguments(tool(schema), {"when": "not a date"}) == []


def test_a_remote_ref_is_a_clear_problem_and_nothing_is_fetched(network_attempts: list[str]) -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "https://example.com/schemas/x.json"}}}
    problems = SchemaValidators().check_arguments(tool(schema), {"x": 1})
    assert network_attempts == []
    assert problems == [
        "the tool's inputSchema refers to 'https://example.com/schemas/x.json', which cannot be resolved "
        "(never fetched)"
    ]


def test_local_refs_resolve(network_attempts: list[str]) -> None:
    schema = {
        "type": "object",
        "$defs": {"positive": {"type": "integer", "minimum": 1}},
        "properties": {"n": {"$ref": "#/$defs/positive"}},
    }
    assert SchemaValidators().check_arguments(tool(schema), {"n": 0}) == [
        "arguments.n: 0 is less than the minimum of 1"
    ]


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "objekt"}, "the tool's inputSchema is invalid: type: 'objekt' is not valid under any of"),
        (
            {"type": "object", "required": "count"},
            "the tool's inputSchema is invalid: required: 'count' is not",
        ),
        ([1, 2], "the tool's inputSchema is invalid: a schema must be an object (got a list)"),
        ({"$schema": ["x"], "type": "object"}, "the tool's inputSchema is invalid: TypeError:"),
    ],
)
def test_a_schema_that_does_not_compile_is_one_problem_not_an_exception(schema: Any, expected: str) -> None:
    problems = SchemaValidators().check_arguments(tool(schema), {})
    assert len(problems) == 1
    assert problems[0].startswith(expected), problems


def test_a_self_referencing_schema_is_a_problem_not_a_crash() -> None:
    problems = SchemaValidators().check_arguments(tool({"$ref": "#"}), {})
    assert problems == ["the tool's inputSchema recurses without end on this value"]


def test_a_schema_is_compiled_once_and_reused() -> None:
    validators = SchemaValidators()
    entry = tool()

    validators.check_arguments(entry, {"count": 1})
    validators.check_arguments(entry, {"count": "x"})
    validators.check_arguments(tool(), {"count": 2})  # a new entry sharing the same schema object

    assert validators.compilations == 1


def test_an_equal_but_new_schema_object_is_compiled_again() -> None:
    validators = SchemaValidators()
    validators.check_arguments(tool(dict(COUNTER)), {"count": 1})
    validators.check_arguments(tool(dict(COUNTER)), {"count": 1})
    assert validators.compilations == 2


def test_the_cache_is_bounded() -> None:
    validators = SchemaValidators(maxsize=2)
    schemas = [{"type": "object", "title": str(n)} for n in range(3)]
    for schema in [*schemas, schemas[0]]:  # the first was evicted by the third
        validators.check_arguments(tool(schema), {})
    assert validators.compilations == 4


def test_a_schema_that_failed_to_compile_is_not_compiled_again() -> None:
    validators = SchemaValidators()
    entry = tool({"type": "objekt"})
    validators.check_arguments(entry, {})
    validators.check_arguments(entry, {})
    assert validators.compilations == 1


OUTPUT = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}


def test_structured_content_matching_the_output_schema_has_no_problems() -> None:
    result = {"content": [], "structuredContent": {"total": 3.5}}
    assert SchemaValidators().check_structured_content(tool(output_schema=OUTPUT), result) == []


def test_structured_content_not_matching_the_output_schema_is_detected() -> None:
    result = {"content": [], "structuredContent": {"total": "lots"}}
    problems = SchemaValidators().check_structured_content(tool(output_schema=OUTPUT), result)
    assert problems == ["structuredContent.total: 'lots' is not of type 'number'"]


def test_missing_structured_content_is_a_problem_when_an_output_schema_is_declared() -> None:
    problems = SchemaValidators().check_structured_content(tool(output_schema=OUTPUT), {"content": []})
    assert problems == ["structuredContent is missing, but the tool declares an outputSchema"]


def test_an_error_result_may_leave_structured_content_out() -> None:
    result = {"content": [{"type": "text", "text": "boom"}], "isError": True}
    assert SchemaValidators().check_structured_content(tool(output_schema=OUTPUT), result) == []


def test_without_an_output_schema_structured_content_is_not_checked() -> None:
    assert SchemaValidators().check_structured_content(tool(), {"structuredContent": 5}) == []


def test_an_invalid_output_schema_is_one_problem() -> None:
    problems = SchemaValidators().check_structured_content(
        tool(output_schema={"type": 5}), {"structuredContent": {}}
    )
    assert len(problems) == 1
    assert problems[0].startswith("the tool's outputSchema is invalid: type: 5 is not valid")


def test_a_schema_that_accepts_any_object_is_not_run_but_a_non_object_still_fails() -> None:
    validators = SchemaValidators()
    permissive = tool({"type": "object", "additionalProperties": True})
    assert validators.check_arguments(permissive, {"anything": [1, {"x": None}]}) == []
    assert validators.check_arguments(permissive, ["not", "an", "object"]) != []  # type: ignore[arg-type]
    strict = tool({"type": "object", "additionalProperties": False})
    assert validators.check_arguments(strict, {"anything": 1}) != []


def test_a_check_says_whether_its_schema_holds_a_regular_expression_only_re_can_run() -> None:
    validators = SchemaValidators()

    def check(schema: dict[str, Any]) -> Check:
        compiled = validators.arguments_check(tool(schema))
        assert compiled is not None
        return compiled

    assert not check({"type": "object", "properties": {"a": {"type": "string"}}}).backtracks
    assert not check({"properties": {"a": {"anyOf": [{"pattern": "^x+$"}]}}}).backtracks  # RE2 runs it
    assert not check({"properties": {"a": {"pattern": "^(a+)+$"}}}).backtracks  # RE2: linear
    assert check({"properties": {"a": {"anyOf": [{"pattern": "^(x+)\\1$"}]}}}).backtracks  # backreference
    assert check({"patternProperties": {"^(?!x)": {}}}).backtracks  # lookahead
    assert check({"properties": {"a": {"pattern": "^(a+)+(?<!b)$"}}})({"a": "b"})  # and it still checks


def test_a_tool_without_an_input_schema_has_no_check() -> None:
    assert SchemaValidators().arguments_check(tool(None)) is None
