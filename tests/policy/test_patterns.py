"""Schema regular expressions run by RE2: linear in the string, the same answers and messages as
jsonschema's own keywords, and a clear line around what only Python's ``re`` can run."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from jsonschema import Draft7Validator, Draft202012Validator

from proxy.policy import SchemaValidators
from proxy.policy.patterns import backtracks, linear_validator, search

from .test_validation import tool


def messages(cls: Any, schema: dict[str, Any], instance: object) -> list[str]:
    return sorted(error.message for error in cls(schema).iter_errors(instance))


def test_a_catastrophic_pattern_is_answered_rightly_in_well_under_a_second() -> None:
    validators = SchemaValidators()
    hostile = tool({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}})
    started = time.perf_counter()
    problems = validators.check_arguments(hostile, {"s": "a" * 10_000 + "!"})  # re: 2**10000 steps
    fine = validators.check_arguments(hostile, {"s": "a" * 10_000})
    elapsed = time.perf_counter() - started
    assert len(problems) == 1
    assert problems[0].startswith("arguments.s: 'aaaa")  # (does not match: cut short)
    assert fine == []
    assert elapsed < 0.5  # a few milliseconds at most: the generous margin is for a busy machine


def test_a_catastrophic_pattern_property_is_linear_too() -> None:
    schema = {"patternProperties": {"^(a+)+$": {"type": "integer"}}, "additionalProperties": False}
    validator = linear_validator(Draft202012Validator)(schema)
    started = time.perf_counter()
    errors = [error.message for error in validator.iter_errors({"a" * 5_000 + "!": 1, "a" * 5_000: "x"})]
    assert time.perf_counter() - started < 0.5
    assert any("does not match any of the regexes: '^(a+)+$'" in error for error in errors)
    assert any("is not of type 'integer'" in error for error in errors)


@pytest.mark.parametrize(
    ("pattern", "texts"),
    [
        (r"^[a-zA-Z0-9_-]+$", ["octo-cat_1", "octo cat", "", "ü"]),
        (r"^\d{4}-\d{2}-\d{2}$", ["2024-01-31", "2024-1-31", "x2024-01-31"]),
        (r"^[a-f0-9]{7,40}$", ["deadbeef", "dead", "DEADBEEF"]),
        (r"^https?://", ["https://example.com", "ftp://x"]),
        (r"^\S+@\S+\.\S+$", ["a@b.co", "a b@c.d"]),
        (r"^(?:[a-z0-9]+(?:-[a-z0-9]+)*)$", ["my-repo", "-repo", "repo-"]),
        (r"^[A-Z]{2,3}$|^$", ["DE", "D", ""]),
        (r"(?i)^[a-z]+$", ["MiXeD", "x1"]),
        (r"\.", ["a.b", "ab"]),
        (r"^[^<>]*$", ["plain", "<script>"]),
        (r"^[À-ÿ ]+$", ["àé ü", "abc"]),
        (r"^[\u4e00-\u9fff]+$", ["中文", "abc"]),
        (r"^\u00e9t\u00e9$", ["été", "ete"]),
        (r"^abc\Z", ["abc", "abcd"]),
    ],
)
def test_common_patterns_answer_as_re_did(pattern: str, texts: list[str]) -> None:
    assert not backtracks({"pattern": pattern})  # all of these run inline, by RE2
    for text in texts:
        assert search(pattern, text) == (re.search(pattern, text) is not None), text


def test_an_escaped_backslash_before_u_stays_a_backslash() -> None:
    assert search(r"^\\u0041$", "\\u0041")
    assert not search(r"^\\u0041$", "A")


def test_where_re2_and_re_differ_the_ecma_reading_wins() -> None:
    # JSON Schema's dialect is ECMA-262: "$" is the very end, \d is ASCII.
    assert not search(r"^[a-z]+$", "abc\n")
    assert re.search(r"^[a-z]+$", "abc\n")
    assert not search(r"^\d+$", "٣")


@pytest.mark.parametrize(
    "schema",
    [
        {"pattern": r"^(a+)\1$"},  # backreference
        {"pattern": r"^(?=a)"},  # lookahead
        {"pattern": r"(?<!x)a"},  # lookbehind
        {"pattern": r"^a{2000}$"},  # a repeat count past RE2's 1000
        {"patternProperties": {r"^(?!x)": {}}},
        # jsonschema changes class at a nested "$schema": the stock keywords would run there.
        {"properties": {"a": {"$schema": "http://json-schema.org/draft-07/schema#", "pattern": "^a$"}}},
        # unevaluatedProperties matches patternProperties with re in a helper of jsonschema's.
        {"patternProperties": {"^a": {}}, "unevaluatedProperties": False},
    ],
)
def test_what_only_re_can_run_is_reported_so_it_runs_where_it_can_be_killed(schema: dict[str, Any]) -> None:
    assert backtracks({"type": "object", "properties": {"x": schema}})


def test_a_schema_without_regular_expressions_never_backtracks() -> None:
    assert not backtracks({"properties": {"$schema": {"type": "string"}}, "unevaluatedProperties": False})
    assert not backtracks({"properties": {"pattern": {"type": "string"}}})  # a property named "pattern"


def test_what_re2_cannot_run_is_still_answered_by_re() -> None:
    assert search(r"^(a+)\1$", "aaaa")
    assert not search(r"^(a+)\1$", "aaa")


@pytest.mark.parametrize("cls", [Draft202012Validator, Draft7Validator])
@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"pattern": "^x"}, "yes"),
        ({"properties": {"a": {"pattern": "^[0-9]+$"}, "b": {"pattern": "z"}}}, {"a": "1x", "b": "q"}),
        ({"patternProperties": {"^n_": {"type": "integer"}}}, {"n_a": "x", "n_b": 1, "m": "y"}),
        ({"patternProperties": {"^n_": {}}, "additionalProperties": False}, {"m": 1, "o": 2, "n_c": 3}),
        ({"patternProperties": {"^n_": {}, "^o": {}}, "additionalProperties": False}, {"m": 1}),
        ({"properties": {"a": {}}, "additionalProperties": False}, {"a": 1, "b": 2, "c": 3}),
        ({"properties": {"a": {}}, "additionalProperties": False}, {"b": 2}),
        ({"patternProperties": {"^n_": {}}, "additionalProperties": {"type": "string"}}, {"n_a": 1, "m": 2}),
        ({"propertyNames": {"pattern": "^[a-z]+$"}}, {"ok": 1, "Not ok": 2}),
    ],
)
def test_messages_are_jsonschemas_own(cls: Any, schema: dict[str, Any], instance: object) -> None:
    assert messages(linear_validator(cls), schema, instance) == messages(cls, schema, instance)
