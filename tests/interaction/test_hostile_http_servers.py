"""HTTP servers that misbehave, against a real ``manifold serve`` over loopback (issue #14).

The hostile server is ``tests/fixtures/hostile_http_server.py`` (100 MB bodies, garbage answers,
sessions forgotten with HTTP 400, 400,000 listed tools, a slow start), plus the npm
``server-everything`` over Streamable HTTP, killed and started again on its port mid-run. After
each case: Manifold lives, another client is served, the bad call got a clear error at once,
and /healthz and ``manifold_server_up`` say what happened.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.spawn import free_port
from tests.interaction.harness import (
    NPM_BIN,
    OBSERVER,
    REPO,
    RunningManifold,
    another_client_is_served,
    names_the_limit,
    post,
    raw_session,
    rss_mib,
    running_manifold,
    wait_for_health,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HOSTILE = REPO / "tests" / "fixtures" / "hostile_http_server.py"
AT_ONCE = 10.0  # seconds: a refused answer is known long before the request timeout (60 s)


@contextmanager
def _process(command: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})}
    )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


async def _listening(port: int, process: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(20):
        while True:
            assert process.poll() is None, f"the server exited with {process.returncode}"
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)  # a port that is not open yet has no event to wait on
                continue
            await stream.aclose()
            return


@asynccontextmanager
async def hostile_server(*options: str, port: int | None = None) -> AsyncIterator[str]:
    port = port or free_port()
    with _process([sys.executable, str(HOSTILE), "--port", str(port), *options]) as process:
        await _listening(port, process)
        yield f"http://127.0.0.1:{port}/mcp"


async def call(http: aiohttp.ClientSession, manifold: RunningManifold, session: str, tool: str) -> Any:
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    _, _, body = await post(http, manifold.url, message, {"Mcp-Session-Id": session})
    return body


async def list_tools(http: aiohttp.ClientSession, manifold: RunningManifold, session: str) -> list[str]:
    names: list[str] = []
    cursor = None
    for page in range(200):  # bounded: Manifold pages the catalog
        params: dict[str, Any] = {"cursor": cursor} if cursor else {}
        message = {"jsonrpc": "2.0", "id": 100 + page, "method": "tools/list", "params": params}
        _, _, body = await post(http, manifold.url, message, {"Mcp-Session-Id": session})
        names += [t["name"] for t in body["result"]["tools"]]
        cursor = body["result"].get("nextCursor")
        if cursor is None:
            return names
    raise AssertionError("the catalog never ended")


async def scrape(manifold: RunningManifold, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    async with aiohttp.ClientSession() as http, http.get(manifold.url.replace("/mcp", "/metrics")) as resp:
        text = await resp.text()
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def up(server: str) -> tuple[tuple[str, str], ...]:
    return (("server", server),)


# ---- one Manifold in front of the hostile server -------------------------------------------------


@pytest.fixture(scope="module")
async def hostile(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("hostile_http")
    async with hostile_server("--tools-listed", "400000") as url:
        config = {
            "auth": OBSERVER,
            "servers": {"h": {"url": url, "transport": "streamable-http", "required": True}},
        }
        async with running_manifold(tmp, config) as manifold:
            yield manifold


async def test_a_400_000_tool_listing_keeps_the_first_max_server_items_and_says_so(
    hostile: RunningManifold,
) -> None:
    health = await wait_for_health(hostile, lambda h: h["servers"]["h"]["state"] == "ready")
    assert health["servers"]["h"]["limits"] == {
        "tools": "listed more than 10000; kept the first 10000 (limits.max_server_items)"
    }
    assert (await scrape(hostile, "manifold_limit_refusals_total"))[(("limit", "max_server_items"),)] >= 1
    assert hostile.log().count("keeping the first 10000 (limits.max_server_items)") == 1
    async with aiohttp.ClientSession() as http:
        names = await list_tools(http, hostile, await raw_session(http, hostile.url))
    assert len(names) == 10_000
    assert names[:2] == ["h.echo", "h.huge"]
    assert rss_mib(hostile.process) < 250, "a capped catalog of 10,000 small tools"


async def test_a_100_mb_answer_fails_its_call_at_once_naming_the_limit_and_costs_no_memory(
    hostile: RunningManifold,
) -> None:
    before = rss_mib(hostile.process)
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, hostile.url)
        started = time.monotonic()
        with anyio.fail_after(AT_ONCE):
            body = await call(http, hostile, session, "h.huge")
        elapsed = time.monotonic() - started
    assert "error" in body, body
    assert names_the_limit(body, "max_server_message_bytes"), body
    assert elapsed < AT_ONCE
    assert rss_mib(hostile.process) - before < 50
    await another_client_is_served(hostile, "h.echo", {"after": "huge"})


async def test_calls_failing_at_the_transport_make_the_server_failing_until_one_succeeds(
    hostile: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, hostile.url)
        for _ in range(5):  # limits.failures_until_unready
            body = await call(http, hostile, session, "h.garbage")
            assert "error" in body, body
        health = await wait_for_health(hostile, lambda h: h["servers"]["h"]["state"] != "ready", timeout=5)
        assert health["servers"]["h"]["state"] == "failing"
        assert "its last 5 calls failed" in health["servers"]["h"]["reason"]
        assert (await scrape(hostile, "manifold_server_up"))[up("h")] == 0
        async with http.get(hostile.url.replace("/mcp", "/readyz")) as readyz:
            assert (readyz.status, (await readyz.json())["waiting_for"]) == (503, ["h"])
        body = await call(http, hostile, session, "h.bad")  # the server's own error: it answers
        assert body["error"]["message"] == "Bad Request: arguments rejected", body
    await wait_for_health(hostile, lambda h: h["servers"]["h"]["state"] == "ready", timeout=5)
    assert (await scrape(hostile, "manifold_server_up"))[up("h")] == 1
    await another_client_is_served(hostile, "h.echo", {})


async def test_a_server_that_forgets_its_sessions_and_answers_400_is_re_initialized(
    hostile: RunningManifold,
) -> None:
    async with aiohttp.ClientSession() as http:
        session = await raw_session(http, hostile.url)
        assert "result" in await call(http, hostile, session, "h.forget")
        with anyio.fail_after(AT_ONCE):
            body = await call(http, hostile, session, "h.echo")
    assert "result" in body, body
    assert "the session expired; started a new one" in hostile.log()
    await another_client_is_served(hostile, "h.echo", {})


# ---- server-everything, restarted on its port ----------------------------------------------------


@contextmanager
def everything_over_http(port: int) -> Iterator[subprocess.Popen[bytes]]:
    with _process([str(NPM_BIN / "mcp-server-everything"), "streamableHttp"], {"PORT": str(port)}) as p:
        yield p


async def test_server_everything_restarted_mid_run_is_re_initialized_and_served(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    config = {"auth": OBSERVER, "servers": {"ev": {"url": url, "transport": "streamable-http"}}}
    with everything_over_http(port) as first:
        await _listening(port, first)
        async with running_manifold(tmp_path, config) as manifold:
            await another_client_is_served(manifold, "ev.echo", {"message": "before"})
            first.terminate()
            first.wait(timeout=5)
            with everything_over_http(port) as second:
                await _listening(port, second)
                async with aiohttp.ClientSession() as http:
                    session = await raw_session(http, manifold.url)
                    outcomes = []
                    for _ in range(3):  # a pooled connection to the dead process may fail one call
                        message = {
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "tools/call",
                            "params": {"name": "ev.echo", "arguments": {"message": "after"}},
                        }
                        with anyio.fail_after(AT_ONCE):
                            _, _, body = await post(http, manifold.url, message, {"Mcp-Session-Id": session})
                        outcomes.append("result" in body and not body["result"].get("isError"))
                        if outcomes[-1]:
                            break
                assert outcomes[-1], (outcomes, manifold.log()[-3000:])
                assert outcomes.count(False) <= 1
                assert "the session expired; started a new one" in manifold.log()
                health = await wait_for_health(manifold, lambda h: True)
                assert health["servers"]["ev"]["state"] == "ready"
                assert (await scrape(manifold, "manifold_server_up"))[up("ev")] == 1


# ---- start-up: listening at once -----------------------------------------------------------------


async def _list_changed(http: aiohttp.ClientSession, url: str, session: str) -> None:
    """Read the session's GET stream until tools/list_changed arrives."""
    headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session}
    async with http.get(url, headers=headers) as stream:
        assert stream.status == 200
        async for line in stream.content:
            if line.startswith(b"data:") and b"notifications/tools/list_changed" in line:
                return


async def test_healthz_answers_at_once_and_a_slow_server_joins_later_with_list_changed(
    tmp_path: Path,
) -> None:
    async with (
        hostile_server("--tools-listed", "3") as fast,
        hostile_server("--tools-listed", "4", "--slow-start", "6") as slow,
    ):
        config = {
            "auth": OBSERVER,
            "servers": {
                "fast": {"url": fast, "transport": "streamable-http"},
                "slow": {
                    "url": slow,
                    "transport": "streamable-http",
                    "connect_timeout": 20,
                    "required": True,
                },
            },
        }
        started = time.monotonic()
        async with running_manifold(tmp_path, config, settled=False) as manifold:
            answered_after = time.monotonic() - started
            health = await wait_for_health(manifold, lambda h: h["servers"]["fast"]["state"] == "ready")
            assert health["servers"]["slow"]["state"] == "starting"
            async with aiohttp.ClientSession() as http:
                async with http.get(manifold.url.replace("/mcp", "/readyz")) as readyz:
                    assert (readyz.status, (await readyz.json())["waiting_for"]) == (503, ["slow"])
                session = await raw_session(http, manifold.url)
                assert await list_tools(http, manifold, session) == ["fast.echo", "fast.huge", "fast.garbage"]
                with anyio.fail_after(20):
                    await _list_changed(http, manifold.url, session)
                names = await list_tools(http, manifold, session)
                slow_tools = ["slow.echo", "slow.huge", "slow.garbage", "slow.bad"]
                assert sorted(names) == sorted(["fast.echo", "fast.huge", "fast.garbage", *slow_tools])
                async with http.get(manifold.url.replace("/mcp", "/readyz")) as readyz:
                    assert readyz.status == 200
    # Python and Manifold's imports take most of it; the slow server's 6 s are not in it.
    assert answered_after < 5, orjson.dumps({"healthz after": answered_after}).decode()
