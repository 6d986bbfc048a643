"""Tool overrides: the listed schema and the forwarded arguments, shaped from one override."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.catalog.shaping import ToolShape, problems, shape_arguments, shape_definition

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "owner": {"type": "string"},
        "repo": {"type": "string"},
        "per_page": {"type": "integer"},
        "debug": {"type": "boolean"},
    },
    "required": ["owner", "repo", "per_page"],
    "additionalProperties": False,
}
TOOL = {"name": "list_issues", "description": "server's words", "inputSchema": SCHEMA}
SHAPE = ToolShape(
    title="Issues",
    description="ours",
    fixed={"owner": "acme"},
    defaults={"per_page": 50},
    hidden=frozenset({"debug"}),
)


def test_the_listed_schema_hides_fixed_and_hidden_arguments_and_shows_defaults() -> None:
    shaped = shape_definition(TOOL, SHAPE)
    assert (shaped["title"], shaped["description"]) == ("Issues", "ours")
    assert shaped["inputSchema"] == {
        "type": "object",
        "properties": {"repo": {"type": "string"}, "per_page": {"type": "integer", "default": 50}},
        "required": ["repo"],
        "additionalProperties": False,
    }
    assert TOOL["inputSchema"] is SCHEMA
    assert SCHEMA["required"] == ["owner", "repo", "per_page"]  # what the server sent is untouched


def test_the_forwarded_arguments_carry_the_fixed_value_and_the_defaults() -> None:
    assert shape_arguments({"repo": "r"}, SHAPE) == {"repo": "r", "per_page": 50, "owner": "acme"}
    assert shape_arguments({"repo": "r", "per_page": 5}, SHAPE) == {
        "repo": "r",
        "per_page": 5,
        "owner": "acme",
    }


@pytest.mark.parametrize("smuggled", [{"owner": "evil"}, {"owner": "acme"}, {"debug": True}, {"owner": None}])
def test_a_caller_that_sets_a_fixed_or_hidden_argument_is_refused_not_overwritten(
    smuggled: dict[str, Any],
) -> None:
    refusal = shape_arguments({"repo": "r", **smuggled}, SHAPE)
    assert isinstance(refusal, str)
    assert repr(next(iter(smuggled))) in refusal


def test_an_override_that_does_not_fit_the_schema_names_server_tool_and_argument() -> None:
    shape = ToolShape(fixed={"org": "acme"}, hidden=frozenset({"repo"}))
    found = problems("github", "list_issues", TOOL, shape)
    assert found == [
        "server 'github', tool 'list_issues': the override names argument 'org', which its inputSchema "
        "does not have (it has: 'owner', 'repo', 'per_page', 'debug')",
        "server 'github', tool 'list_issues': argument 'repo' is required by the server, so it cannot "
        "be hidden; give it a fixed value instead",
    ]
    assert problems("github", "list_issues", TOOL, SHAPE) == []
    assert problems("s", "t", {"name": "t", "inputSchema": "nope"}, SHAPE) != []


def test_an_override_without_argument_shaping_leaves_the_arguments_alone() -> None:
    shape = ToolShape(title="T")
    assert shape_arguments({"owner": "x"}, shape) == {"owner": "x"}
    assert shape_definition(TOOL, shape)["inputSchema"] is SCHEMA


def test_a_held_tool_is_offered_as_an_optional_task_unless_it_says_it_may_run_as_one() -> None:
    from proxy.catalog.shaping import offered_as_task, runs_as_task

    plain = {"name": "t", "inputSchema": {"type": "object"}}
    offered = offered_as_task(plain)
    assert offered["execution"] == {"taskSupport": "optional"}
    assert "execution" not in plain  # the server's definition is not changed
    forbidden = {"name": "t", "execution": {"taskSupport": "forbidden", "other": 1}}
    assert offered_as_task(forbidden)["execution"] == {"taskSupport": "optional", "other": 1}
    required = {"name": "t", "execution": {"taskSupport": "required"}}
    assert offered_as_task(required) == required
    assert runs_as_task(required)
    assert not runs_as_task({"name": "t", "execution": "optional"})  # a hostile shape: forbidden
    assert offered_as_task({"name": "t", "execution": "junk"})["execution"] == {"taskSupport": "optional"}
