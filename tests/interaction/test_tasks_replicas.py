"""Tasks across replicas: two ``manifold serve`` processes sharing ``sessions.secret`` and a real
redis-server (``sessions.tasks: redis``), each with its own server-everything over stdio. A task
created on one replica is polled, read and listed on the other by the same identity; another
identity gets "unknown task" on either."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from tests.interaction.harness import (
    RunningManifold,
    everything_server,
    fixture_server,
    post,
    raw_session,
    running_manifold,
)
from tests.ratelimit.redis_server import REDIS_SERVER, running_redis

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "replicas-share-this-task-secret-32+chars"
KEYS = {
    "alice": "mfd_alice-replica-tasks-0123456789abcdefghij",
    "bob": "mfd_bob-replica-tasks-0123456789abcdefghijkl",
}
RESEARCH = "everything.simulate-research-query"


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[list[RunningManifold]]:
    if REDIS_SERVER is None:
        pytest.fail("redis-server is not installed (make system-deps)")
    async with AsyncExitStack() as stack:
        (tmp_path / "redis").mkdir()
        redis = await stack.enter_async_context(running_redis(tmp_path / "redis"))
        keys = [
            {"name": n, "key": "sha256:" + hashlib.sha256(k.encode()).hexdigest()} for n, k in KEYS.items()
        ]
        config: dict[str, Any] = {
            "auth": {"api_keys": keys},
            "sessions": {"secret": SECRET, "tasks": "redis", "redis_url": redis.url},
            "servers": {
                "everything": everything_server(),
                "fx": {**fixture_server("fx", tools=1), "tasks": "held"},
            },
        }
        for i in range(2):
            (tmp_path / f"r{i}").mkdir()
        yield [
            await stack.enter_async_context(running_manifold(tmp_path / f"r{i}", config)) for i in range(2)
        ]


def as_(who: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEYS[who]}"})


async def _call(
    http: aiohttp.ClientSession, url: str, session: str, n: int, method: str, params: dict[str, Any]
) -> Any:
    status, _, body = await post(
        http,
        url,
        {"jsonrpc": "2.0", "id": n, "method": method, "params": params},
        {"Mcp-Session-Id": session},
    )
    assert status == 200, body
    return body


async def test_a_task_made_on_one_replica_is_read_on_the_other_by_its_owner_only(
    replicas: list[RunningManifold],
) -> None:
    one, other = replicas
    async with as_("alice") as alice, as_("bob") as bob:
        here, there = await raw_session(alice, one.url), await raw_session(alice, other.url)
        params = {"name": RESEARCH, "arguments": {"topic": "tides"}, "task": {"ttl": 60_000}}
        created = await _call(alice, one.url, here, 2, "tools/call", params)
        task_id = created["result"]["task"]["taskId"]
        with anyio.fail_after(30):
            while True:  # polled where it runs: seen to end, its result is kept in Redis
                got = await _call(alice, one.url, here, 3, "tasks/get", {"taskId": task_id})
                if got["result"]["status"] == "completed":
                    break
                await anyio.sleep(0.3)
        # The other replica's server never heard of it: the answers come from the shared record.
        polled = await _call(alice, other.url, there, 4, "tasks/get", {"taskId": task_id})
        assert polled["result"]["status"] == "completed"
        result = await _call(alice, other.url, there, 5, "tasks/result", {"taskId": task_id})
        assert "Research Report: tides" in result["result"]["content"][0]["text"]
        listed = await _call(alice, other.url, there, 6, "tasks/list", {})
        assert [t["taskId"] for t in listed["result"]["tasks"]] == [task_id]
        for url in (one.url, other.url):
            session = await raw_session(bob, url)
            refused = await _call(bob, url, session, 7, "tasks/result", {"taskId": task_id})
            assert refused["error"]["data"] == {"reason": "unknown_task"}
            assert (await _call(bob, url, session, 8, "tasks/list", {}))["result"]["tasks"] == []


async def test_a_held_tasks_result_is_waited_for_and_read_on_the_other_replica(
    replicas: list[RunningManifold],
) -> None:
    one, other = replicas
    async with as_("alice") as alice:
        here, there = await raw_session(alice, one.url), await raw_session(alice, other.url)
        params = {"name": "fx.slow", "arguments": {"seconds": 2}, "task": {"ttl": 60_000}}
        created = await _call(alice, one.url, here, 2, "tools/call", params)
        task_id = created["result"]["task"]["taskId"]
        polled = await _call(alice, other.url, there, 3, "tasks/get", {"taskId": task_id})
        assert polled["result"]["status"] == "working"  # held on the first replica, seen on both
        with anyio.fail_after(20):  # the other replica waits for the outcome to reach Redis
            result = await _call(alice, other.url, there, 4, "tasks/result", {"taskId": task_id})
        assert result["result"]["content"][0]["text"] == "done"
        ended = await _call(alice, one.url, here, 5, "tasks/get", {"taskId": task_id})
        assert ended["result"]["status"] == "completed"


async def test_a_held_call_cancelled_on_the_other_replica_stops_where_it_runs_for_its_owner_only(
    replicas: list[RunningManifold],
) -> None:
    one, other = replicas
    async with as_("alice") as alice, as_("bob") as bob:
        here, there = await raw_session(alice, one.url), await raw_session(alice, other.url)
        params = {"name": "fx.hang", "arguments": {}, "task": {"ttl": 60_000}}
        created = await _call(alice, one.url, here, 2, "tools/call", params)
        task_id = created["result"]["task"]["taskId"]
        # Another identity's cancel, on either replica, reaches nothing.
        for url in (other.url, one.url):
            session = await raw_session(bob, url)
            refused = await _call(bob, url, session, 3, "tasks/cancel", {"taskId": task_id})
            assert refused["error"]["data"] == {"reason": "unknown_task"}
        polled = await _call(alice, one.url, here, 4, "tasks/get", {"taskId": task_id})
        assert polled["result"]["status"] == "working"
        # Its owner's cancel on the other replica: the replica running the call hears it and
        # cancels the call, whose end (the outcome) reaches the shared record.
        cancelled = await _call(alice, other.url, there, 5, "tasks/cancel", {"taskId": task_id})
        assert cancelled["result"]["status"] == "cancelled"
        started = anyio.current_time()
        with anyio.fail_after(10):  # fx.hang never answers: only a cancelled call ends
            result = await _call(alice, other.url, there, 6, "tasks/result", {"taskId": task_id})
        heard = anyio.current_time() - started
        assert result["error"]["message"] == "the task was cancelled"
        print(f"cross-replica cancel: the outcome was kept {heard * 1000:.0f} ms after the cancel")
        ended = await _call(alice, one.url, here, 7, "tasks/get", {"taskId": task_id})
        assert ended["result"]["status"] == "cancelled"
        # The server is free for the next call (the hung one was cancelled at it).
        plain = await _call(alice, one.url, here, 8, "tools/call", {"name": "fx.echo", "arguments": {"n": 1}})
        assert not plain["result"].get("isError")
