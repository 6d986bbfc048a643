"""The Redis backend against a real redis-server on loopback, started and stopped by each test."""

from __future__ import annotations

import logging
import random
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Literal

import anyio
import pytest
from redis.asyncio import Redis

from proxy.config.ratelimit import RateLimitSettings
from proxy.policy.gcra import LimitCheck, LimitOutcome
from proxy.ratelimit import denial_message, open_backend
from proxy.ratelimit.memory import MemoryBackend
from proxy.ratelimit.redis import FAIL_CLOSED_RETRY_AFTER, RedisBackend
from tests.ratelimit.clock import FakeClock
from tests.ratelimit.redis_server import RedisServer

pytestmark = pytest.mark.anyio

MINUTELY = LimitCheck("per-user:identity=alice", interval=60.0, burst=5, rule_id="per-user")
TIGHT = LimitCheck("tight", interval=30.0, burst=1, rule_id="tight")


@asynccontextmanager
async def replica(
    url: str,
    *,
    failure_mode: Literal["fail_open", "fail_closed"] = "fail_open",
    timeout: float = 2.0,
    on_backend_error: Callable[[BaseException], None] | None = None,
) -> AsyncIterator[RedisBackend]:
    """One Manifold replica's backend, with its own client and connections.

    The timeout is roomier than production's 0.25 s: on a loaded test machine a healthy Redis
    can take longer than that, and a timeout would turn a test of counting into one of fail_open.
    """
    settings = RateLimitSettings(backend="redis", redis_url=url, failure_mode=failure_mode, timeout=timeout)
    backend = RedisBackend.from_settings(settings, on_backend_error=on_backend_error)
    try:
        yield backend
    finally:
        await backend.aclose()


@asynccontextmanager
async def inspector(url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.mark.slow
async def test_two_replicas_sharing_redis_enforce_one_combined_budget(redis_server: RedisServer) -> None:
    results: list[bool] = []
    async with replica(redis_server.url) as first, replica(redis_server.url) as second:

        async def call(backend: RedisBackend) -> None:
            results.append((await backend.hit([MINUTELY])).allowed)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for n in range(20):
                    tg.start_soon(call, first if n % 2 else second)
    assert results.count(True) == MINUTELY.burst


@pytest.mark.slow
async def test_redis_answers_exactly_as_the_in_memory_backend(redis_server: RedisServer) -> None:
    checks = [
        LimitCheck("third", interval=1 / 3, burst=1),
        LimitCheck("odd", interval=1.1, burst=2),
        LimitCheck("slow", interval=2.25, burst=3),
    ]
    rng = random.Random(7)
    clock = FakeClock(5000.0)
    memory = MemoryBackend(clock=clock)
    denied_by: set[str | None] = set()
    async with replica(redis_server.url) as shared:
        for _ in range(300):
            clock.advance(rng.choice([0.0, 0.0, 0.1, 1 / 3, 0.5, 1.7]))
            call = rng.sample(checks, rng.randint(1, 3))
            with anyio.fail_after(5):
                from_redis = await shared.hit(call, now=clock.now)
            assert from_redis == await memory.hit(call, now=clock.now)  # bit for bit
            denied_by.add(from_redis.denied_by.key if from_redis.denied_by else None)
    assert denied_by == {None, "third", "odd", "slow"}  # the transcript exercised every limit


@pytest.mark.slow
async def test_a_call_denied_by_one_key_leaves_the_other_keys_untouched(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as backend, inspector(redis_server.url) as redis:
        with anyio.fail_after(5):
            assert (await backend.hit([MINUTELY, TIGHT])).allowed
            stored = await redis.get("manifold:rl:" + MINUTELY.key)
            denied = await backend.hit([MINUTELY, TIGHT])
            assert (denied.allowed, denied.denied_by) == (False, TIGHT)
            assert 29.0 < denied.retry_after <= 30.0
            assert await redis.get("manifold:rl:" + MINUTELY.key) == stored


@pytest.mark.slow
async def test_keys_expire_when_their_bucket_is_full_again(redis_server: RedisServer) -> None:
    async with replica(redis_server.url) as backend, inspector(redis_server.url) as redis:
        key = "manifold:rl:" + MINUTELY.key
        with anyio.fail_after(5):
            await backend.hit([MINUTELY])
            assert 59_000 < await redis.pttl(key) <= 60_000
            for _ in range(4):
                await backend.hit([MINUTELY])
            assert 299_000 < await redis.pttl(key) <= 300_000


@pytest.mark.slow
async def test_the_buckets_in_use_are_listed_with_the_time_until_full_and_memory_says_the_same(
    redis_server: RedisServer,
) -> None:
    memory = MemoryBackend()
    async with inspector(redis_server.url) as redis:
        backend = RedisBackend(redis, key_prefix="{a*}:rl:")  # glob characters in the prefix are literal
        await redis.set("{ab}:rl:not-ours", b"1", px=60_000)
        with anyio.fail_after(5):
            for store in (backend, memory):
                for _ in range(3):
                    await store.hit([MINUTELY])
                await store.hit([TIGHT])
            listed = dict(await backend.buckets())
        assert sorted(listed) == sorted(dict(await memory.buckets())) == [MINUTELY.key, TIGHT.key]
        assert 179 < listed[MINUTELY.key] <= 180
        assert 29 < listed[TIGHT.key] <= 30
        assert len(await backend.buckets(limit=1)) == 1
        await redis_server.stop()
        with pytest.raises(ConnectionError, match="Redis"):
            await backend.buckets()
        await backend.aclose()


@pytest.mark.slow
async def test_the_key_prefix_is_configurable(redis_server: RedisServer) -> None:
    async with inspector(redis_server.url) as redis:
        backend = RedisBackend(redis, key_prefix="{team-a}:rl:")
        with anyio.fail_after(5):
            await backend.hit([TIGHT])
            assert await redis.keys("*") == [b"{team-a}:rl:tight"]
        await backend.aclose()  # not the owner: the client stays open
        assert await redis.ping()


@pytest.mark.slow
async def test_fail_open_allows_and_fail_closed_denies_while_redis_is_down(redis_server: RedisServer) -> None:
    errors: list[BaseException] = []
    async with AsyncExitStack() as stack:
        open_ = await stack.enter_async_context(replica(redis_server.url, on_backend_error=errors.append))
        closed = await stack.enter_async_context(replica(redis_server.url, failure_mode="fail_closed"))
        with anyio.fail_after(5):
            assert (await open_.hit([TIGHT])).allowed
            await redis_server.stop()
            assert await open_.hit([TIGHT]) == LimitOutcome(allowed=True, degraded=True)
            denied = await closed.hit([TIGHT])
        assert denied == LimitOutcome(False, None, FAIL_CLOSED_RETRY_AFTER, 0, 0.0, degraded=True)
        assert (
            denial_message(None, denied.retry_after)
            == "Rate limiting is unavailable right now; retry in 1.0 s."
        )
        assert (open_.errors, closed.errors, len(errors)) == (1, 1, 1)


@pytest.mark.slow
async def test_failures_are_logged_at_most_once_a_minute(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    async with inspector(redis_server.url) as redis:
        backend = RedisBackend(redis, clock=clock)
        await redis_server.stop()
        with caplog.at_level(logging.INFO, logger="proxy.ratelimit.redis"), anyio.fail_after(10):
            for _ in range(20):
                await backend.hit([TIGHT])
            clock.advance(60.0)
            await backend.hit([TIGHT])
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith(
        "Redis rate-limit store failed 1 time(s) since the last report (ConnectionError"
    )
    assert lines[1].startswith("Redis rate-limit store failed 20 time(s) since the last report")
    assert backend.errors == 21


@pytest.mark.slow
async def test_a_replica_recovers_by_itself_when_redis_comes_back(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    async with replica(redis_server.url, failure_mode="fail_closed") as backend:
        with caplog.at_level(logging.INFO, logger="proxy.ratelimit.redis"), anyio.fail_after(15):
            assert (await backend.hit([TIGHT])).allowed  # a pooled connection and a loaded script
            await redis_server.stop()
            assert (await backend.hit([TIGHT])).degraded
            await redis_server.start()  # same port, empty: no data, no scripts
            back = await backend.hit([TIGHT])
            assert (back.allowed, back.degraded) == (True, False)
            assert not (await backend.hit([TIGHT])).allowed  # and it counts again
    assert "reachable again" in caplog.records[-1].getMessage()


async def test_a_redis_that_does_not_answer_costs_at_most_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (backlog) and never reads them
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        async with replica(url, timeout=0.1) as backend:
            with anyio.fail_after(2):
                started = anyio.current_time()
                outcome = await backend.hit([TIGHT])
                elapsed = anyio.current_time() - started
    assert (outcome.allowed, outcome.degraded, backend.errors) == (True, True, 1)
    assert elapsed < 0.5


@pytest.mark.slow
async def test_open_backend_connects_to_redis_from_settings(redis_server: RedisServer) -> None:
    settings = RateLimitSettings(backend="redis", redis_url=redis_server.url, key_prefix="mf:")
    async with open_backend(settings) as backend, inspector(redis_server.url) as redis:
        assert isinstance(backend, RedisBackend)
        with anyio.fail_after(5):
            assert (await backend.hit([TIGHT])).allowed
            assert await redis.exists("mf:tight") == 1


async def test_no_limits_allow_without_asking_redis_and_nonsense_raises() -> None:
    async with replica("redis://127.0.0.1:1/0") as backend:  # nothing listens on port 1
        assert await backend.hit([]) == LimitOutcome(allowed=True)
        with pytest.raises(ValueError, match="need interval"):
            await backend.hit([LimitCheck("k", 1.0, 0)])
        assert backend.errors == 0
