"""The meta-tools' names, definitions, argument parsing and results (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.catalog.meta_tools import (
    MetaArgumentError,
    MetaNames,
    describe_result,
    meta_definitions,
    parse_call,
    parse_describe,
    parse_search,
    search_result,
)
from proxy.catalog.search import Hit
from tests.protocol.schemas import validator

NAMES = MetaNames.with_separator(".")


def search(arguments: Any) -> tuple[str, int]:
    return parse_search(arguments, default_limit=8, max_limit=20, max_query_chars=100)


def test_the_names_live_in_the_reserved_namespace_of_the_separator() -> None:
    assert MetaNames("manifold.search_tools", "manifold.describe_tools", "manifold.call_tool") == NAMES
    assert MetaNames.with_separator("__").call == "manifold__call_tool"
    assert "manifold.call_tool" in NAMES
    assert "call_tool" not in NAMES


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_the_definitions_are_valid_tools_of_both_revisions(version: str) -> None:
    definitions = meta_definitions(NAMES, default_limit=8, max_limit=20, max_names=5)
    assert [d["name"] for d in definitions] == [NAMES.search, NAMES.describe, NAMES.call]
    for definition in definitions:
        validator(version, "Tool")(definition)


def test_search_arguments_default_and_bounds() -> None:
    assert search({"query": "x"}) == ("x", 8)
    assert search({"query": "x", "limit": 20}) == ("x", 20)
    for bad in [
        None,
        {},
        {"query": 1},
        {"query": "x", "limit": 0},
        {"query": "x", "limit": 21},
        {"query": "x", "limit": 2.5},
        {"query": "x", "limit": True},
        {"query": "y" * 101},
        [1],
    ]:
        with pytest.raises(MetaArgumentError):
            search(bad)
    with pytest.raises(
        MetaArgumentError, match=r"the query is 101 characters; at most 100 .*max_query_chars"
    ):
        search({"query": "y" * 101})


def test_describe_and_call_arguments() -> None:
    assert parse_describe({"names": ["a", "b", "a"]}, max_names=3) == ("a", "b")
    for bad in [{}, {"names": []}, {"names": "a"}, {"names": [1]}, {"names": ["a"] * 4}]:
        with pytest.raises(MetaArgumentError, match="describe_tools needs"):
            parse_describe(bad, max_names=3)
    assert parse_call({"name": "gh.x", "arguments": {"a": 1}}) == ("gh.x", {"a": 1})
    assert parse_call({"name": "gh.x"}) == ("gh.x", None)
    with pytest.raises(MetaArgumentError, match='call_tool needs a string "name"'):
        parse_call({"arguments": {}})


def text(result: dict[str, Any]) -> Any:
    assert result["isError"] is False
    return json.loads(result["content"][0]["text"])


def test_a_search_result_is_names_titles_and_first_lines_cut_short() -> None:
    definitions: dict[str, dict[str, Any]] = {
        "a.one": {
            "name": "a.one",
            "title": "One",
            "description": "First line.\nSecond line.",
            "inputSchema": {},
        },
        "a.two": {"name": "a.two", "description": "x" * 500},
    }
    result = search_result(
        [Hit("a.two", 2.0, ("name",)), Hit("a.one", 1.0, ("description", "meaning"))], definitions
    )
    found = text(result)
    assert found == result["structuredContent"]  # the same JSON, as text for older clients
    assert found["tools"][0] == {
        "name": "a.two",
        "description": "x" * 239 + "…",
        "score": 2.0,
        "matched": ["name"],
    }
    assert found["tools"][1] == {
        "name": "a.one",
        "title": "One",
        "description": "First line.",
        "score": 1.0,
        "matched": ["description", "meaning"],
    }


def test_describe_lists_what_it_does_not_know_without_saying_why() -> None:
    definitions = {"a.one": {"name": "a.one", "inputSchema": {"type": "object"}}}
    assert text(describe_result(["a.one", "a.hidden", "a.missing"], definitions)) == {
        "tools": [{"name": "a.one", "inputSchema": {"type": "object"}}],
        "unknown": ["a.hidden", "a.missing"],
    }
    assert text(describe_result(["a.one"], definitions)) == {"tools": [definitions["a.one"]]}


def test_the_reference_shows_the_output_schemas_as_declared() -> None:
    from pathlib import Path

    from proxy.catalog.meta_tools import DESCRIBE_OUTPUT, SEARCH_OUTPUT

    reference = (Path(__file__).parents[2] / "docs" / "reference" / "search.md").read_text()
    assert json.dumps(SEARCH_OUTPUT, indent=2) in reference
    assert json.dumps(DESCRIBE_OUTPUT, indent=2) in reference
