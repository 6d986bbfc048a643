"""End to end: who may connect to a real ``manifold serve``, and as whom.

API keys (``Authorization: Bearer`` and ``X-API-Key``), HS256 JWTs made with PyJWT, and what a
client gets back for a missing, invalid or expired credential (401 with an RFC 6750 challenge),
or for using a session with a credential other than the one that made it (403). The identity a
credential proves is checked through what the policy lets it see, and through the audit log.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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

from tests.fixtures.fixture_server import Catalog
from tests.interaction.harness import RunningManifold, fixture_server, post, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ALICE_KEY = "mfd_alice-test-key-0123456789abcdefghijklmnopq"  # staff
BOB_KEY = "mfd_bob-test-key-0123456789abcdefghijklmnopqrstu"  # reader
ISSUER = "https://id.manifold.test"
AUDIENCE = "manifold"
SECRET = "an-hs256-test-secret-of-at-least-32-bytes!"
CHALLENGE = 'Bearer realm="manifold"'
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
ALL_ALPHA = [f"alpha.{tool.name}" for tool in Catalog("alpha", 2, 10).tools()]
POLICY = """\
version: 1
default: deny
rules:
  - id: staff-everything
    effect: allow
    match: {roles: [staff]}
  - id: readers-echo
    effect: allow
    match: {roles: [reader], tools: ["alpha.echo"]}
  - id: anonymous-numbered-tools
    effect: allow
    match: {sources: [anonymous], tools: ["alpha.tool_*"]}
"""


def stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def token(
    subject: str = "jay",
    roles: list[str] | None = None,
    *,
    expires_in: float = 600,
    audience: str = AUDIENCE,
    issuer: str = ISSUER,
    secret: str = SECRET,
) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": subject,
        "iss": issuer,
        "aud": audience,
        "iat": now,
        "exp": now + int(expires_in),
        "realm_access": {"roles": roles if roles is not None else []},
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def auth_config(tmp_path: Path, **anonymous: Any) -> dict[str, Any]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    return {
        "auth": {
            "anonymous": anonymous,
            "api_keys": [
                {"name": "alice", "key": stored(ALICE_KEY), "roles": ["staff"]},
                {"name": "bob", "key": stored(BOB_KEY), "roles": ["reader"]},
            ],
            "jwt": [
                {
                    "issuer": ISSUER,
                    "audience": AUDIENCE,
                    "secret": SECRET,
                    "roles_claim": "realm_access.roles",
                    "leeway": 5,
                }
            ],
        },
        "policy": {"files": ["policy.yaml"], "audit": {"path": "audit.jsonl"}},
        "servers": {"alpha": fixture_server("alpha", tools=2, page_size=10)},
    }


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    """Credentials required (configuring any turns anonymous access off)."""
    tmp_path = tmp_path_factory.mktemp("auth")
    async with running_manifold(tmp_path, auth_config(tmp_path)) as running:
        yield running


@pytest.fixture(scope="module")
async def open_manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    """The same, but requests without any credential are let in as the anonymous identity."""
    tmp_path = tmp_path_factory.mktemp("auth-anonymous")
    async with running_manifold(tmp_path, auth_config(tmp_path, enabled=True)) as running:
        yield running


@asynccontextmanager
async def client_with(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """The SDK client, sending ``headers`` on every request it makes."""
    timeout = httpx2.Timeout(30, read=300)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def visible(client: Client) -> list[str]:
    names: list[str] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        names += [tool.name for tool in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            return names


async def audit_records(manifold: RunningManifold, identity: str) -> list[dict[str, Any]]:
    """``identity``'s audit records, once there is one: a worker thread writes them, a moment
    after the call's answer may have left."""
    path = manifold.log_path.parent / "audit.jsonl"
    with anyio.fail_after(10):
        while True:
            lines = path.read_bytes().splitlines() if path.exists() else []
            records = [r for r in map(orjson.loads, lines) if r["identity"] == identity]
            if records:
                return records
            await anyio.sleep(0.02)


async def test_an_api_key_in_authorization_bearer_proves_its_identity(manifold: RunningManifold) -> None:
    async with client_with(manifold.url, bearer(ALICE_KEY)) as client:
        assert await visible(client) == ALL_ALPHA  # staff: everything
        await client.call_tool("alpha.echo", {"via": "bearer-key"})
    [record] = await audit_records(manifold, "alice")
    assert record["name"] == "alpha.echo"
    assert (record["source"], record["roles"]) == ("api_key", ["staff"])


async def test_an_api_key_in_x_api_key_proves_its_identity(manifold: RunningManifold) -> None:
    async with client_with(manifold.url, {"X-API-Key": BOB_KEY}) as client:
        assert await visible(client) == ["alpha.echo"]  # reader: the echo tool only
        await client.call_tool("alpha.echo", {"via": "x-api-key"})
    [record] = await audit_records(manifold, "bob")
    assert record["name"] == "alpha.echo"
    assert (record["source"], record["roles"]) == ("api_key", ["reader"])


async def test_a_request_without_credentials_is_401_with_a_bare_bearer_challenge(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        status, headers, body = await post(http, manifold.url, INITIALIZE)
    assert status == 401
    assert headers["WWW-Authenticate"] == CHALLENGE  # nothing was presented: no error code
    assert "credentials are required" in body["error"]["message"]


async def test_with_anonymous_access_on_a_request_without_credentials_gets_the_anonymous_view(
    open_manifold: RunningManifold,
) -> None:
    async with client_with(open_manifold.url, {}) as client:
        assert await visible(client) == ["alpha.tool_000", "alpha.tool_001"]


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(bearer("mfd_not-a-configured-key-0123456789abcdefghij"), id="unknown-bearer-key"),
        pytest.param({"X-API-Key": "mfd_not-a-configured-key-0123456789abcdefghij"}, id="unknown-x-api-key"),
        pytest.param(bearer(ALICE_KEY[:-1]), id="truncated-key"),
        pytest.param({"Authorization": f"Basic {ALICE_KEY}"}, id="not-bearer-scheme"),
        pytest.param({"Authorization": "Bearer "}, id="empty-bearer"),
        pytest.param(
            bearer(token(secret="another-secret-that-is-32-bytes-long!!")), id="jwt-wrong-signature"
        ),
        pytest.param(bearer(token(issuer="https://evil.example")), id="jwt-untrusted-issuer"),
        pytest.param(bearer("aaa.bbb.ccc"), id="jwt-malformed"),
        pytest.param({**bearer(ALICE_KEY), "X-API-Key": ALICE_KEY}, id="two-credentials"),
    ],
)
async def test_a_bad_credential_is_401_invalid_token_even_where_anonymous_access_is_on(
    manifold: RunningManifold, open_manifold: RunningManifold, headers: dict[str, str]
) -> None:
    async with aiohttp.ClientSession() as http:
        for url in (manifold.url, open_manifold.url):
            status, answer, body = await post(http, url, INITIALIZE, headers)
            assert status == 401, url
            assert "mcp-session-id" not in {name.lower() for name in answer}
            challenge = answer["WWW-Authenticate"]
            assert challenge.startswith(f'{CHALLENGE}, error="invalid_token"')
            assert body["error"]["message"].startswith("Unauthorized: ")
            assert ALICE_KEY not in challenge + body["error"]["message"]  # the credential is never echoed


async def test_a_valid_hs256_jwt_is_accepted_and_its_roles_claim_decides_the_view(
    manifold: RunningManifold,
) -> None:
    async with client_with(manifold.url, bearer(token("jay", ["reader"]))) as client:
        assert await visible(client) == ["alpha.echo"]
        await client.call_tool("alpha.echo", {"via": "jwt"})
    async with client_with(manifold.url, bearer(token("kay", ["staff"]))) as client:
        assert await visible(client) == ALL_ALPHA
    async with client_with(manifold.url, bearer(token("lee", []))) as client:
        assert await visible(client) == []  # no role: the default (deny) decides
    [record] = await audit_records(manifold, "jay")
    assert (record["source"], record["roles"], record["name"]) == ("jwt", ["reader"], "alpha.echo")


async def test_an_expired_jwt_is_401_invalid_token_saying_it_expired(manifold: RunningManifold) -> None:
    expired = token("jay", ["staff"], expires_in=-120)  # past exp by more than the 5 s leeway
    async with aiohttp.ClientSession() as http:
        status, headers, body = await post(http, manifold.url, INITIALIZE, bearer(expired))
    assert status == 401
    assert headers["WWW-Authenticate"].startswith(f'{CHALLENGE}, error="invalid_token"')
    assert "expired" in headers["WWW-Authenticate"]
    assert "expired" in body["error"]["message"]


async def test_a_jwt_for_another_audience_is_401(manifold: RunningManifold) -> None:
    elsewhere = token("jay", ["staff"], audience="some-other-service")
    async with aiohttp.ClientSession() as http:
        status, headers, body = await post(http, manifold.url, INITIALIZE, bearer(elsewhere))
    assert status == 401
    assert headers["WWW-Authenticate"].startswith(f'{CHALLENGE}, error="invalid_token"')
    assert "audience" in body["error"]["message"]


async def test_a_session_used_with_another_credential_is_403_and_stays_its_owners(
    manifold: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        status, headers, _ = await post(http, manifold.url, INITIALIZE, bearer(ALICE_KEY))
        assert status == 200
        session = {"Mcp-Session-Id": headers["mcp-session-id"]}
        for other in (
            {"X-API-Key": BOB_KEY},
            bearer(token("alice", ["staff"])),  # same name and roles, but a JWT identity
        ):
            status, _, body = await post(http, manifold.url, PING, {**session, **other})
            assert status == 403, body
            async with http.delete(manifold.url, headers={**session, **other}) as response:
                assert response.status == 403
        status, _, _ = await post(http, manifold.url, PING, session)
        assert status == 401  # a session id is not a credential
        status, _, body = await post(http, manifold.url, PING, {**session, **bearer(ALICE_KEY)})
        assert (status, body["result"]) == (200, {})  # the refused DELETEs did not end it
