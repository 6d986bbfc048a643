"""Each user reaches an OAuth-protected server as themself (``credentials.mode: oauth`` and
``exchange``), attacked by the users: a real ``manifold serve``, a real authorization server
(oidc-provider, with a token-exchange grant), SDK servers that require its tokens and answer
with the subject they were called as (tests/fixtures/oauth_server.py), and the official SDK
client in both eras. The test plays each user's browser: it follows the sign-in link Manifold's
URL-mode elicitation carries through the provider's login and consent pages to Manifold's own
``/oauth/callback``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
import anyio
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitRequestParams, ElicitResult, TextContent
from yarl import URL

from proxy.config.loading import load_config
from proxy.credentials.sealing import new_key
from proxy.credentials.stores import open_store
from proxy.protocol import versions
from tests.credentials.world import CLIENT_SECRET, INTROSPECTION_SECRET, Browser, World, world
from tests.fixtures.spawn import free_port
from tests.interaction.harness import MANIFOLD, REPO, RunningManifold, running_manifold, write_config
from tests.ratelimit.redis_server import REDIS_SERVER, running_redis

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
MODES = [pytest.param(V, id="2026-07-28"), pytest.param("legacy", id="2025-11-25")]
KEYS = {
    name: f"mfd_{name}-oauth-credentials-key-0123456789abcdefghij"
    for name in ("alice", "bob", "carol", "dave", "erin", "frank", "mallory", "trent")
}
ADMIN_KEY = "mfd_root-oauth-credentials-admin-key-0123456789abcdefghij"


def _stored(key: str) -> str:
    return f"sha256:{hashlib.sha256(key.encode()).hexdigest()}"


@dataclass
class Served:
    manifold: RunningManifold
    world: World
    config: Path
    audit: Path


def _oauth(client_id: str = "manifold") -> dict[str, Any]:
    return {
        "mode": "oauth",
        "client_id": client_id,
        "client_secret": CLIENT_SECRET,
        "scopes": ["offline_access", "mcp:tools"],
    }


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("credentials-oauth")
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    async with world(
        tmp,
        redirect_uri=f"http://127.0.0.1:{port}/oauth/callback",
        manifold_resource=resource,
        servers=("guarded", "short"),
        ttl={"short": 3},
    ) as running:
        urls = running.servers
        # What lists each server's tools before anybody signed in: a service account's token.
        listing = {
            name: {
                "Authorization": f"Bearer {await running.client_credentials('users-app', CLIENT_SECRET, url)}"
            }
            for name, url in urls.items()
        }
        config: dict[str, Any] = {
            "auth": {
                "api_keys": [
                    {"name": name, "key": f"sha256:{hashlib.sha256(key.encode()).hexdigest()}", "roles": []}
                    for name, key in KEYS.items()
                ]
                + [
                    {
                        "name": "root",
                        "key": f"sha256:{hashlib.sha256(ADMIN_KEY.encode()).hexdigest()}",
                        "roles": ["admin"],
                    }
                ],
                "oauth": {
                    "resource": resource,
                    "authorization_servers": [
                        {
                            "issuer": running.issuer,
                            "introspection": {
                                "client_id": "manifold-introspection",
                                "client_secret": INTROSPECTION_SECRET,
                            },
                        }
                    ],
                    "scopes_supported": ["mcp:tools"],
                },
            },
            "credentials": {"store": "file", "path": str(tmp / "credentials.json"), "key": new_key()},
            "admin": {"roles": ["admin"]},
            "policy": {"audit": {"path": str(tmp / "audit.jsonl")}},
            "servers": {
                "guarded": {"url": urls["guarded"], "headers": listing["guarded"], "credentials": _oauth()},
                "short": {"url": urls["short"], "headers": listing["short"], "credentials": _oauth()},
                # The same server, whose authorization server answers with tokens for elsewhere.
                "liar": {
                    "url": urls["guarded"],
                    "headers": listing["guarded"],
                    "credentials": _oauth("manifold-liar"),
                },
                # The same server again, reached with the caller's own token, exchanged.
                "swapped": {
                    "url": urls["guarded"],
                    "headers": listing["guarded"],
                    "credentials": {
                        "mode": "exchange",
                        "client_id": "manifold",
                        "client_secret": CLIENT_SECRET,
                    },
                },
            },
        }
        config_path = write_config(tmp / "for-cli.yaml", config)
        async with running_manifold(tmp, config, port=port) as manifold:
            yield Served(manifold, running, config_path, tmp / "audit.jsonl")


@dataclass
class Person:
    """A user at their client: asked to sign in, they open the link in their browser (as
    ``login`` at the provider) and say yes."""

    login: str
    answer: str = "accept"
    open_link: bool = True
    asked: list[ElicitRequestParams] = field(default_factory=list)
    pages: list[tuple[int, str]] = field(default_factory=list)

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params)
        url = getattr(params, "url", None)
        if url is not None and self.open_link:
            browser = Browser(self.login, KEYS.get(self.login))
            await browser.authorize(url)
            self.pages.append(browser.page)
        return ElicitResult(action=self.answer)  # type: ignore[arg-type]


@asynccontextmanager
async def client(
    url: str, name: str, mode: str, person: Person | None = None, *, bearer: str | None = None
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer is not None else {"X-API-Key": KEYS[name]}
    options: dict[str, Any] = {"elicitation_callback": person} if person is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None, **options) as session,
    ):
        yield session


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


async def whoami(session: Client, server: str) -> dict[str, Any]:
    with anyio.fail_after(60):
        result = await session.call_tool(f"{server}.whoami", {})
    assert not result.is_error, _text(result)
    found: dict[str, Any] = orjson.loads(_text(result))
    return found


async def credentials_cli(config: Path, *args: str) -> tuple[int, str]:
    result = await anyio.run_process(
        [*MANIFOLD, "credentials", *args, "--config", str(config)], check=False, cwd=REPO, stderr=-2
    )
    return result.returncode, result.stdout.decode()


# ---- signing in, and the server seeing each user ------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_each_user_signs_in_once_and_the_server_sees_each_of_them(served: Served, mode: str) -> None:
    # alice and bob in the modern era, carol and dave in the handshake era: nobody has a token yet.
    first, second = ("alice", "bob") if mode == V else ("carol", "dave")
    one, two = Person(first), Person(second)
    async with (
        client(served.manifold.url, first, mode, one) as a,
        client(served.manifold.url, second, mode, two) as b,
    ):
        seen_a = await whoami(a, "guarded")
        seen_b = await whoami(b, "guarded")
        assert (seen_a["subject"], seen_b["subject"]) == (first, second)
        assert seen_a["client_id"] == "manifold"  # Manifold's client at the AS, on the user's behalf
        [asked] = one.asked
        assert asked.mode == "url"
        assert "guarded" in asked.message
        # Manifold's own start page, which binds the browser to the user before the provider.
        assert urlsplit(asked.url).netloc == urlsplit(served.manifold.url).netloc
        assert urlsplit(asked.url).path == "/oauth/start"
        status, page = one.pages[0]
        assert status == 200
        assert "Signed in" in page
        # Signed in once: the next calls are not asked again.
        assert (await whoami(a, "guarded"))["subject"] == first
        assert len(one.asked) == 1
    kept = await _kept_tokens(served, "guarded", first)
    log = served.manifold.log_path.read_text()
    assert kept["access_token"] not in log
    assert kept["refresh_token"] not in log
    records = [orjson.loads(line) for line in served.audit.read_bytes().splitlines()]
    mine = [r for r in records if r.get("identity") == first and r.get("server") == "guarded"]
    assert mine
    assert all(r.get("credentials") == "oauth" for r in mine)
    assert all("Bearer" not in orjson.dumps(r).decode() for r in records)


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_be_asked_gets_the_link_and_the_call_works_once_followed(
    served: Served, mode: str
) -> None:
    name = "erin" if mode == V else "trent"
    async with client(served.manifold.url, name, mode) as session:  # no elicitation at all
        result = await session.call_tool("short.whoami", {})
        assert result.is_error
        meta = result.model_dump(by_alias=True)["_meta"]
        assert meta["dev.manifold/outcome"] == "sign_in_required"
        link = meta["dev.manifold/sign_in"]
        assert link in _text(result)
        browser = Browser(name, KEYS[name])
        await browser.authorize(link)
        assert browser.page[0] == 200
        assert (await whoami(session, "short"))["subject"] == name


async def test_a_declined_sign_in_reaches_nothing(served: Served) -> None:
    person = Person("mallory", answer="decline", open_link=False)
    async with client(served.manifold.url, "mallory", V, person) as session:
        result = await session.call_tool("guarded.whoami", {})
    assert result.is_error
    assert result.model_dump(by_alias=True)["_meta"]["dev.manifold/outcome"] == "sign_in_required"


# ---- refresh, revoke --------------------------------------------------------------------------------


async def test_an_expired_token_is_refreshed_without_asking_again(served: Served) -> None:
    person = Person("alice")
    async with client(served.manifold.url, "alice", V, person) as session:
        first = await whoami(session, "short")  # signs in (tokens live 3 s)
        assert first["subject"] == "alice"
        asked = len(person.asked)
        await anyio.sleep(3.5)  # past the access token's expiry: the refresh token is used
        second = await whoami(session, "short")
        assert second["subject"] == "alice"
        assert len(person.asked) == asked  # not asked to sign in again


async def test_a_revoked_sign_in_is_asked_for_again(served: Served) -> None:
    person = Person("bob")
    async with client(served.manifold.url, "bob", V, person) as session:
        await whoami(session, "guarded")
        kept = await _kept_tokens(served, "guarded", "bob")
        code, said = await credentials_cli(
            served.config, "revoke", "--server", "guarded", "--identity", "bob"
        )
        assert code == 0, said
        assert await _refresh(served, kept["refresh_token"]) == 400  # revoked at the provider too
        asked = len(person.asked)
        assert (await whoami(session, "guarded"))["subject"] == "bob"
        assert len(person.asked) == asked + 1  # a new sign-in, not the revoked token


async def test_revoking_through_the_admin_api_revokes_at_the_authorization_server(served: Served) -> None:
    """As ``manifold credentials revoke``: the refresh token is revoked at the provider, then forgotten."""
    async with client(served.manifold.url, "frank", V, Person("frank")) as session:
        await whoami(session, "guarded")
    kept = await _kept_tokens(served, "guarded", "frank")
    revoke = {
        "server": "guarded",
        "kind": "oauth",
        "holder": {"source": "api_key", "issuer": "", "subject": "frank"},
    }
    url = served.manifold.url.replace("/mcp", "/admin/api/credentials/revoke")
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as http,
        http.post(url, json=revoke) as got,
    ):
        assert got.status == 200, await got.text()
        answer = orjson.loads(await got.read())
    assert answer["revoked"] is True
    assert answer["at_issuer"]["revoked"] is True, answer  # before: only forgotten here
    assert "access token itself cannot be revoked" in answer["at_issuer"]["note"]  # a JWT, said so
    assert await _refresh(served, kept["refresh_token"]) == 400  # revoked at the provider
    assert CLIENT_SECRET not in str(answer)
    assert kept["refresh_token"] not in str(answer)


async def _kept_tokens(served: Served, server: str, name: str) -> dict[str, Any]:
    config = load_config(served.config, environ={})
    store = open_store(config.credentials, redis_url=config.rate_limits.redis_url)
    try:
        raw = await store.get("oauth", server, ("api_key", "", name))
    finally:
        await store.aclose()
    assert raw is not None
    kept: dict[str, Any] = orjson.loads(raw)
    return kept


async def _refresh(served: Served, refresh_token: str) -> int:
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    auth = {"Authorization": aiohttp.encode_basic_auth("manifold", CLIENT_SECRET)}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{served.world.issuer}/token", data=form, headers=auth) as got,
    ):
        return got.status


# ---- the callback, attacked --------------------------------------------------------------------------


async def _callback(served: Served, query: str) -> tuple[int, str]:
    url = served.manifold.url.replace("/mcp", "/oauth/callback") + "?" + query
    async with aiohttp.ClientSession() as http, http.get(url) as got:
        return got.status, await got.text()


class Hold(Person):
    """Asked to sign in, keeps the link and does not open it."""

    def __init__(self) -> None:
        super().__init__("nobody", answer="decline", open_link=False)


async def _link_for(served: Served, name: str, server: str = "guarded") -> str:
    async with client(served.manifold.url, name, "legacy") as session:
        result = await session.call_tool(f"{server}.whoami", {})
    link: str = result.model_dump(by_alias=True)["_meta"]["dev.manifold/sign_in"]
    return link


async def test_a_forged_or_replayed_state_is_refused(served: Served) -> None:
    status, page = await _callback(served, "code=abc&state=made-up")
    assert status == 400
    assert "did not start this sign-in" in page  # no browser started it
    link = await _link_for(served, "mallory")
    browser = Browser("mallory", KEYS["mallory"])
    landed = f"http://127.0.0.1:{urlsplit(served.manifold.url).port}/oauth/callback"
    await browser.authorize(link, stop_at=landed)
    callback = served.manifold.url.replace("/mcp", "/oauth/callback?") + urlencode(browser.landed)
    assert browser.jar is not None
    kept = {name: morsel.value for name, morsel in browser.jar.filter_cookies(URL(callback)).items()}
    status, _ = await browser.visit(callback)
    assert status == 200  # the first time
    async with aiohttp.ClientSession(cookies=kept) as http, http.get(callback) as got:  # replayed,
        status, page = got.status, await got.text()  # cookie and all
    assert status == 400
    assert "already used" in page


async def test_another_users_code_on_your_state_gets_you_nothing(served: Served) -> None:
    # Mallory takes Carol's sign-in link (its state), signs in herself, and lands Carol's state
    # with her own code: the code is bound to Mallory's own PKCE verifier, so nothing is kept.
    landed = f"http://127.0.0.1:{urlsplit(served.manifold.url).port}/oauth/callback"
    carols = parse_qs(urlsplit(await _link_for(served, "dave", "short")).query)["state"][0]
    browser = Browser("mallory", KEYS["mallory"])
    await browser.authorize(await _link_for(served, "mallory", "short"), stop_at=landed)
    query = f"code={browser.landed['code']}&state={carols}&iss={browser.landed.get('iss', '')}"
    status, page = await browser.visit(served.manifold.url.replace("/mcp", "/oauth/callback?") + query)
    assert status == 400
    assert "did not start this sign-in" in page  # her browser started her own sign-in, not Dave's


async def test_a_sign_in_link_sent_to_another_user_binds_nothing(served: Served) -> None:
    # Mallory sends her link to Alice. Alice, at Manifold's start page, is not Mallory: refused.
    link = await _link_for(served, "mallory", "short")
    alice = Browser("alice", KEYS["alice"])
    await alice.authorize(link)
    status, page = alice.page
    assert status == 403
    assert "for another user" in page
    # Alice's provider would redirect at once (consent given): the callback without the start
    # page's cookie binds nothing either.
    state = parse_qs(urlsplit(link).query)["state"][0]
    status, page = await _callback(served, f"code=whatever&state={state}")
    assert status == 400
    assert "did not start this sign-in" in page
    async with client(served.manifold.url, "mallory", V) as session:
        result = await session.call_tool("short.whoami", {})
    assert result.is_error  # Mallory still has no token


async def test_a_token_for_the_wrong_audience_is_refused_and_not_used(served: Served) -> None:
    person = Person("alice")
    async with client(served.manifold.url, "alice", "legacy", person) as session:
        result = await session.call_tool("liar.whoami", {})
    assert result.is_error  # the sign-in failed: nothing was kept, the call was not made
    status, page = person.pages[0]
    assert status == 400
    assert "not for" in page


# ---- token exchange --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_token_exchange_reaches_the_server_as_the_caller_and_never_with_its_token(
    served: Served, mode: str
) -> None:
    inbound = await served.world.client_credentials("users-app", CLIENT_SECRET, served.manifold.url)
    async with client(served.manifold.url, "users-app", mode, bearer=inbound) as session:
        seen = await whoami(session, "swapped")
    assert seen["subject"] == "users-app"  # the caller, as the AS knows it
    assert seen["client_id"] == "manifold"  # in a token Manifold got by exchange, not the caller's own


async def test_an_api_key_caller_has_nothing_to_exchange(served: Served) -> None:
    async with client(served.manifold.url, "alice", V) as session:
        with pytest.raises(Exception) as refused:  # noqa: PT011 (the SDK's MCPError)
            await session.call_tool("swapped.whoami", {})
    assert "exchanged" in str(refused.value)


# ---- Redis: two replicas, the callback on the other one ------------------------------------------


@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
async def test_a_sign_in_started_on_one_replica_completes_on_the_other_and_both_use_it(
    tmp_path: Path,
) -> None:
    one_port, other_port = free_port(), free_port()
    for directory in ("one", "other"):
        (tmp_path / directory).mkdir()
    callback = f"http://127.0.0.1:{other_port}/oauth/callback"  # where the browser lands: the other
    async with (
        running_redis(tmp_path) as redis,
        world(tmp_path, redirect_uri=callback, servers=("guarded",)) as running,
    ):
        url = running.servers["guarded"]
        listing = await running.client_credentials("users-app", CLIENT_SECRET, url)
        config: dict[str, Any] = {
            "auth": {
                "api_keys": [
                    {"name": "alice", "key": f"sha256:{hashlib.sha256(KEYS['alice'].encode()).hexdigest()}"}
                ]
            },
            "credentials": {
                "store": "redis",
                "redis_url": redis.url,
                "key": new_key(),
                "callback_url": callback,
            },
            "servers": {
                "guarded": {
                    "url": url,
                    "headers": {"Authorization": f"Bearer {listing}"},
                    "credentials": _oauth(),
                }
            },
        }
        async with (
            running_manifold(tmp_path / "one", config, port=one_port) as one,
            running_manifold(tmp_path / "other", config, port=other_port) as other,
        ):
            person = Person("alice")
            async with client(one.url, "alice", "legacy", person) as session:
                assert (await whoami(session, "guarded"))["subject"] == "alice"
            status, page = person.pages[0]
            assert status == 200, page  # the other replica took the state the first one made
            async with client(other.url, "alice", V) as session:  # no elicitation: none needed
                assert (await whoami(session, "guarded"))["subject"] == "alice"
        stored = await _redis_dump(redis.url)
    assert stored
    # Sealed: no token response and no JWT in clear (a JWT's header and payload both begin
    # "eyJ"; sealed bytes may hold "eyJ" by chance, about once in 250,000 places).
    jwt = re.compile(rb"eyJ[A-Za-z0-9_-]{8,}\.eyJ")
    assert not any(b"access_token" in value or jwt.search(value) for value in stored)


async def _redis_dump(url: str) -> list[bytes]:
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter()]
        values = [await client.get(key) for key in keys]
        return [value for value in values if isinstance(value, bytes)]
    finally:
        await client.aclose()
