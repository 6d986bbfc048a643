"""The Redis store: sealed entries every replica shares; an unreachable Redis is a StoreError
whose message carries no password."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from proxy.config.credentials import CredentialStoreSettings, decode_key
from proxy.credentials.redis_store import RedisStore
from proxy.credentials.sealing import Sealer, Unsealable, new_key
from proxy.credentials.store import StoreError
from tests.ratelimit.redis_server import REDIS_SERVER, running_redis

pytestmark = pytest.mark.anyio

ALICE = ("jwt", "https://id.example.com", "alice:with:colons")
BOB = ("api_key", "", "bob")


def store(url: str, key: str | None = None) -> RedisStore:
    key = key or new_key()
    settings = CredentialStoreSettings.model_validate({"store": "redis", "key": key, "timeout": 0.5})
    return RedisStore(url, Sealer(decode_key(key)), settings)


async def test_an_unreachable_redis_is_a_store_error_without_its_password() -> None:
    unreachable = store("redis://:hunter2-password@127.0.0.1:1/0")
    try:
        with pytest.raises(StoreError) as failed:
            await unreachable.get("secret", "gh", BOB)
        assert "hunter2-password" not in str(failed.value)
    finally:
        await unreachable.aclose()


@pytest.mark.slow
@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
async def test_entries_round_trip_sealed_and_a_copied_entry_does_not_open(tmp_path: Path) -> None:
    async with running_redis(tmp_path) as redis:
        key = new_key()
        first, second, other_key = store(redis.url, key), store(redis.url, key), store(redis.url)
        raw = Redis.from_url(redis.url)
        try:
            await first.put("secret", "gh", ALICE, "alice-redis-token")
            assert await second.get("secret", "gh", ALICE) == "alice-redis-token"
            assert await second.get("secret", "gh", BOB) is None
            assert [(e.kind, e.server, e.holder) for e in await second.entries()] == [("secret", "gh", ALICE)]
            alices = await raw.get(first._key("secret", "gh", ALICE))
            assert alices is not None
            assert b"alice-redis-token" not in alices
            with pytest.raises(Unsealable):
                await other_key.get("secret", "gh", ALICE)
            # Bob, who can write Redis but has no key, copies Alice's sealed value as his own entry.
            row = orjson.loads(alices)
            await raw.set(first._key("secret", "gh", BOB), orjson.dumps({**row, "holder": list(BOB)}))
            with pytest.raises(Unsealable):
                await second.get("secret", "gh", BOB)
            await raw.set(first._key("secret", "gh", BOB), alices)  # as it was: not Bob's entry
            with pytest.raises(StoreError, match="malformed"):
                await second.get("secret", "gh", BOB)
            assert await second.delete("secret", "gh", ALICE)
            assert await second.get("secret", "gh", ALICE) is None
        finally:
            await raw.aclose()
            for each in (first, second, other_key):
                await each.aclose()
