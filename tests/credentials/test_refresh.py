"""Refreshing a user's token when the authorization server fails or another replica races."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from proxy.credentials.oauth_client import AuthServer, OAuthClientError, OAuthRefused, Registered
from proxy.credentials.on_behalf import OAuthServer, OnBehalf
from proxy.credentials.tokens import MemoryVault, Pending, Sealer, TokenSet, VaultTokens
from proxy.policy.model import Identity

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset(), "api_key")
NOW = 1_000.0
EXPIRED = TokenSet("old-access", NOW - 1, "old-refresh")


class _TokenEndpoint:
    def __init__(self, answer: Callable[[], Awaitable[TokenSet]]) -> None:
        self.answer = answer

    async def discover(self, server_url: str, issuer: str | None = None) -> tuple[str, AuthServer]:
        return server_url, AuthServer("https://as.example", "https://as.example/a", "https://as.example/t")

    async def token(
        self, server: AuthServer, client: Registered, form: Mapping[str, str], now: float
    ) -> tuple[TokenSet, dict[str, Any]]:
        return await self.answer(), {}


async def _flow(answer: Callable[[], Awaitable[TokenSet]]) -> OnBehalf:
    store = VaultTokens(MemoryVault(clock=lambda: NOW), Sealer(os.urandom(32)), clock=lambda: NOW)
    await store.put(ALICE.key, "s", EXPIRED)
    return OnBehalf(
        {"s": OAuthServer("s", "http://127.0.0.1:9/mcp", client_id="m")},
        store,
        Pending(MemoryVault(), Sealer(os.urandom(32))),
        callback_url="http://127.0.0.1:1/oauth/callback",
        http=_TokenEndpoint(answer),  # type: ignore[arg-type]
        clock=lambda: NOW,
    )


async def test_an_unreachable_authorization_server_keeps_the_tokens() -> None:
    async def unreachable() -> TokenSet:
        raise OAuthClientError("https://as.example/t: ClientConnectorError")

    flow = await _flow(unreachable)
    with pytest.raises(OAuthClientError):
        await flow.access_token(ALICE, "s")
    assert await flow.store.get(ALICE.key, "s") == EXPIRED  # signs in again? no: tried again later

    async def server_error() -> TokenSet:
        raise OAuthRefused("the token endpoint refused: server_error", "server_error")

    flow = await _flow(server_error)
    with pytest.raises(OAuthClientError):
        await flow.access_token(ALICE, "s")
    assert await flow.store.get(ALICE.key, "s") == EXPIRED


async def test_invalid_grant_forgets_the_tokens_only_if_nobody_refreshed_meanwhile() -> None:
    async def ended() -> TokenSet:
        raise OAuthRefused("the token endpoint refused: invalid_grant", "invalid_grant")

    flow = await _flow(ended)
    assert await flow.access_token(ALICE, "s") is None
    assert await flow.store.get(ALICE.key, "s") is None  # the grant ended: sign in again

    # Another replica refreshed first (rotating the refresh token): its tokens stay, and are used.
    fresh = TokenSet("new-access", NOW + 3600, "new-refresh")

    async def raced() -> TokenSet:
        await flow.store.put(ALICE.key, "s", fresh)
        raise OAuthRefused("the token endpoint refused: invalid_grant", "invalid_grant")

    flow = await _flow(raced)
    assert await flow.access_token(ALICE, "s") == "new-access"
    assert await flow.store.get(ALICE.key, "s") == fresh


async def test_the_refresh_locks_and_sign_in_waits_are_bounded() -> None:
    async def fine() -> TokenSet:
        return TokenSet("new-access", NOW + 3600, "new-refresh")

    flow = await _flow(fine)
    for n in range(12_000):
        flow._lock(f"refresh:s:{n}")
    assert len(flow._locks) <= 10_000
