"""Nothing a client sends freezes the event loop (issue #14), against a real ``manifold serve``:
a 4 MiB URI against a resource template with ``{+…}`` parts, and tool arguments that would make a
backtracking regex engine run for ever. Each hostile request gets its answer, and meanwhile
another client's call is served promptly."""

from __future__ import annotations

import io
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest

from tests.interaction.harness import (
    RunningManifold,
    another_client_is_served,
    fixture_server,
    raw_session,
    rss_mib,
    running_manifold,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CATASTROPHIC = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
PROMPTLY = 5.0  # seconds for another client's call meanwhile: ~0.1 s when idle; room for a busy box
HOSTILE_ROUNDS = 3


def hostile_server() -> dict[str, Any]:
    server = fixture_server("hostile", tools=1)
    server["args"] += ["--resource-template", "s3://{+bucket}/{+key}"]
    server["args"] += ["--checked-schema", orjson.dumps(CATASTROPHIC).decode()]
    return server


@pytest.fixture
async def manifold(tmp_path: Path) -> AsyncIterator[RunningManifold]:
    config = {
        # Room for a 4 MiB URI and its envelope: the matcher itself is under test, not the bound.
        "limits": {"max_request_bytes": 8 * 1024 * 1024, "max_uri_bytes": 8 * 1024 * 1024},
        "servers": {"hostile": hostile_server(), "alpha": fixture_server("alpha", tools=1)},
    }
    async with running_manifold(tmp_path, config) as running:
        yield running


async def request(http: aiohttp.ClientSession, url: str, session: str, method: str, params: Any) -> Any:
    """One JSON-RPC request in ``session``; its decoded answer (a large body goes as a stream)."""
    body = io.BytesIO(orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": session,
    }
    with anyio.fail_after(60):
        async with http.post(url, data=body, headers=headers) as response:
            assert response.status == 200, (response.status, await response.text())
            return orjson.loads(await response.read())


async def served_meanwhile(manifold: RunningManifold, hostile: Any) -> float:
    """Run ``hostile()`` ``HOSTILE_ROUNDS`` times while another client calls a tool once the first
    round is under way; the seconds that call took."""
    started = anyio.Event()
    took = 0.0

    async def attack() -> None:
        for _ in range(HOSTILE_ROUNDS):
            started.set()
            await hostile()

    async with anyio.create_task_group() as tg:
        tg.start_soon(attack)
        await started.wait()
        began = time.perf_counter()
        await another_client_is_served(manifold, "alpha.echo", {"meanwhile": True})
        took = time.perf_counter() - began
    return took  # noqa: RET504 (measured inside, returned once the attack's rounds have ended too)


async def test_a_4_mib_uri_against_a_plus_template_is_answered_while_others_are_served(
    manifold: RunningManifold,
) -> None:
    rss_before = rss_mib(manifold.process)
    answers: list[Any] = []
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, manifold.url)
        uris = ["s3://" + "a/" * (2 * 1024 * 1024), "s3://" + "a" * (4 * 1024 * 1024)]  # many splits; none

        async def read() -> None:
            uri = uris[len(answers) % 2]
            answers.append(await request(http, manifold.url, session, "resources/read", {"uri": uri}))

        took = await served_meanwhile(manifold, read)

    assert took < PROMPTLY
    assert len(answers) == HOSTILE_ROUNDS
    matched, unmatched = answers[0], answers[1]
    assert matched["result"]["contents"][0]["text"] == f"{len(uris[0])} characters"  # routed by template
    assert unmatched["error"]["code"] in (-32002, -32602)  # no template matches: not found
    assert rss_mib(manifold.process) - rss_before < 100  # a few copies of 4 MiB at most, then freed


async def test_a_uri_past_the_limit_is_refused_before_routing_and_counted(tmp_path: Path) -> None:
    config = {"limits": {"max_uri_bytes": 1024}, "servers": {"hostile": hostile_server()}}
    async with running_manifold(tmp_path, config) as manifold, aiohttp.ClientSession() as http:
        session = await raw_session(http, manifold.url)
        for method in ("resources/read", "resources/subscribe"):
            answer = await request(http, manifold.url, session, method, {"uri": "s3://b/" + "k" * 2000})
            assert answer["error"]["code"] == -32600, answer
            assert answer["error"]["data"] == {"limit": "max_uri_bytes", "max": 1024}
        fits = await request(http, manifold.url, session, "resources/read", {"uri": "s3://b/" + "k" * 900})
        assert "result" in fits, fits
        async with http.get(manifold.url.replace("/mcp", "/metrics")) as response:
            assert 'manifold_limit_refusals_total{limit="max_uri_bytes"} 2.0' in await response.text()


async def test_a_catastrophic_pattern_in_a_tools_schema_is_answered_at_once_while_others_are_served(
    manifold: RunningManifold,
) -> None:
    answers: list[tuple[float, Any]] = []
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, manifold.url)

        async def call() -> None:
            began = time.perf_counter()
            arguments = {"s": "a" * 50_000 + "!"}  # a backtracking engine: 2**50000 steps
            body = await request(
                http, manifold.url, session, "tools/call", {"name": "hostile.checked", "arguments": arguments}
            )
            answers.append((time.perf_counter() - began, body))

        took = await served_meanwhile(manifold, call)
        valid = await request(
            http,
            manifold.url,
            session,
            "tools/call",
            {"name": "hostile.checked", "arguments": {"s": "a" * 50_000}},
        )

    assert took < PROMPTLY
    assert len(answers) == HOSTILE_ROUNDS
    for seconds, body in answers:
        result = body["result"]
        assert result["isError"] is True
        assert result["_meta"]["dev.manifold/outcome"] == "invalid_arguments"
        text = result["content"][0]["text"]
        assert text.startswith("Invalid arguments for hostile.checked:\n- arguments.s: 'aaaa")
        assert seconds < PROMPTLY  # checked inline in linear time, not ground at for the 10 s deadline
    assert valid["result"]["content"][0]["text"] == "checked"
