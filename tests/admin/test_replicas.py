"""Replicas sharing a real Redis: an action reaches every replica and the answer names which
acted; an overlay set on one is in force on the other within a second; garbage on the channel
or in the hash is ignored; without Redis an action is this replica's alone."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from proxy.admin.replicas import CHANNEL, OVERLAYS_KEY, Replicas
from proxy.enforce.overlays import Overlay, Overlays
from proxy.policy.model import Identity
from tests.ratelimit.redis_server import REDIS_SERVER, RedisServer, running_redis

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ANN = Identity("ann", frozenset({"dev"}), "api_key")


@pytest.fixture
async def redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (needed to share admin actions between replicas)")
    async with running_redis(tmp_path) as server:
        yield server


def handler(name: str, seen: list[tuple[str, str, dict[str, Any]]]) -> Any:
    async def handle(action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        seen.append((name, action, arguments))
        return {"acted": arguments.get("target") != "nothing-here"}

    return handle


@asynccontextmanager
async def replicas(url: str, *names: str) -> AsyncIterator[tuple[list[Replicas], list[Any]]]:
    seen: list[tuple[str, str, dict[str, Any]]] = []
    async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
        made = []
        for name in names:
            replica = Replicas(
                name,
                Overlays(),
                handler(name, seen),
                client=Redis.from_url(url),
                listener=Redis.from_url(url),
            )
            stack.push_async_callback(replica.aclose)
            tg.start_soon(replica.run)
            made.append(replica)
        with anyio.fail_after(5):
            for replica in made:
                await replica.following.wait()
        yield made, seen
        tg.cancel_scope.cancel()


async def test_an_action_reaches_every_replica_and_says_which_acted(redis: RedisServer) -> None:
    async with replicas(redis.url, "a", "b", "c") as ([a, _, _], seen):
        answer = await a.act("drain", {"target": "gh"})
    assert sorted(r["replica"] for r in answer["replicas"]) == ["a", "b", "c"]
    assert all(r["acted"] for r in answer["replicas"])
    assert answer["unanswered"] == 0
    assert sorted(name for name, _, _ in seen) == ["a", "b", "c"]


async def test_the_answer_comes_as_soon_as_every_replica_answered(redis: RedisServer) -> None:
    async with replicas(redis.url, "a", "b") as ([a, b], _):
        a._reply_wait = b._reply_wait = 10.0
        started = time.monotonic()
        answer = await a.act("drain", {"target": "gh"})
        assert time.monotonic() - started < 2.0  # not the whole reply_wait
    assert len(answer["replicas"]) == 2


async def test_an_overlay_set_on_one_replica_refuses_on_the_other_within_a_second(redis: RedisServer) -> None:
    async with replicas(redis.url, "a", "b") as ([a, b], _):
        now = time.time()
        await a.switch_off(Overlay("o1", "gh.t", None, now + 60, "ops", now))
        with anyio.fail_after(1):
            while b.overlays.refusing(ANN, "gh.t") is None:  # noqa: ASYNC110 - another replica's state
                await anyio.sleep(0.01)
        await b.switch_on("gh.t", None)
        with anyio.fail_after(1):
            while a.overlays.refusing(ANN, "gh.t") is not None:  # noqa: ASYNC110 - likewise
                await anyio.sleep(0.01)


async def test_garbage_on_the_channel_and_in_the_hash_is_ignored(redis: RedisServer) -> None:
    raw = Redis.from_url(redis.url)
    try:
        async with replicas(redis.url, "a", "b") as ([a, _], seen):
            await raw.hset(OVERLAYS_KEY, "junk", b"{not json")
            await raw.hset(OVERLAYS_KEY, "wrong", b'{"id": 1}')
            for junk in (
                b"\xff\xfe",
                b"[]",
                b'{"kind": "act"}',
                b'{"kind": "act", "id": "x", "action": 3}',
                b"x" * 70000,
            ):
                await raw.publish(CHANNEL, junk)
            await a.resync()
            answer = await a.act("drain", {"target": "gh"})  # the channel still works
        assert len(answer["replicas"]) == 2
        assert len(seen) == 2
        assert await raw.hgetall(OVERLAYS_KEY) == {}  # what is not an overlay is dropped
    finally:
        await raw.aclose()


async def test_without_redis_an_action_is_this_replicas_alone() -> None:
    seen: list[Any] = []
    replica = Replicas("solo", Overlays(), handler("solo", seen))
    await replica.run()  # returns at once
    answer = await replica.act("drain", {"target": "nothing-here"})
    assert answer == {"replicas": [{"replica": "solo", "acted": False}], "unanswered": 0}


async def test_while_redis_is_down_actions_are_done_here_and_overlays_refused_whole(
    redis: RedisServer,
) -> None:
    from proxy.admin.replicas import Unshared

    async with replicas(redis.url, "a") as ([a], seen):
        await redis.stop()
        answer = await a.act("drain", {"target": "gh"})
        assert [r["replica"] for r in answer["replicas"]] == ["a"]
        assert "Redis could not be reached" in answer["problem"]
        now = time.time()
        with pytest.raises(Unshared):
            await a.switch_off(Overlay("o1", "gh.t", None, now + 60, "ops", now))
        assert a.overlays.active() == []  # not in force here while no other replica has it
        with pytest.raises(Unshared):
            await a.switch_on("gh.t", None)
        await redis.start()
        await a.switch_off(Overlay("o2", "gh.t", None, now + 60, "ops", now))  # back: works again
        assert [o.id for o in a.overlays.active()] == ["o2"]
    assert len(seen) == 1
