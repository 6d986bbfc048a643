"""The plain-schema fast check: it only ever says "surely valid", and jsonschema always agrees."""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any, ClassVar

import pytest
from jsonschema import Draft202012Validator

from proxy.policy.plain_schema import plain_check
from proxy.policy.validation import SchemaValidators

ECHO = {
    "type": "object",
    "title": "echoArguments",
    "properties": {
        "text": {"type": "string", "title": "Text"},
        "count": {"type": "integer", "default": 1},
        "ratio": {"type": "number"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "anything": {"description": "no type: any value"},
    },
    "required": ["text"],
}


def test_a_plain_schema_passes_what_conforms_and_sends_everything_else_to_jsonschema() -> None:
    check = plain_check(ECHO)
    assert check is not None
    assert check({"text": "hi"})
    assert check({"text": "hi", "count": 3, "ratio": 0.5, "note": None, "anything": [1], "extra": {}})
    assert not check({})  # a required property missing
    assert not check({"text": 1})
    assert not check({"text": "hi", "count": True})  # a bool is not an integer to JSON Schema
    assert not check({"text": "hi", "ratio": False})
    assert not check({"text": "hi", "count": 1.0})  # an integer to JSON Schema: jsonschema says so
    assert not check(["text"])
    assert not check(OrderedDict(text="hi"))  # not a plain dict: not judged here
    closed = plain_check({**ECHO, "additionalProperties": False})
    assert closed is not None
    assert closed({"text": "hi", "anything": 1})
    assert not closed({"text": "hi", "extra": 1})


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}},
        {"type": "object", "properties": {"a": {"enum": ["x"]}}},
        {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
        {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {}]}}},
        {"type": "object", "properties": {"a": {"anyOf": []}}},
        {"type": "object", "properties": {"a": {"type": "str"}}},
        {"type": ["object", "null"]},
        {"type": "array"},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["a"]},
        {"type": "object", "required": "a"},
        {"type": "object"},  # accepts every object: skipped before this check is asked
    ],
)
def test_anything_outside_the_subset_is_left_to_jsonschema(schema: dict[str, Any]) -> None:
    assert plain_check(schema) is None


_TYPES = ("string", "integer", "number", "boolean", "null", "object", "array")
_VALUES: tuple[Any, ...] = ("s", "", 0, 7, -2, 1.0, 2.5, True, False, None, {}, {"k": 1}, [], [1])


def _random_schema(rng: random.Random) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for name in rng.sample("abcde", rng.randint(0, 5)):
        shape = rng.random()
        if shape < 0.5:
            properties[name] = {"type": rng.choice(_TYPES), "title": name}
        elif shape < 0.7:
            properties[name] = {"type": rng.sample(_TYPES, rng.randint(1, 3))}
        elif shape < 0.9:
            properties[name] = {"anyOf": [{"type": t} for t in rng.sample(_TYPES, rng.randint(1, 3))]}
        else:
            properties[name] = {"description": "any"}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    schema["required"] = rng.sample("abcdef", rng.randint(0, 3))
    if rng.random() < 0.4:
        schema["additionalProperties"] = rng.random() < 0.5
    return schema


def test_whatever_it_calls_valid_jsonschema_calls_valid_over_thousands_of_random_cases() -> None:
    rng = random.Random(20261127)
    fast, judged = 0, 0
    for _ in range(400):
        schema = _random_schema(rng)
        check = plain_check(schema)
        if check is None:
            continue
        validator = Draft202012Validator(schema)
        for _ in range(25):
            instance = {name: rng.choice(_VALUES) for name in rng.sample("abcdefg", rng.randint(0, 5))}
            judged += 1
            if check(instance):
                fast += 1
                assert validator.is_valid(instance), (schema, instance)
    assert judged > 5000
    assert fast > judged // 10  # the fast path is taken, not only ever declined


def test_the_validators_take_the_fast_path_and_still_word_every_problem() -> None:
    class Tool:
        name = "t"
        definition: ClassVar[dict[str, Any]] = {"inputSchema": ECHO}

    validators = SchemaValidators()
    assert validators.check_arguments(Tool(), {"text": "hi", "count": 2}) == []
    assert validators.check_arguments(Tool(), {"text": "hi", "count": 2.0}) == []  # jsonschema's say
    assert sorted(validators.check_arguments(Tool(), {"count": True})) == [
        "arguments.count: True is not of type 'integer'",
        "arguments: 'text' is a required property",
    ]
    compiled = validators.arguments_check(Tool())
    assert compiled is not None
    assert compiled.compiled.surely_valid is not None
