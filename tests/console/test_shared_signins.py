"""Console sign-ins in a real redis-server: one replica's sign-in holds on another that shares
the secret, Redis holds no credential, id or form token, a moved or altered record does not
open, and records are bounded, expire and end everywhere; Redis gone signs nobody in."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from redis.asyncio import Redis

from proxy.console.shared_signins import INDEX, PREFIX, SharedSignIns, Unavailable
from tests.admin.test_replicas import redis
from tests.ratelimit.redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
__all__ = ["redis"]  # a fixture of the replicas' tests, used here too

SECRET = b"replicas-share-this-secret-of-32+chars"
CREDENTIAL = "mfd_admin-credential-that-must-not-be-in-redis"


@pytest.fixture
async def client(redis: RedisServer) -> AsyncIterator[Redis]:
    connection = Redis.from_url(redis.url, socket_timeout=2, socket_connect_timeout=2)
    yield connection
    await connection.aclose()


async def _value(client: Redis, key: bytes) -> bytes:
    raw = await client.get(key)
    assert isinstance(raw, bytes)
    return raw


async def test_a_sign_in_on_one_replica_holds_on_another_sharing_the_secret(client: Redis) -> None:
    a, b = SharedSignIns(client, SECRET), SharedSignIns(client, SECRET)
    sign_in_id, started = await a.start(CREDENTIAL, now=100.0)
    seen = await b.get(sign_in_id, now=101.0)
    assert seen is not None
    assert (seen.credential, seen.csrf, seen.started, seen.used) == (CREDENTIAL, started.csrf, 100.0, 101.0)
    other = SharedSignIns(client, b"another-deployment-with-its-own-secret")
    assert await other.get(sign_in_id, now=101.0) is None
    assert await b.get("attacker-chosen-id", now=101.0) is None
    assert await b.get("x" * 10_000, now=101.0) is None
    await b.end(sign_in_id)  # signing out on B ends it on A too
    assert await a.get(sign_in_id, now=102.0) is None


async def test_redis_holds_no_credential_no_cookie_and_no_form_token(client: Redis) -> None:
    signed = SharedSignIns(client, SECRET)
    sign_in_id, record = await signed.start(CREDENTIAL, now=0.0)
    keys: list[bytes] = [key async for key in client.scan_iter("*")]
    assert sorted(keys) == sorted([INDEX.encode(), *[k for k in keys if k.startswith(PREFIX.encode())]])
    values = [await _value(client, k) for k in keys if k != INDEX.encode()]
    dump = b"".join([*keys, *values])
    for secret in (CREDENTIAL, sign_in_id, record.csrf):
        assert secret.encode() not in dump


async def test_a_record_moved_to_another_id_or_altered_does_not_open(client: Redis) -> None:
    signed = SharedSignIns(client, SECRET)
    victim, _ = await signed.start(CREDENTIAL, now=0.0)
    attacker, _ = await signed.start("mfd_attacker-own-key", now=1.0)
    members: list[bytes] = await client.zrange(INDEX, 0, -1)  # type: ignore[assignment]
    victim_key, attacker_key = members  # by start: the victim's first
    stolen = await _value(client, victim_key)
    await client.set(attacker_key, stolen)  # whoever writes Redis copies ann's record to their id
    assert await signed.get(attacker, now=2.0) is None
    assert await signed.get(victim, now=2.0) is not None
    sealed = bytearray(stolen)
    middle = len(sealed) // 2
    sealed[middle] = ord("A") if sealed[middle] != ord("A") else ord("B")
    await client.set(victim_key, bytes(sealed))
    assert await signed.get(victim, now=2.0) is None
    await client.set(victim_key, b"not a sealed value at all \xff")
    assert await signed.get(victim, now=2.0) is None


async def test_a_sign_in_ends_after_its_lifetime_and_when_idle(client: Redis) -> None:
    signed = SharedSignIns(client, SECRET, idle=0.3, lifetime=25.0)
    old, _ = await signed.start(CREDENTIAL, now=0.0)
    assert await signed.get(old, now=24.0) is not None
    assert await signed.get(old, now=26.0) is None
    assert await client.zcard(INDEX) == 0  # forgotten, not only refused
    idle, _ = await signed.start(CREDENTIAL, now=0.0)
    for _ in range(3):  # each use sets the expiry again
        await anyio.sleep(0.15)
        assert await signed.get(idle, now=0.0) is not None
    await anyio.sleep(0.45)
    assert await signed.get(idle, now=0.0) is None


async def test_the_number_of_sign_ins_is_bounded_and_the_oldest_go_first(client: Redis) -> None:
    signed = SharedSignIns(client, SECRET, limit=3)
    ids = [(await signed.start(CREDENTIAL, now=float(i)))[0] for i in range(5)]
    assert await client.zcard(INDEX) == 3
    assert len([k async for k in client.scan_iter(PREFIX + "*")]) == 3
    assert [await signed.get(i, now=5.0) is not None for i in ids] == [False, False, True, True, True]


async def test_redis_gone_signs_nobody_in_and_says_so(redis: RedisServer, client: Redis) -> None:
    signed = SharedSignIns(client, SECRET)
    sign_in_id, _ = await signed.start(CREDENTIAL, now=0.0)
    await redis.stop()
    assert await signed.get(sign_in_id, now=1.0) is None
    await signed.end(sign_in_id)  # no exception: the record expires by itself
    with pytest.raises(Unavailable):
        await signed.start(CREDENTIAL, now=1.0)
