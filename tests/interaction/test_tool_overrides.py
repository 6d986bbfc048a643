"""End to end: tool overrides (issue #18), attacked by a caller that tries to set what the
operator fixed, in both protocol revisions, over the whole catalog and a named endpoint.

Behind a real ``manifold serve``: the SDK fixture server ``alpha``, whose ``echo`` (it answers the
arguments it got) is given a GitHub-like schema (``owner`` and ``repo`` required). The override
renames it ``issues``, rewords it, fixes ``owner: acme``, defaults ``per_page`` to 30 and hides
``debug``. ``beta``'s override names an argument its ``echo`` does not have: that tool is
withheld, and the log names server, tool and argument.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.interaction.harness import RunningManifold, fixture_server, running_manifold
from tests.interaction.test_policy import audit_path, audited, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SCHEMA = {
    "type": "object",
    "properties": {
        "owner": {"type": "string"},
        "repo": {"type": "string"},
        "per_page": {"type": "integer"},
        "debug": {"type": "boolean"},
    },
    "required": ["owner", "repo"],
}
MODES = ["legacy", "auto"]  # a 2025-11-25 session; 2026-07-28 stateless


def with_echo_schema(name: str) -> dict[str, Any]:
    entry = fixture_server(name, tools=0)
    return {**entry, "args": [*entry["args"], "--echo-schema", orjson.dumps(SCHEMA).decode()]}


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    config = {
        "policy": {"audit": {"path": "audit.jsonl"}},
        "servers": {
            "alpha": {
                **with_echo_schema("alpha"),
                "tools": {
                    "echo": {
                        "name": "issues",
                        "title": "Issues",
                        "description": "Lists acme's issues.",
                        "annotations": {"readOnlyHint": True},
                        "arguments": {
                            "owner": {"fixed": "acme"},
                            "per_page": {"default": 30},
                            "debug": {"hidden": True},
                        },
                    }
                },
            },
            "beta": {
                **with_echo_schema("beta"),
                "tools": {"echo": {"arguments": {"org": {"fixed": "acme"}}}},
            },
        },
        "endpoints": {"claude": {"naming": {"separator": "__", "max_length": 64}}},
    }
    async with running_manifold(tmp_path_factory.mktemp("overrides"), config) as running:
        yield running


def at(manifold: RunningManifold, endpoint: str) -> str:
    return f"{manifold.url}/{endpoint}" if endpoint else manifold.url


ENDPOINTS = [("", "alpha.issues"), ("claude", "alpha__issues")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("endpoint", "name"), ENDPOINTS)
async def test_the_listed_tool_has_the_overrides_name_words_and_schema(
    manifold: RunningManifold, mode: str, endpoint: str, name: str
) -> None:
    async with Client(at(manifold, endpoint), mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools(cache_mode="bypass")).tools}
    assert name in tools
    assert not {n for n in tools if n.endswith("echo")}  # renamed; beta's is withheld
    tool = tools[name]
    assert (tool.title, tool.description) == ("Issues", "Lists acme's issues.")
    assert tool.input_schema["properties"] == {
        "repo": {"type": "string"},
        "per_page": {"type": "integer", "default": 30},
    }
    assert tool.input_schema["required"] == ["repo"]
    assert tool.annotations is not None
    assert tool.annotations.read_only_hint is True


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("endpoint", "name"), ENDPOINTS)
async def test_a_fixed_argument_reaches_the_server_and_the_caller_cannot_set_it(
    manifold: RunningManifold, mode: str, endpoint: str, name: str
) -> None:
    async with Client(at(manifold, endpoint), mode=mode) as client:
        answer = json.loads(text_of(await client.call_tool(name, {"repo": "widgets"})))
        assert answer == {
            "server": "alpha",
            "tool": "echo",
            "arguments": {"repo": "widgets", "per_page": 30, "owner": "acme"},
        }
        chosen = json.loads(text_of(await client.call_tool(name, {"repo": "w", "per_page": 5})))
        assert chosen["arguments"] == {"repo": "w", "per_page": 5, "owner": "acme"}
        for smuggled in ({"owner": "evil"}, {"owner": "acme"}, {"debug": True}):
            refused = await client.call_tool(name, {"repo": "widgets", **smuggled})
            assert refused.is_error
            assert f"has no argument {next(iter(smuggled))!r}" in text_of(refused)
            assert (refused.meta or {}).get("dev.manifold/outcome") == "invalid_arguments"
    # Every attempt is in the audit log, refused before it reached the server.
    records = await audited(
        audit_path(manifold), 1, where=lambda r: r["name"] == name and r["outcome"] == "invalid"
    )
    assert [r for r in records if r["name"] == name and r["outcome"] == "invalid"]


@pytest.mark.parametrize("mode", MODES)
async def test_an_override_naming_an_argument_the_server_lacks_withholds_the_tool(
    manifold: RunningManifold, mode: str
) -> None:
    expected = (
        "server 'beta', tool 'echo': the override names argument 'org', which its inputSchema does not have"
    )
    assert expected in manifold.log()
    async with Client(manifold.url, mode=mode) as client:
        assert "beta.echo" not in {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
        try:
            withheld = await client.call_tool("beta.echo", {"repo": "r", "owner": "x"})
        except MCPError as exc:  # pragma: no cover - an answer of either kind must not reach beta
            pytest.fail(f"expected a withheld-tool result, got {exc}")
        assert withheld.is_error
        assert expected in text_of(withheld)
