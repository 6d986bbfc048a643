"""Tokens kept for users: sealed and bound to their slot, single-use takes, expiry, Redis."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from proxy.core.errors import ConfigError
from proxy.credentials.tokens import (
    MemoryVault,
    Pending,
    RedisVault,
    Sealer,
    TokenSet,
    VaultTokens,
    sealer_from_key,
    slot,
)
from tests.ratelimit.redis_server import REDIS_SERVER, running_redis

pytestmark = pytest.mark.anyio

ALICE = ("oauth", "https://idp", "alice")
MALLORY = ("oauth", "https://idp", "mallory")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_sealed_value_opens_only_under_its_own_name_and_key() -> None:
    key = os.urandom(32)
    sealed = Sealer(key).seal(b"secret", "token:gh:a")
    assert Sealer(key).open(sealed, "token:gh:a") == b"secret"
    assert Sealer(key).open(sealed, "token:gh:b") is None  # moved to another slot
    assert Sealer(os.urandom(32)).open(sealed, "token:gh:a") is None  # another key
    assert Sealer(key).open(sealed[:-1] + bytes([sealed[-1] ^ 1]), "token:gh:a") is None  # altered
    assert b"secret" not in sealed


def test_the_key_must_be_32_bytes_of_base64() -> None:
    with pytest.raises(ConfigError, match="32 bytes"):
        sealer_from_key("c2hvcnQ=")
    with pytest.raises(ConfigError, match="base64"):
        sealer_from_key("not base64 at all!!")
    assert isinstance(sealer_from_key(__import__("base64").b64encode(os.urandom(32)).decode()), Sealer)


def test_a_token_set_never_shows_its_tokens() -> None:
    tokens = TokenSet("at-secret", 5.0, "rt-secret")
    assert "secret" not in repr(tokens)
    assert "secret" not in str(tokens)
    assert TokenSet.decode(tokens.encode()) == tokens


def test_slots_do_not_show_who_and_differ_by_identity_and_server() -> None:
    assert "alice" not in slot(ALICE, "gh")
    assert len({slot(ALICE, "gh"), slot(MALLORY, "gh"), slot(ALICE, "jira")}) == 3


async def test_tokens_are_kept_per_identity_and_server_and_revoked() -> None:
    store = VaultTokens(MemoryVault(), Sealer(os.urandom(32)))
    await store.put(ALICE, "gh", TokenSet("a"))
    assert (await store.get(ALICE, "gh")) == TokenSet("a")
    assert await store.get(MALLORY, "gh") is None
    assert await store.get(ALICE, "jira") is None
    assert await store.revoke(ALICE, "gh") == TokenSet("a")
    assert await store.get(ALICE, "gh") is None


async def test_a_token_without_a_refresh_token_is_dropped_when_it_expires() -> None:
    clock = Clock()
    store = VaultTokens(MemoryVault(clock=clock), Sealer(os.urandom(32)), clock=clock)
    await store.put(ALICE, "gh", TokenSet("a", expires_at=clock.now + 60))
    clock.now += 61
    assert await store.get(ALICE, "gh") is None


async def test_take_is_single_use() -> None:
    vault = MemoryVault()
    await vault.put("state:x", b"1", 60)
    assert await vault.take("state:x") == b"1"
    assert await vault.take("state:x") is None


@pytest.fixture
async def redis_url(tmp_path: Path) -> AsyncIterator[str]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    async with running_redis(tmp_path) as server:
        yield server.url


@pytest.mark.slow
async def test_the_redis_vault_is_shared_sealed_and_takes_once(redis_url: str) -> None:
    key = os.urandom(32)
    vaults = [RedisVault(Redis.from_url(redis_url), key_prefix="t:") for _ in range(2)]
    try:
        await _shared(redis_url, key, *vaults)
    finally:
        for vault in vaults:
            await vault.aclose()


async def _shared(redis_url: str, key: bytes, first: RedisVault, second: RedisVault) -> None:
    one, two = VaultTokens(first, Sealer(key)), VaultTokens(second, Sealer(key))
    await one.put(ALICE, "gh", TokenSet("a", refresh_token="r"))
    assert await two.get(ALICE, "gh") == TokenSet("a", refresh_token="r")  # another replica
    reader = Redis.from_url(redis_url)
    raw = await reader.get("t:cred:" + slot(ALICE, "gh"))
    await reader.aclose()
    assert raw is not None
    assert b'"refresh_token"' not in raw  # sealed at rest
    sign_in_one, sign_in_two = Pending(first, Sealer(key)), Pending(second, Sealer(key))
    await sign_in_one.put("s", b"1", 60)
    assert await sign_in_two.take("s") == b"1"  # the callback landed on another replica
    assert await sign_in_one.take("s") is None
    assert await two.revoke(ALICE, "gh") is not None
    assert await one.get(ALICE, "gh") is None


async def test_the_memory_vault_is_bounded_and_drops_the_expired_unread() -> None:
    # One entry per inbound token, pending sign-in or identity must not grow without end.
    now = [100.0]
    vault = MemoryVault(size=3, clock=lambda: now[0])
    for n in range(10):
        await vault.put(f"k{n}", b"v", 60.0 + n)
    assert len(vault) == 3
    assert await vault.get("k9") == b"v"  # the latest to expire are kept
    now[0] = 1_000.0  # all expired, none read
    await vault.put("fresh", b"v", 5.0)
    assert len(vault) == 1
