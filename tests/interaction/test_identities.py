"""End to end: identities are (source, issuer, subject), never a name alone.

Two JWT issuers (HS256, each its own secret) both issue tokens for ``sub: alice`` with the same
roles, and an API key is named ``ci`` like a token's subject. Against two real ``manifold serve``
replicas sharing ``sessions.secret``, each principal tries to use what the other has: its
rate-limit budget, its session id (on the replica that knows it, and on one that would take it
over), its room under ``max_sessions_per_identity``, a list cursor cut for it, and the
``requestState`` of a call parked for it. Each attempt gets what a stranger's would.
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx2
import jwt
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from proxy.protocol import stateless, versions
from tests.inbound.memory_server import INITIALIZE
from tests.interaction.harness import REPO, RunningManifold, fixture_server, post, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OURS = "https://id.manifold.test"
THEIRS = "https://partners.manifold.test"
SECRETS = {OURS: "our-hs256-secret-of-at-least-32-bytes!!", THEIRS: "their-hs256-secret-of-32-bytes-or-more"}
CI_KEY = "mfd_ci-identity-test-key-0123456789abcdefghijk"
SESSION_SECRET = "identities-replicas-share-this-secret-32+"
V = versions.LATEST_STATELESS
ELICIT = "fx.test_input_required_result_elicitation"
HANDSHAKE_FIXTURE = {
    "command": sys.executable,
    "args": ["-m", "tests.conformance_modern.fixture_server", "--era", "legacy", "--transport", "stdio"],
    "cwd": str(REPO),
}
POLICY = """\
version: 1
default: deny
rules:
  - id: staff-everything
    effect: allow
    match: {roles: [staff]}
limits:
  - id: per-caller
    rate: 1/hour
    burst: 1
    per: [identity]
    match: {tools: ["alpha.tool_*"]}
"""
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


def token(issuer: str, subject: str = "alice") -> str:
    now = int(time.time())
    claims = {"sub": subject, "iss": issuer, "iat": now, "exp": now + 600, "roles": ["staff"]}
    return jwt.encode(claims, SECRETS[issuer], algorithm="HS256")


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def config(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    return {
        "auth": {
            "api_keys": [
                {
                    "name": "ci",
                    "key": "sha256:" + hashlib.sha256(CI_KEY.encode()).hexdigest(),
                    "roles": ["staff"],
                }
            ],
            "jwt": [{"issuer": issuer, "secret": secret} for issuer, secret in SECRETS.items()],
        },
        "sessions": {"secret": SESSION_SECRET},
        "catalog": {"page_size": 2},
        "limits": {"max_sessions_per_identity": 1},
        "policy": {"files": ["policy.yaml"], "audit": {"path": "audit.jsonl"}},
        "servers": {"alpha": fixture_server("alpha", tools=4, page_size=10), "fx": HANDSHAKE_FIXTURE},
    }


@pytest.fixture(scope="module")
async def replicas(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[list[RunningManifold]]:
    async with AsyncExitStack() as stack:
        running = []
        for index in range(2):
            tmp_path = tmp_path_factory.mktemp(f"identities-{index}")
            running.append(await stack.enter_async_context(running_manifold(tmp_path, config(tmp_path))))
        yield running


@asynccontextmanager
async def client_with(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """The SDK client, sending ``headers`` on every request it makes."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def opened(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> str:
    """A 2025-11-25 session opened with ``headers``' credential; its id."""
    status, answer, body = await post(http, url, INITIALIZE, headers)
    assert status == 200, body
    session = answer["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    status, _, _ = await post(http, url, initialized, {**headers, "Mcp-Session-Id": session})
    assert status == 202
    return session


async def ping(http: aiohttp.ClientSession, url: str, session: str, headers: dict[str, str]) -> int:
    status, _, _ = await post(http, url, PING, {**headers, "Mcp-Session-Id": session})
    return status


async def audit_records(manifold: RunningManifold, name: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` audit records of identities named ``name`` (written a moment after
    the answers left, by a worker thread)."""
    path = manifold.log_path.parent / "audit.jsonl"
    with anyio.fail_after(10):
        while True:
            lines = path.read_bytes().splitlines() if path.exists() else []
            records = [r for r in map(orjson.loads, lines) if r["identity"] == name]
            if len(records) >= count:
                return records[:count]
            await anyio.sleep(0.02)


def limited(result: Any) -> bool:
    return bool(result.is_error) and "Rate limit 'per-caller' exceeded" in result.content[0].text


async def test_one_issuers_alice_does_not_spend_another_issuers_alices_rate_limit(
    replicas: list[RunningManifold],
) -> None:
    url = replicas[0].url
    async with client_with(url, bearer(token(OURS))) as ours:
        assert not (await ours.call_tool("alpha.tool_000", {})).is_error
        assert limited(await ours.call_tool("alpha.tool_000", {}))  # her one call an hour is spent
    async with client_with(url, bearer(token(THEIRS))) as theirs:
        # Same sub, same name, same roles; another issuer: another budget.
        assert not (await theirs.call_tool("alpha.tool_000", {})).is_error
    records = await audit_records(replicas[0], "alice", 3)
    assert [(r["issuer"], r["subject"], r["outcome"]) for r in records] == [
        (OURS, "alice", "ok"),
        (OURS, "alice", "rate_limited"),
        (THEIRS, "alice", "ok"),
    ]


async def test_a_token_named_like_an_api_key_has_neither_its_budget_nor_its_session(
    replicas: list[RunningManifold],
) -> None:
    url = replicas[0].url
    key = {"X-API-Key": CI_KEY}
    async with client_with(url, key) as ci:
        assert not (await ci.call_tool("alpha.tool_001", {})).is_error
        assert limited(await ci.call_tool("alpha.tool_001", {}))
    impostor = bearer(token(OURS, subject="ci"))  # the name "ci", the role "staff": a token's
    async with client_with(url, impostor) as client:
        assert not (await client.call_tool("alpha.tool_001", {})).is_error
    async with aiohttp.ClientSession() as http:
        session = await opened(http, url, key)
        assert await ping(http, url, session, impostor) == 403
        assert await ping(http, url, session, key) == 200


async def test_a_session_opened_by_one_issuers_alice_is_refused_to_another_on_every_replica(
    replicas: list[RunningManifold],
) -> None:
    first, second = (manifold.url for manifold in replicas)
    ours, theirs = bearer(token(OURS)), bearer(token(THEIRS))
    async with aiohttp.ClientSession() as http:
        session = await opened(http, first, ours)
        assert await ping(http, first, session, theirs) == 403  # the replica that holds it
        async with http.delete(first, headers={**theirs, "Mcp-Session-Id": session}) as response:
            assert response.status == 403
        # A replica that does not hold it would take it over from its signed id; not for them.
        assert await ping(http, second, session, theirs) == 404
        assert await ping(http, second, session, ours) == 200
        assert await ping(http, first, session, ours) == 200  # the refused DELETE did not end it


async def test_another_issuers_alice_does_not_use_up_alices_sessions(replicas: list[RunningManifold]) -> None:
    # limits.max_sessions_per_identity is 1: were both one identity, the second initialize would
    # end the first (idle) session to make room.
    url = replicas[0].url
    ours, theirs = bearer(token(OURS)), bearer(token(THEIRS))
    async with aiohttp.ClientSession() as http:
        mine = await opened(http, url, ours)
        await opened(http, url, theirs)
        assert await ping(http, url, mine, ours) == 200


async def test_a_list_cursor_cut_for_one_issuers_alice_is_refused_to_anothers(
    replicas: list[RunningManifold],
) -> None:
    url = replicas[0].url
    async with client_with(url, bearer(token(OURS))) as ours:
        page = await ours.list_tools(cache_mode="bypass")
    assert len(page.tools) == 2
    assert page.next_cursor is not None
    async with client_with(url, bearer(token(THEIRS))) as theirs:
        with pytest.raises(MCPError) as refused:
            await theirs.list_tools(cursor=page.next_cursor, cache_mode="bypass")
        assert refused.value.error.code == -32602
        assert len((await theirs.list_tools(cache_mode="bypass")).tools) == 2  # their own view works


def call(request_id: int, answers: dict[str, Any] | None = None, state: str | None = None) -> dict[str, Any]:
    meta = {
        stateless.PROTOCOL_VERSION_KEY: V,
        stateless.CLIENT_CAPABILITIES_KEY: {"elicitation": {}},
        stateless.CLIENT_INFO_KEY: {"name": "raw", "version": "0"},
    }
    params: dict[str, Any] = {"name": ELICIT, "arguments": {}, "_meta": meta}
    if answers is not None:
        params["inputResponses"] = answers
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def modern(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, Any]:
    routed = {"MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": ELICIT, **headers}
    status, _, answer = await post(http, url, body, routed)
    return status, answer


async def test_a_request_state_issued_to_one_issuers_alice_is_refused_to_anothers(
    replicas: list[RunningManifold],
) -> None:
    url = replicas[0].url
    ours, theirs = bearer(token(OURS)), bearer(token(THEIRS))
    async with aiohttp.ClientSession() as http:
        status, answer = await modern(http, url, call(1), ours)
        assert status == 200, answer
        ((question, _),) = answer["result"]["inputRequests"].items()
        state = answer["result"]["requestState"]
        hijack = {question: {"action": "accept", "content": {"name": "Mallory"}}}
        status, refused = await modern(http, url, call(2, hijack, state), theirs)
        assert (status, refused["error"]["code"]) == (400, -32602)
        assert refused["error"]["data"] == {"reason": "invalid_request_state"}
        answer_ = {question: {"action": "accept", "content": {"name": "Ada"}}}
        status, done = await modern(http, url, call(3, answer_, state), ours)
    assert status == 200
    assert done["result"]["content"][0]["text"] == "Hello, Ada!"  # still hers, unanswered by them
