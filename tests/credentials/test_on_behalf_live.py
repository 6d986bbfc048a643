"""The ``oauth`` and ``exchange`` modes' cores against a real authorization server (oidc-provider)
and an SDK server that requires its tokens: sign-in, the server seeing each user, refresh,
revoke, token exchange; and the attacks on the callback."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from proxy.credentials.exchange import Exchanger, ExchangeServer
from proxy.credentials.oauth_client import OAuthClientError
from proxy.credentials.on_behalf import CallbackRefused, OAuthServer, OnBehalf
from proxy.credentials.tokens import MemoryVault, Pending, Sealer, VaultTokens
from proxy.policy.model import Identity
from tests.credentials.world import CLIENT_SECRET, Browser, World, world

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CALLBACK = "http://127.0.0.1:9/oauth/callback"  # never reached: the browser stops there


def person(name: str, issuer: str = "https://idp.example") -> Identity:
    return Identity(name, frozenset(), "oauth", issuer, name)


@pytest.fixture(scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    async with world(
        tmp_path_factory.mktemp("live"),
        redirect_uri=CALLBACK,
        servers=("guarded", "short", "liar"),
        ttl={"short": 2},
        wrong_audience=("liar",),
    ) as running:
        yield running


def on_behalf(live: World) -> OnBehalf:
    configured = {
        name: OAuthServer(
            name,
            live.servers[name],
            client_id="manifold",
            client_secret=CLIENT_SECRET,
            scope="offline_access mcp:tools",
        )
        for name in ("guarded", "short", "liar")
    }
    key = os.urandom(32)
    return OnBehalf(
        configured,
        VaultTokens(MemoryVault(), Sealer(key)),
        Pending(MemoryVault(), Sealer(key)),
        callback_url=CALLBACK,
    )


async def whoami(url: str, token: str) -> dict[str, object]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=20) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("whoami", {})
    assert not result.is_error, result
    found: dict[str, object] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return found


async def complete(flow: OnBehalf, query: Mapping[str, str]) -> tuple[tuple[str, ...], str]:
    """The callback, from the browser that started the sign-in (it holds the cookie)."""
    name, value = flow.cookie(query.get("state", ""))
    return await flow.complete(query, {name: value})


async def sign_in(flow: OnBehalf, identity: Identity, server: str, login: str) -> None:
    started = await flow.begin(identity, server)
    browser = Browser(login)
    await browser.authorize(started.authorize, stop_at=CALLBACK)
    assert browser.landed.get("state") == started.state, browser.landed
    await complete(flow, browser.landed)


async def test_each_user_signs_in_and_the_server_sees_each_of_them(live: World) -> None:
    flow = on_behalf(live)
    alice, bob = person("alice"), person("bob")
    assert await flow.access_token(alice, "guarded") is None  # nothing yet: sign in first
    await sign_in(flow, alice, "guarded", "alice")
    await sign_in(flow, bob, "guarded", "bob")
    seen_a = await whoami(live.servers["guarded"], await flow.access_token(alice, "guarded") or "")
    seen_b = await whoami(live.servers["guarded"], await flow.access_token(bob, "guarded") or "")
    assert (seen_a["subject"], seen_b["subject"]) == ("alice", "bob")


async def test_a_state_is_single_use_and_a_forged_one_opens_nothing(live: World) -> None:
    flow = on_behalf(live)
    alice = person("alice")
    started = await flow.begin(alice, "guarded")
    browser = Browser("alice")
    await browser.authorize(started.authorize, stop_at=CALLBACK)
    await complete(flow, browser.landed)
    with pytest.raises(CallbackRefused, match="unknown, already used or expired"):
        await complete(flow, browser.landed)  # replayed
    with pytest.raises(CallbackRefused, match="unknown, already used or expired"):
        await complete(flow, {**browser.landed, "state": started.state[:-2] + "xx"})  # forged


async def test_a_code_from_another_users_sign_in_does_not_complete_this_one(live: World) -> None:
    # Mallory completes her own sign-in, and replays her code against Alice's state: the code
    # is bound to Mallory's PKCE verifier, so Alice's sign-in stays empty.
    flow = on_behalf(live)
    alice, mallory = person("alice"), person("mallory")
    alices = await flow.begin(alice, "guarded")
    mallorys = await flow.begin(mallory, "guarded")
    browser = Browser("mallory")
    await browser.authorize(mallorys.authorize, stop_at=CALLBACK)
    with pytest.raises(CallbackRefused, match="code was refused"):
        await complete(flow, {**browser.landed, "state": alices.state})
    assert await flow.access_token(alice, "guarded") is None


async def test_a_link_sent_to_another_user_is_refused_at_the_start_and_at_the_callback(
    live: World,
) -> None:
    # Mallory sends Alice her sign-in link. Alice already consented at the provider, which
    # redirects at once: without the start page's cookie the callback must not bind Alice's
    # account to Mallory's identity.
    flow = on_behalf(live)
    alice, mallory = person("alice"), person("mallory")
    mallorys = await flow.begin(mallory, "guarded")
    with pytest.raises(CallbackRefused, match="for another user"):
        await flow.start(mallorys.state, alice)  # Alice opens it: not hers
    assert await flow.start(mallorys.state, mallory) == mallorys.authorize
    browser = Browser("alice")
    await browser.authorize(mallorys.authorize, stop_at=CALLBACK)  # straight to the provider
    with pytest.raises(CallbackRefused, match="did not start this sign-in"):
        await flow.complete(browser.landed, {})  # Alice's browser holds no cookie for it
    name, _ = flow.cookie(mallorys.state)
    with pytest.raises(CallbackRefused, match="did not start this sign-in"):
        await flow.complete(browser.landed, {name: "0" * 64})  # nor a forged one
    assert await flow.access_token(mallory, "guarded") is None


async def test_a_callback_from_another_authorization_server_is_refused(live: World) -> None:
    flow = on_behalf(live)
    alice = person("alice")
    started = await flow.begin(alice, "guarded")
    browser = Browser("alice")
    await browser.authorize(started.authorize, stop_at=CALLBACK)
    with pytest.raises(CallbackRefused, match="iss"):
        await complete(flow, {**browser.landed, "iss": "https://attacker.example"})
    assert await flow.access_token(alice, "guarded") is None


async def test_a_link_opened_by_another_user_of_the_same_provider_is_refused(live: World) -> None:
    # Alice signed in to Manifold at this provider; Bob opens her link and signs in as himself.
    flow = on_behalf(live)
    alice = person("alice", issuer=live.issuer)
    started = await flow.begin(alice, "guarded")
    browser = Browser("bob")
    await browser.authorize(started.authorize, stop_at=CALLBACK)
    with pytest.raises(CallbackRefused, match="somebody else"):
        await complete(flow, browser.landed)
    assert await flow.access_token(alice, "guarded") is None
    await sign_in(flow, alice, "guarded", "alice")  # as herself, it works
    assert await flow.access_token(alice, "guarded") is not None


async def test_a_token_for_the_wrong_audience_is_refused_and_not_kept(live: World) -> None:
    flow = on_behalf(live)
    alice = person("alice")
    started = await flow.begin(alice, "liar")
    browser = Browser("alice")
    await browser.authorize(started.authorize, stop_at=CALLBACK)
    with pytest.raises(CallbackRefused, match="not for"):
        await complete(flow, browser.landed)
    assert await flow.access_token(alice, "liar") is None


async def test_an_expired_token_is_refreshed_and_the_server_still_sees_the_user(live: World) -> None:
    flow = on_behalf(live)
    alice = person("alice")
    await sign_in(flow, alice, "short", "alice")
    first = await flow.access_token(alice, "short")
    kept = await flow.store.get(alice.key, "short")
    assert kept is not None
    assert kept.refresh_token is not None
    assert kept.expires_at is not None
    # Within the refresh margin already (the token lives 2 s): the next call refreshes it.
    second = await flow.access_token(alice, "short")
    assert second is not None
    assert second != first
    assert (await whoami(live.servers["short"], second))["subject"] == "alice"


async def test_revoke_forgets_the_tokens_and_the_user_must_sign_in_again(live: World) -> None:
    flow = on_behalf(live)
    alice = person("alice")
    await sign_in(flow, alice, "guarded", "alice")
    assert await flow.revoke(alice.key, "guarded")
    assert await flow.access_token(alice, "guarded") is None
    assert not await flow.revoke(alice.key, "guarded")


async def test_a_sealed_token_moved_to_another_identity_opens_as_nothing(live: World) -> None:
    from proxy.credentials.tokens import slot

    flow = on_behalf(live)
    alice, mallory = person("alice"), person("mallory")
    await sign_in(flow, alice, "guarded", "alice")
    store = flow.store
    assert isinstance(store, VaultTokens)
    stolen = await store.vault.get(slot(alice.key, "guarded"))
    assert stolen is not None
    await store.vault.put(slot(mallory.key, "guarded"), stolen, 60)
    assert await flow.access_token(mallory, "guarded") is None


async def test_token_exchange_gives_a_token_for_the_server_as_the_caller(live: World) -> None:
    store = VaultTokens(MemoryVault(), Sealer(os.urandom(32)))
    url = live.servers["guarded"]
    exchanger = Exchanger(
        {"guarded": ExchangeServer("guarded", url, live.issuer, "manifold", CLIENT_SECRET)}, store
    )
    inbound = await live.client_credentials("users-app", CLIENT_SECRET, live.manifold_resource)
    # The caller's own token is not for the server: the server refuses it as it is.
    with pytest.raises(BaseException):  # noqa: B017,PT011 (the SDK client's 401, in a group)
        await whoami(url, inbound)
    caller = person("svc")
    exchanged = await exchanger.access_token(caller, "guarded", inbound, None)
    assert exchanged != inbound
    seen = await whoami(url, exchanged)
    assert seen["subject"] == "users-app"  # client credentials: the client is the subject
    assert await exchanger.access_token(caller, "guarded", inbound, None) == exchanged  # cached


async def test_an_exchange_granting_another_audience_is_refused(live: World) -> None:
    store = VaultTokens(MemoryVault(), Sealer(os.urandom(32)))
    url = live.servers["guarded"]
    exchanger = Exchanger(
        {"guarded": ExchangeServer("guarded", url, live.issuer, "manifold-hostile-exchange", CLIENT_SECRET)},
        store,
    )
    inbound = await live.client_credentials("users-app", CLIENT_SECRET, live.manifold_resource)
    with pytest.raises(OAuthClientError, match="not for"):
        await exchanger.access_token(person("svc"), "guarded", inbound, None)


async def test_an_exchange_of_a_token_not_issued_for_manifold_is_refused(live: World) -> None:
    store = VaultTokens(MemoryVault(), Sealer(os.urandom(32)))
    url = live.servers["guarded"]
    exchanger = Exchanger(
        {"guarded": ExchangeServer("guarded", url, live.issuer, "manifold", CLIENT_SECRET)}, store
    )
    other = await live.client_credentials("users-app", CLIENT_SECRET, live.servers["short"])
    with pytest.raises(OAuthClientError, match="invalid_grant"):
        await exchanger.access_token(person("svc"), "guarded", other, None)


async def test_without_a_client_id_manifold_registers_itself_and_finds_the_server_from_its_401(
    live: World,
) -> None:
    # Nothing configured but the server's URL: PRM from the 401, the AS metadata, registration.
    key = os.urandom(32)
    flow = OnBehalf(
        {"guarded": OAuthServer("guarded", live.servers["guarded"], scope="mcp:tools")},
        VaultTokens(MemoryVault(), Sealer(key)),
        Pending(MemoryVault(), Sealer(key)),
        callback_url=CALLBACK,
    )
    known = await flow.known("guarded")
    assert known.server.issuer == live.issuer
    assert known.resource == live.servers["guarded"]
    assert known.client.client_id != "manifold"  # its own, just registered
    await sign_in(flow, person("alice"), "guarded", "alice")
    token = await flow.access_token(person("alice"), "guarded")
    assert token is not None
    assert (await whoami(live.servers["guarded"], token))["subject"] == "alice"


async def test_a_sign_in_refused_for_another_subject_tells_the_waiting_call_why_at_once(live: World) -> None:
    # The sign-in stage with the real flow: Alice's client accepts, Bob's browser completes the
    # sign-in, the callback refuses it (same_subject). The call hears why, at once: before, it
    # was told "The sign-in was not completed in time".
    from urllib.parse import parse_qs, urlsplit

    from proxy.pipeline.bridge.state import RequestStates
    from proxy.pipeline.stages.sign_in import SignInStage
    from tests.pipeline.stages.test_sign_in import URL_ELICITATION, Caller, Next, context

    flow = on_behalf(live)
    alice = person("alice", issuer=live.issuer)

    class BobOpensTheLink(Caller):
        async def request(self, method: str, params: Any) -> Any:
            state = parse_qs(urlsplit(params["url"]).query)["state"][0]
            browser = Browser("bob")
            await browser.authorize(await flow.start(state, alice), stop_at=CALLBACK)
            with pytest.raises(CallbackRefused):
                await complete(flow, browser.landed)
            return {"action": "accept"}

    caller = BobOpensTheLink(alice, stateless=False, capabilities=URL_ELICITATION)
    stage = SignInStage(flow, RequestStates(os.urandom(32), ttl=600))
    forward = Next()
    with anyio.fail_after(30):
        result = await stage(context(caller, server_id="guarded"), forward)
    text = result["content"][0]["text"]
    assert "was refused: you signed in as somebody else than the user who asked" in text
    assert "not completed in time" not in text
    assert forward.calls == []


async def test_an_authorization_server_without_pkce_s256_is_unusable_and_says_so() -> None:
    # A real (if small) authorization server on loopback whose metadata lacks S256.
    from aiohttp import web

    from proxy.credentials.oauth_client import OAuthUnusable

    issuer: list[str] = []

    async def metadata(_: web.Request) -> web.Response:
        base = issuer[0]
        return web.json_response(
            {"issuer": base, "authorization_endpoint": f"{base}/auth", "token_endpoint": f"{base}/token"}
        )

    app = web.Application()
    app.router.add_get("/.well-known/oauth-authorization-server", metadata)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        issuer.append(f"http://127.0.0.1:{runner.addresses[0][1]}")
        key = os.urandom(32)
        flow = OnBehalf(
            {"s": OAuthServer("s", "http://127.0.0.1:9/mcp", issuer=issuer[0], client_id="c")},
            VaultTokens(MemoryVault(), Sealer(key)),
            Pending(MemoryVault(), Sealer(key)),
            callback_url=CALLBACK,
        )
        with pytest.raises(OAuthUnusable, match="PKCE with S256 is not supported"):
            await flow.begin(person("alice"), "s")
    finally:
        await runner.cleanup()
