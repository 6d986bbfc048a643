"""End to end, issue #14: what one client's messages and sessions can make ``manifold serve`` hold.

One real ``manifold serve`` with small limits (so each attack is quick) in front of the fixture
server ``notes``. Every attack ends with the same checks: the refusal names its limit, the limit's
refusals are counted in ``/metrics``, another client is still served, and the process holds no
more than 50 MiB over what it held before the attack.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import orjson
import pytest

from tests.interaction.harness import (
    RunningManifold,
    another_client_is_served,
    fixture_server,
    names_the_limit,
    post,
    raw_session,
    refusals,
    rss_mib,
    running_manifold,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMITS = {
    "max_request_bytes": 65536,
    "max_containers": 1000,
    "max_capabilities_bytes": 1024,
    "max_meta_bytes": 1024,
    "max_argument_bytes": 1024,
    "max_batch": 10,
    "batch_concurrency": 2,
    "max_sessions_per_identity": 4,
    "max_in_flight_per_session": 3,
}
ECHO = ("notes.echo", {"after": "attack"})
RSS_HEADROOM = 50.0  # MiB


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp_path = tmp_path_factory.mktemp("hostile-messages")
    config = {"servers": {"notes": fixture_server("notes", tools=2)}, "limits": LIMITS}
    async with running_manifold(tmp_path, config) as running:
        yield running


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class Attack:
    """Before: the RSS and the refusals so far. After: the checks every attack ends with."""

    def __init__(self, manifold: RunningManifold, limit: str) -> None:
        self.manifold, self.limit = manifold, limit

    async def __aenter__(self) -> Attack:
        self.rss = rss_mib(self.manifold.process)
        self.counted = await refusals(self.manifold, self.limit)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if exc[0] is not None:
            return
        await another_client_is_served(self.manifold, *ECHO)
        assert await refusals(self.manifold, self.limit) > self.counted, f"{self.limit} not counted"
        grown = rss_mib(self.manifold.process) - self.rss
        assert grown < RSS_HEADROOM, f"RSS grew {grown:.0f} MiB"


def initialize(capabilities: dict[str, Any], version: str = "2025-11-25") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "h"}},
    }


def call(tool: str, arguments: dict[str, Any], request_id: int = 2, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, **params},
    }


async def test_capabilities_past_their_limit_are_refused_and_ids_stay_small_and_distinct(
    manifold: RunningManifold, http: aiohttp.ClientSession
) -> None:
    async with Attack(manifold, "max_capabilities_bytes"):
        for _ in range(20):
            status, headers, body = await post(http, manifold.url, initialize({"x": "y" * 60_000}))
            assert status == 200, body
            assert names_the_limit(body, "limits.max_capabilities_bytes"), body
            assert "mcp-session-id" not in {k.lower() for k in headers}
    ids = []
    for _ in range(3):  # just under the limit, in capabilities Manifold does not act on
        status, headers, body = await post(http, manifold.url, initialize({"experimental": {"x": "y" * 900}}))
        assert status == 200, body
        ids.append(headers["mcp-session-id"])
    assert all(len(session_id) < 2048 for session_id in ids)
    assert len({session_id[:8] for session_id in ids}) == 3  # what a log line keeps tells them apart


async def test_a_body_of_many_empty_objects_is_refused_before_it_is_decoded(
    manifold: RunningManifold, http: aiohttp.ClientSession
) -> None:
    body = b"[" + b",".join([b"{}"] * 20_000) + b"]"  # 60 KB: under max_request_bytes
    async with Attack(manifold, "max_containers"):
        for _ in range(20):
            status, _, answer = await post(http, manifold.url, body)
            assert status == 400, answer
            assert names_the_limit(answer, "limits.max_containers"), answer


async def test_a_body_past_max_request_bytes_is_refused_with_413(
    manifold: RunningManifold, http: aiohttp.ClientSession
) -> None:
    async with Attack(manifold, "max_request_bytes"):
        status, _, answer = await post(http, manifold.url, call("notes.echo", {"x": "y" * 70_000}))
        assert status == 413, answer
        assert names_the_limit(answer, "limits.max_request_bytes"), answer


@pytest.mark.parametrize(
    ("message", "limit"),
    [
        (call("notes.echo", {"x": "y" * 2000}), "max_argument_bytes"),
        (call("notes.echo", {}, _meta={"trace": "y" * 2000}), "max_meta_bytes"),
    ],
)
async def test_a_request_part_past_its_limit_is_refused_as_that_request(
    manifold: RunningManifold, http: aiohttp.ClientSession, message: dict[str, Any], limit: str
) -> None:
    session_id = await raw_session(http, manifold.url)
    async with Attack(manifold, limit):
        status, _, answer = await post(http, manifold.url, message, {"Mcp-Session-Id": session_id})
        assert status == 200, answer
        assert answer["id"] == 2
        assert names_the_limit(answer, f"limits.{limit}"), answer


async def test_one_identity_past_its_session_limit_ends_its_longest_idle_session_or_is_refused(
    manifold: RunningManifold, http: aiohttp.ClientSession
) -> None:
    async with Attack(manifold, "max_sessions_per_identity"):
        opened = [
            await raw_session(http, manifold.url) for _ in range(LIMITS["max_sessions_per_identity"] + 1)
        ]
        # The first (longest idle) made room for the last, and is gone for good.
        status, _, _ = await post(http, manifold.url, call(*ECHO), {"Mcp-Session-Id": opened[0]})
        assert status == 404
        status, _, answer = await post(http, manifold.url, call(*ECHO), {"Mcp-Session-Id": opened[-1]})
        assert status == 200, answer
        assert "result" in answer, answer

        # Every session busy: a new one is refused, naming the limit; none of the busy ones ends.
        async def busy(session_id: str) -> None:
            slow = call("notes.slow", {"seconds": 3})
            status, _, answer = await post(http, manifold.url, slow, {"Mcp-Session-Id": session_id})
            assert (status, "result" in answer) == (200, True), answer

        async with anyio.create_task_group() as tg:
            for session_id in opened[1:]:
                tg.start_soon(busy, session_id)
            await anyio.sleep(1.0)  # the slow calls are under way (nothing outside shows it sooner)
            status, _, answer = await post(http, manifold.url, initialize({}))
            assert status == 200, answer
            assert names_the_limit(answer, "limits.max_sessions_per_identity"), answer


async def test_a_batch_past_max_batch_is_refused_whole(
    manifold: RunningManifold, http: aiohttp.ClientSession
) -> None:
    status, headers, _ = await post(http, manifold.url, initialize({}, "2025-03-26"))
    session = {"Mcp-Session-Id": headers["mcp-session-id"], "MCP-Protocol-Version": "2025-03-26"}
    pings = [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(LIMITS["max_batch"] + 1)]
    async with Attack(manifold, "max_batch"):
        status, _, answer = await post(http, manifold.url, orjson.dumps(pings), session)
        assert status == 400, answer
        assert names_the_limit(answer, "limits.max_batch"), answer


async def test_a_batch_runs_at_most_batch_concurrency_entries_at_once_and_answers_in_order(
    manifold: RunningManifold, http: aiohttp.ClientSession
) -> None:
    status, headers, _ = await post(http, manifold.url, initialize({}, "2025-03-26"))
    session = {"Mcp-Session-Id": headers["mcp-session-id"], "MCP-Protocol-Version": "2025-03-26"}
    slow = [call("notes.slow", {"seconds": 0.5}, request_id=i) for i in range(6)]
    started = time.monotonic()
    with anyio.fail_after(20):
        status, _, answers = await post(http, manifold.url, orjson.dumps(slow), session)
    took = time.monotonic() - started
    assert status == 200, answers
    assert [a["id"] for a in answers] == list(range(6))
    assert all("result" in a for a in answers), answers
    # Six half-second calls, two at a time: three rounds. All at once would take one.
    assert took >= 1.4, took


async def test_past_max_in_flight_a_sessions_request_is_refused_at_once(
    manifold: RunningManifold, http: aiohttp.ClientSession
) -> None:
    session_id = await raw_session(http, manifold.url)
    outcomes: list[tuple[float, Any]] = []

    async def one(request_id: int) -> None:
        started = time.monotonic()
        slow = call("notes.slow", {"seconds": 2}, request_id=request_id)
        _, _, answer = await post(http, manifold.url, slow, {"Mcp-Session-Id": session_id})
        outcomes.append((time.monotonic() - started, answer))

    async with Attack(manifold, "max_in_flight_per_session"):
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for request_id in range(LIMITS["max_in_flight_per_session"] + 3):
                    tg.start_soon(one, request_id)
    refused = [(took, a) for took, a in outcomes if names_the_limit(a, "limits.max_in_flight_per_session")]
    assert len(refused) == 3, outcomes
    assert all(took < 1.5 for took, _ in refused), refused  # answered at once, never queued
    assert sum("result" in a for _, a in outcomes) == LIMITS["max_in_flight_per_session"]
