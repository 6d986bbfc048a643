"""An ended session stays ended: real ``manifold serve`` replicas sharing ``sessions.secret`` (and
a private redis-server on loopback), attacked with the signed id of a session that was DELETEd,
or that outlived ``sessions.max_lifetime``.

The attack: a signed id lets any replica take its session over. Before ids carried an expiry and
ended ids were shared, a DELETEd id came back on another replica at once, and on its own replica
as soon as that replica had forgotten it (``idle_timeout`` later).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from tests.interaction.harness import RunningManifold, post, raw_session, running_manifold
from tests.ratelimit.redis_server import REDIS_SERVER, RedisServer, running_redis

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SECRET = "replicas-share-this-secret-of-32+chars"
IDLE = 1.0  # seconds: small, so that a replica forgets idle sessions within the test


@pytest.fixture
async def redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (needed to share ended sessions between replicas)")
    (tmp_path / "redis").mkdir()
    async with running_redis(tmp_path / "redis") as server:
        yield server


@asynccontextmanager
async def replicas(tmp_path: Path, count: int, **sessions: Any) -> AsyncIterator[list[RunningManifold]]:
    config = {"sessions": {"secret": SECRET, "idle_timeout": IDLE, **sessions}}
    async with AsyncExitStack() as stack:
        running = []
        for n in range(count):
            (tmp_path / f"r{n}").mkdir(exist_ok=True)
            running.append(await stack.enter_async_context(running_manifold(tmp_path / f"r{n}", config)))
        yield running


async def ping(http: aiohttp.ClientSession, manifold: RunningManifold, session_id: str) -> int:
    status, _, _ = await post(
        http, manifold.url, {"jsonrpc": "2.0", "id": 7, "method": "ping"}, {"Mcp-Session-Id": session_id}
    )
    return status


async def delete(http: aiohttp.ClientSession, manifold: RunningManifold, session_id: str) -> int:
    async with http.delete(manifold.url, headers={"Mcp-Session-Id": session_id}) as response:
        return response.status


async def logged(manifold: RunningManifold, pattern: str, timeout: float = 15) -> None:
    """Wait (bounded) until ``manifold`` logs a line matching ``pattern``: the replica's own
    expirer has no other outside sign."""
    with anyio.fail_after(timeout):
        while not re.search(pattern, manifold.log()):  # noqa: ASYNC110 - a line in another process
            await anyio.sleep(0.05)


async def idle_timeout_passed(http: aiohttp.ClientSession, manifold: RunningManifold) -> None:
    """Return once ``manifold`` has let ``idle_timeout`` pass from now: a witness session, used
    now and then left alone, is expired by its idle expiry."""
    witness = await raw_session(http, manifold.url)
    assert await ping(http, manifold, witness) == 200
    await logged(manifold, rf"session {re.escape(witness[:8])} expired after")


async def test_a_deleted_session_is_not_taken_over_by_another_replica_nor_later_by_its_own(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with (
        replicas(tmp_path, 2, revocations="redis", redis_url=redis.url) as (a, b),
        aiohttp.ClientSession() as http,
    ):
        session = await raw_session(http, a.url)
        assert await ping(http, b, session) == 200  # any replica serves it: taken over on B
        assert await delete(http, a, session) == 200  # ended on A, where it was opened
        assert await ping(http, a, session) == 404
        await logged(b, rf"session {re.escape(session[:8])} ended on another replica")
        assert await ping(http, b, session) == 404  # B held it live: told, and ended it
        survivor = await raw_session(http, a.url)
        await idle_timeout_passed(http, a)  # A has forgotten both the ended and the idle
        assert await ping(http, a, session) == 404  # forgotten is not forgiven
        assert await ping(http, b, session) == 404
        assert await ping(http, b, survivor) == 200  # idleness revokes nothing: taken over


async def test_a_session_deleted_on_one_replica_is_refused_by_one_that_never_saw_it(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with (
        replicas(tmp_path, 2, revocations="redis", redis_url=redis.url) as (a, b),
        aiohttp.ClientSession() as http,
    ):
        session = await raw_session(http, a.url)
        assert await delete(http, a, session) == 200
        assert await ping(http, b, session) == 404


async def test_with_memory_only_a_deleted_session_stays_ended_on_its_replica_after_idle_timeout(
    tmp_path: Path,
) -> None:
    async with replicas(tmp_path, 1, revocations="memory") as (a,), aiohttp.ClientSession() as http:
        session = await raw_session(http, a.url)
        assert await delete(http, a, session) == 200
        assert await ping(http, a, session) == 404
        await idle_timeout_passed(http, a)
        assert await ping(http, a, session) == 404


async def test_a_session_id_past_its_lifetime_is_refused_on_every_replica(tmp_path: Path) -> None:
    async with replicas(tmp_path, 2, max_lifetime=3) as (a, b), aiohttp.ClientSession() as http:
        session = await raw_session(http, a.url)
        assert await ping(http, b, session) == 200  # young: taken over on B
        # Kept busy on A (never idle) until its lifetime runs out: B's expirer ends its copy.
        with anyio.fail_after(15):
            while await ping(http, a, session) == 200:  # noqa: ASYNC110 - the clock is the event
                await anyio.sleep(0.2)
        assert await ping(http, a, session) == 404
        assert await ping(http, b, session) == 404
        assert "its id reached sessions.max_lifetime" in a.log()


async def revocation_errors(manifold: RunningManifold, operation: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(manifold.url.replace("/mcp", "/metrics")) as got:
        text = await got.text()
    prefix = f'manifold_session_revocation_errors_total{{operation="{operation}"}} '
    return sum(float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix))


async def test_while_redis_is_down_a_take_over_is_refused_and_counted(
    tmp_path: Path, redis: RedisServer
) -> None:
    """fail_closed (the default): while the store cannot say whether an id was ended elsewhere,
    no replica takes it over on trust; the client initializes again, which needs no Redis."""
    async with (
        replicas(tmp_path, 2, revocations="redis", redis_url=redis.url) as (a, b),
        aiohttp.ClientSession() as http,
    ):
        session = await raw_session(http, a.url)
        await redis.stop()
        try:
            assert await ping(http, b, session) == 404  # maybe DELETEd elsewhere: not taken over
            assert await ping(http, a, session) == 200  # held here: no Redis round trip at all
            assert await delete(http, a, session) == 200  # ended here; known here only for now
            assert await ping(http, a, session) == 404
            fresh = await raw_session(http, b.url)  # initialize again works without Redis
            assert await ping(http, b, fresh) == 200
        finally:
            await redis.start()
        assert await revocation_errors(b, "check") >= 1
        assert await revocation_errors(a, "revoke") >= 1
        assert "take-overs are refused (fail_closed)" in b.log()
