"""Fixtures for rate-limit tests: a private redis-server per test, and a hand-driven clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.ratelimit.clock import FakeClock
from tests.ratelimit.redis_server import REDIS_SERVER, RedisServer, running_redis


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (needed to test the shared Redis backend)")
    async with running_redis(tmp_path) as server:
        yield server
