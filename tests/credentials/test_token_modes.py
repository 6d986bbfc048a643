"""What the oauth and exchange modes are built from, and the configs they refuse."""

from __future__ import annotations

import os
from typing import Any

import anyio
import pytest

from proxy.config.loading import config_from_mapping
from proxy.config.model import Config
from proxy.core.errors import ConfigError, SignInNeeded
from proxy.credentials.inbound import InboundTokens
from proxy.credentials.oauth_client import AuthServer, Registered
from proxy.credentials.on_behalf import OAuthServer, OnBehalf
from proxy.credentials.sealing import new_key
from proxy.credentials.token_modes import (
    ExchangeSource,
    OAuthSource,
    StoreClients,
    StoreTokens,
    callback_url,
    token_modes,
)
from proxy.credentials.tokens import MemoryVault, Pending, Sealer
from proxy.credentials.wiring import BUILDERS, open_credential_store, sources_for
from proxy.policy.model import ANONYMOUS, Identity

pytestmark = pytest.mark.anyio

OAUTH = {"mode": "oauth", "client_id": "manifold", "client_secret": "s3cret-client-0123456789"}
EXCHANGE = {"mode": "exchange", "client_id": "manifold", "client_secret": "s3cret-client-0123456789"}


def config(servers: dict[str, Any], **top: Any) -> Config:
    return config_from_mapping({"servers": servers, **top}, environ={})


def refused(servers: dict[str, Any], **top: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        config(servers, **top)
    return str(caught.value)


def test_oauth_needs_a_url_server_and_a_sealed_store() -> None:
    assert "'oauth' only applies to url servers" in refused({"s": {"command": "x", "credentials": OAUTH}})
    said = refused({"s": {"url": "http://127.0.0.1:9/mcp", "credentials": OAUTH}})
    assert "credentials.key" in said
    assert "'oauth'" in said
    said = refused(
        {"s": {"url": "http://127.0.0.1:9/mcp", "credentials": OAUTH}}, credentials={"store": "env"}
    )
    assert "file or redis" in said


def test_exchange_needs_its_client_and_an_authorization_server() -> None:
    said = refused({"s": {"url": "http://127.0.0.1:9/mcp", "credentials": {"mode": "exchange"}}})
    assert "client_id" in said
    built = config({"s": {"url": "http://127.0.0.1:9/mcp", "credentials": EXCHANGE}})
    with pytest.raises(ConfigError, match="issuer"):
        token_modes(built, None)  # no auth.oauth to take the issuer from


def test_the_callback_defaults_to_the_listener_and_must_be_the_callback_path() -> None:
    built = config({}, listen={"host": "0.0.0.0", "port": 8123})
    assert callback_url(built) == "http://127.0.0.1:8123/oauth/callback"
    assert "callback_url" in refused({}, credentials={"callback_url": "https://gw.example/elsewhere"})


async def test_the_sources_are_built_and_served(tmp_path: Any) -> None:
    built = config(
        {
            "o": {"url": "http://127.0.0.1:9/mcp", "credentials": OAUTH},
            "x": {
                "url": "http://127.0.0.1:9/mcp",
                "credentials": {**EXCHANGE, "issuer": "http://127.0.0.1:8"},
            },
        },
        credentials={"store": "file", "path": str(tmp_path / "c.json"), "key": new_key()},
    )
    assert {"oauth", "exchange"} <= set(BUILDERS)  # manifold check: modes this build serves
    store = open_credential_store(built)
    modes = token_modes(built, store)
    sources = modes.sources(built)
    assert isinstance(sources["o"], OAuthSource)
    assert isinstance(sources["x"], ExchangeSource)
    assert "o" in sources_for(built, store, sources)
    alice = Identity("alice", frozenset(), "api_key")
    with pytest.raises(SignInNeeded, match="not signed in"):
        await sources["o"].credentials(alice, "o")
    with pytest.raises(SignInNeeded, match="authenticate"):
        await sources["o"].credentials(ANONYMOUS, "o")
    with pytest.raises(SignInNeeded, match="API key cannot be exchanged"):
        await sources["x"].credentials(alice, "x")


async def test_the_inbound_token_is_this_requests_own_not_the_identitys_latest() -> None:
    now = [100.0]
    kept = InboundTokens(clock=lambda: now[0])
    alice = Identity("alice", frozenset(), "oauth", "https://idp", "alice")
    bob = Identity("bob", frozenset(), "oauth", "https://idp", "bob")
    seen: dict[str, tuple[str, float] | None] = {}

    async def request(name: str, token: str, until: float, go: anyio.Event, done: anyio.Event) -> None:
        kept.keep(alice, token, until)
        await go.wait()  # another request of alice's authenticates meanwhile
        seen[name] = kept.current(alice)
        done.set()

    first_go, first_done, second_done = anyio.Event(), anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(request, "first", "alice-token-1", 110.0, first_go, first_done)
        go_now = anyio.Event()
        go_now.set()
        tg.start_soon(request, "second", "alice-token-2", 120.0, go_now, second_done)
        with anyio.fail_after(5):
            await second_done.wait()
        first_go.set()
    assert seen == {"first": ("alice-token-1", 110.0), "second": ("alice-token-2", 120.0)}
    assert kept.current(alice) is None  # nothing outlives the request that presented it
    kept.keep(bob, "bob-token", 90.0)  # already expired: not kept
    assert kept.current(bob) is None
    kept.keep(alice, "alice-token", 110.0)
    assert kept.current(bob) is None  # another identity's token is not bob's
    now[0] = 111.0
    assert kept.current(alice) is None


async def test_only_an_oauth_token_of_the_exchanges_own_issuer_is_sent_to_it() -> None:
    built = config(
        {"x": {"url": "http://127.0.0.1:9/mcp", "credentials": {**EXCHANGE, "issuer": "http://127.0.0.1:8"}}}
    )
    modes = token_modes(built, None)
    source = modes.sources(built)["x"]
    for hostile in (
        Identity("eve", frozenset(), "jwt", "http://127.0.0.1:8", "eve"),  # not an OAuth token
        Identity("eve", frozenset(), "oauth", "https://other-idp.example", "eve"),  # another issuer
    ):
        modes.inbound.keep(hostile, "eves-token-for-elsewhere", 1e12)
        with pytest.raises(SignInNeeded, match="access token from that server"):
            await source.credentials(hostile, "x")


class _Registering:
    """An authorization server's discovery and registration, counted."""

    def __init__(self) -> None:
        self.registered = 0

    async def discover(self, server_url: str, issuer: str | None = None) -> tuple[str, AuthServer]:
        return server_url, AuthServer("https://as.example", "https://as.example/a", "https://as.example/t")

    async def register(self, server: AuthServer, redirect_uri: str, scope: str | None) -> Registered:
        self.registered += 1
        return Registered(f"client-{self.registered}", f"secret-{self.registered}-0123456789")


async def test_a_dynamic_registration_is_kept_sealed_and_reused_by_the_next_replica(tmp_path: Any) -> None:
    built = config(
        {"o": {"url": "http://127.0.0.1:9/mcp", "credentials": {"mode": "oauth"}}},
        credentials={"store": "file", "path": str(tmp_path / "c.json"), "key": new_key()},
    )
    store = open_credential_store(built)
    assert store is not None
    http = _Registering()

    def replica() -> OnBehalf:
        return OnBehalf(
            {"o": OAuthServer("o", "http://127.0.0.1:9/mcp")},
            StoreTokens(store),
            Pending(MemoryVault(), Sealer(os.urandom(32))),
            callback_url="http://127.0.0.1:1/oauth/callback",
            http=http,  # type: ignore[arg-type]
            clients=StoreClients(store),
        )

    first = await replica().known("o")
    again = await replica().known("o")  # another replica, or after a restart
    assert http.registered == 1
    assert again.client == first.client
    assert again.client.client_secret == "secret-1-0123456789"
    assert b"secret-1" not in (tmp_path / "c.json").read_bytes()  # sealed at rest


class _Signed:
    async def access_token(self, identity: Identity, server_id: str) -> str:
        return f"short-lived-token-of-{identity.name}"


async def test_a_users_token_is_not_added_to_the_verbatim_redaction_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Thousands of short-lived tokens would each recompile the pattern on the event loop.
    import proxy.core.redaction as redaction

    monkeypatch.setattr(redaction, "_learned", {})
    source = OAuthSource(_Signed())  # type: ignore[arg-type]
    for n in range(50):
        identity = Identity(f"user{n}", frozenset(), "api_key")
        headers = (await source.credentials(identity, "o")).headers
        assert headers == {"Authorization": f"Bearer short-lived-token-of-user{n}"}
    assert redaction._learned == {}


def test_the_requests_bearer_is_asked_for_only_when_a_server_exchanges_it() -> None:
    class _Auth:
        on_bearer: object = None

    none_exchange = config({"o": {"url": "http://127.0.0.1:9/mcp"}})
    auth = _Auth()
    token_modes(none_exchange, None).hook(auth)  # type: ignore[arg-type]
    assert auth.on_bearer is None
    exchanging = config(
        {"x": {"url": "http://127.0.0.1:9/mcp", "credentials": {**EXCHANGE, "issuer": "http://127.0.0.1:8"}}}
    )
    modes = token_modes(exchanging, None)
    modes.hook(auth)  # type: ignore[arg-type]
    assert auth.on_bearer == modes.inbound.keep


def test_plain_http_authorization_servers_are_let_through_only_on_an_explicit_loud_opt_out(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store_settings = {"store": "file", "path": str(tmp_path / "c.json"), "key": new_key()}
    servers = {"o": {"url": "http://192.0.2.2:9/mcp", "credentials": OAUTH}}
    strict = config(servers, credentials=store_settings)
    store = open_credential_store(strict)
    modes = token_modes(strict, store)
    assert modes.on_behalf is not None
    assert not modes.on_behalf._http.plain_http
    assert "allow_insecure_http" not in caplog.text
    rig = config(servers, credentials={**store_settings, "allow_insecure_http": True})
    modes = token_modes(rig, store)
    assert modes.on_behalf is not None
    assert modes.on_behalf._http.plain_http
    assert "credentials.allow_insecure_http is true" in caplog.text
    assert caplog.records[-1].levelname == "WARNING"
