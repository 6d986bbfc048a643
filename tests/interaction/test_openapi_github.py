"""End to end at scale: GitHub's published OpenAPI document (npm ``@octokit/openapi``, about
1,200 operations) served as tools by a real ``manifold serve``, calling a mock of the API that
Prism (npm ``@stoplight/prism-cli``) makes from the same document, with responses generated from
its schemas. Driven by the official SDK client in both eras: the whole list page by page on
``/mcp``, and search and ``call_tool`` on an endpoint with progressive discovery."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy.protocol import versions
from tests.fixtures.spawn import free_port, running_http_process
from tests.interaction.harness import NPM_BIN, OBSERVER, REPO, RunningManifold, running_manifold
from tests.interaction.test_openapi import text_of
from tests.interaction.test_policy import connect

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GITHUB = (
    REPO / "tests" / "npm" / "node_modules" / "@octokit" / "openapi" / "generated" / "api.github.com.json"
)
V = versions.LATEST_STATELESS
ERAS = ["legacy", V]


def operation_count() -> int:
    document = json.loads(GITHUB.read_bytes())
    methods = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
    return sum(1 for item in document["paths"].values() for method in item if method in methods)


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp: Path = tmp_path_factory.mktemp("github")
    port = free_port()
    prism = [
        str(NPM_BIN / "prism"),
        "mock",
        "--dynamic",
        "--seed",
        "manifold",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        str(GITHUB),
    ]
    config: dict[str, Any] = {
        "auth": OBSERVER,
        "servers": {
            "github": {
                "url": f"http://127.0.0.1:{port}",
                "openapi": {"document": str(GITHUB)},
                "connect_timeout": 120,
            }
        },
        "endpoints": {"find": {"discovery": {"mode": "search", "semantic": "off"}}},
    }
    async with (
        running_http_process(prism, port, startup_timeout=180),
        running_manifold(tmp, config) as running,
    ):
        yield running


@pytest.mark.parametrize("era", ERAS)
async def test_every_operation_is_listed_page_by_page(manifold: RunningManifold, era: str) -> None:
    names: list[str] = []
    pages = 0
    async with connect(manifold.url, mode=era, cache=None) as client:
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            names += [tool.name for tool in page.tools]
            pages += 1
            if (cursor := page.next_cursor) is None:
                break
    assert pages > 1
    assert len(names) == len(set(names)) == operation_count()
    assert {"github.issues_create", "github.repos_get", "github.pulls_list"} <= set(names)


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_reaches_the_mock_and_comes_back_structured(manifold: RunningManifold, era: str) -> None:
    async with connect(manifold.url, mode=era, cache=None) as client:
        result = await client.call_tool(
            "github.issues_get", {"owner": "octocat", "repo": "hello", "issue_number": 1}
        )
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    assert isinstance(result.structured_content["number"], int)


async def test_search_finds_an_operation_and_call_tool_calls_it(manifold: RunningManifold) -> None:
    async with connect(manifold.url.replace("/mcp", "/mcp/find"), mode="legacy") as client:
        found = await client.call_tool(
            "manifold.search_tools", {"query": "create a comment on an issue", "limit": 10}
        )
        hits = [tool["name"] for tool in json.loads(text_of(found))["tools"]]
        assert "github.issues_create-comment" in hits, hits
        called = await client.call_tool(
            "manifold.call_tool",
            {
                "name": "github.issues_create-comment",
                "arguments": {"owner": "octocat", "repo": "hello", "issue_number": 1, "body": {"body": "hi"}},
            },
        )
    assert not called.is_error, text_of(called)
    assert '"body"' in text_of(called)
