"""Ended session ids: bounded in memory, shared through a real redis-server on loopback, and
what a take-over is told while Redis is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import anyio
import pytest
from redis.asyncio import Redis

from proxy.clients.revocations import KEY_PREFIX, EndedIds, Operation, Revocations, revocations_for
from proxy.config.model import Config
from tests.ratelimit.clock import FakeClock
from tests.ratelimit.redis_server import REDIS_SERVER, RedisServer, running_redis

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (needed to test the shared revocation store)")
    async with running_redis(tmp_path) as server:
        yield server


def replica(
    url: str,
    clock: FakeClock,
    *,
    failure_mode: Literal["fail_open", "fail_closed"] = "fail_closed",
    errors: list[Operation] | None = None,
) -> Revocations:
    """One replica's store: its own memory and its own Redis client."""
    return Revocations(
        EndedIds(clock=clock),
        Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2),
        listener=Redis.from_url(url, socket_connect_timeout=2),
        failure_mode=failure_mode,
        timeout=2.0,
        on_error=errors.append if errors is not None else None,
        owns_client=True,
        clock=clock,
    )


# ---- in memory ----------------------------------------------------------------------------------


def test_an_ended_id_is_remembered_until_its_own_expiry_and_then_forgotten() -> None:
    clock = FakeClock(NOW)
    ended = EndedIds(clock=clock)
    ended.add("a", int(NOW) + 100)
    clock.advance(99)  # far past any idle_timeout: still ended
    assert ended.ended("a", int(NOW) + 100)
    clock.advance(1)  # the id itself is refused from now on: nothing left to remember
    assert not ended.ended("a", int(NOW) + 100)
    assert len(ended) == 0


def test_a_full_memory_drops_the_soonest_expiry_and_still_refuses_it() -> None:
    clock = FakeClock(NOW)
    ended = EndedIds(3, clock=clock)
    expiry = {"a": int(NOW) + 50, "b": int(NOW) + 10, "c": int(NOW) + 30}
    for nonce, expires in expiry.items():
        ended.add(nonce, expires)
    ended.add("d", int(NOW) + 40)  # one past the bound: "b" (soonest) is dropped, the floor rises
    assert len(ended) == 3
    assert ended.floor == expiry["b"]
    assert all(ended.ended(nonce, expires) for nonce, expires in {**expiry, "d": int(NOW) + 40}.items())
    assert ended.ended("never-ended", expiry["b"])  # as early as a dropped one: refused here
    assert not ended.ended("never-ended", expiry["b"] + 1)  # later ones are asked about by name
    for n in range(1000):  # however many are ended, memory stays bounded
        ended.add(f"x{n}", int(NOW) + 100 + n)
    assert len(ended) == 3


def test_an_id_already_past_its_expiry_is_not_stored() -> None:
    ended = EndedIds(clock=FakeClock(NOW))
    ended.add("old", int(NOW) - 1)
    assert len(ended) == 0


async def test_memory_only_revocation_is_seen_by_the_same_process_only() -> None:
    clock = FakeClock(NOW)
    here, elsewhere = Revocations(clock=clock), Revocations(clock=clock)
    await here.revoke("a", int(NOW) + 60)
    assert await here.ended("a", int(NOW) + 60)
    assert not await elsewhere.ended("a", int(NOW) + 60)
    assert not here.shared


# ---- in Redis -------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_an_id_revoked_on_one_replica_is_ended_on_another_until_it_expires(
    redis_server: RedisServer,
) -> None:
    clock = FakeClock(NOW)
    a, b = replica(redis_server.url, clock), replica(redis_server.url, clock)
    try:
        await a.revoke("nonce-1", int(NOW) + 120)
        assert await b.ended("nonce-1", int(NOW) + 120)
        assert not await b.ended("nonce-2", int(NOW) + 120)
        inspect = Redis.from_url(redis_server.url)
        try:
            ttl = await inspect.ttl(KEY_PREFIX + "nonce-1")
        finally:
            await inspect.aclose()
        assert 0 < ttl <= 120  # Redis forgets it when the id would be refused anyway
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.slow
async def test_a_replica_following_the_channel_hears_each_id_another_ends(redis_server: RedisServer) -> None:
    clock = FakeClock(NOW)
    a, b = replica(redis_server.url, clock), replica(redis_server.url, clock)
    subscribed, heard_it = anyio.Event(), anyio.Event()
    heard: list[str] = []

    async def revoked(nonce: str) -> None:
        heard.append(nonce)
        heard_it.set()

    async def held() -> None:  # called once subscribed: from then on nothing is missed
        subscribed.set()

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(b.follow, revoked, held)
                await subscribed.wait()
                await a.revoke("live-on-b", int(NOW) + 60)
                await heard_it.wait()
                tg.cancel_scope.cancel()
        assert heard == ["live-on-b"]
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.slow
async def test_after_a_gap_a_replica_asks_about_every_session_it_holds_at_once(
    redis_server: RedisServer,
) -> None:
    clock = FakeClock(NOW)
    a, b = replica(redis_server.url, clock), replica(redis_server.url, clock)
    try:
        await a.revoke("missed", int(NOW) + 60)
        held = [("missed", int(NOW) + 60), ("alive", int(NOW) + 60)]
        assert await b.ended_among(held) == {"missed"}
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "taken_over"), [("fail_closed", False), ("fail_open", True)])
async def test_with_redis_down_a_take_over_follows_the_failure_mode_and_is_counted(
    redis_server: RedisServer, mode: Literal["fail_open", "fail_closed"], taken_over: bool
) -> None:
    clock = FakeClock(NOW)
    errors: list[Operation] = []
    store = replica(redis_server.url, clock, failure_mode=mode, errors=errors)
    try:
        await redis_server.stop()
        await store.revoke("ended-here", int(NOW) + 60)
        assert await store.ended("ended-here", int(NOW) + 60)  # remembered here whatever Redis does
        assert await store.ended("unknown", int(NOW) + 60) is not taken_over
        assert errors == ["revoke", "check"]
        await redis_server.start()  # same port; the client reconnects on the next call
        assert not await store.ended("unknown", int(NOW) + 60)
    finally:
        await store.aclose()


def test_auto_uses_redis_when_rate_limits_do_and_memory_otherwise() -> None:
    assert not revocations_for(Config()).shared
    shared = Config.model_validate({"rate_limits": {"backend": "redis"}})
    assert revocations_for(shared).shared
    pinned = Config.model_validate(
        {"rate_limits": {"backend": "redis"}, "sessions": {"revocations": "memory"}}
    )
    assert not revocations_for(pinned).shared


def test_a_full_memory_under_steady_churn_says_so_once_a_minute_not_once_an_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(NOW)
    ended = EndedIds(10, clock=clock)
    with caplog.at_level("WARNING", logger="proxy.clients.revocations"):
        for n in range(200):  # every add past the bound raises the floor
            ended.add(f"id{n}", int(NOW) + 1000 + n)
        clock.advance(61)
        ended.add("late", int(NOW) + 5000)
    assert len(ended) == 10
    assert len([r for r in caplog.records if "ended sessions to remember" in r.getMessage()]) == 2


def test_the_default_bound_keeps_the_memory_of_ended_ids_to_a_few_megabytes() -> None:
    from proxy.clients.revocations import MAX_ENTRIES

    assert MAX_ENTRIES * 300 <= 4 * 1024 * 1024  # about 300 bytes an id (benchmarks/churn_memory.py)
