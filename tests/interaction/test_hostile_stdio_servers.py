"""End to end, issue #14: stdio servers that misbehave as processes, behind a real ``manifold serve``.

Behind Manifold: ``unruly`` (tests/fixtures/unruly_stdio_server.py: floods stderr, exits leaving a
grandchild on its pipes, answers too big or not UTF-8), ``crashy`` (the same script, crashing as it
starts) and ``notes`` (the well-behaved fixture server). Each attack ends with the same checks:
Manifold is alive, another client's call right after is served, the bad call got a clear error
well before the 60 s request timeout, and /healthz says what happened.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from tests.interaction.harness import (
    OBSERVER,
    REPO,
    RunningManifold,
    another_client_is_served,
    fixture_server,
    post,
    raw_session,
    refusals,
    rss_mib,
    running_manifold,
    wait_for_health,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

UNRULY = str(REPO / "tests" / "fixtures" / "unruly_stdio_server.py")
REQUEST_TIMEOUT = 60
AT_ONCE = 10.0  # seconds: a clear error on a loaded 2-core box, far below the request timeout
NOTES_ECHO = ("notes.echo", {"after": "attack"})


def servers() -> dict[str, Any]:
    unruly = {"command": sys.executable, "args": [UNRULY], "era": "handshake"}
    return {
        "unruly": {**unruly, "request_timeout": REQUEST_TIMEOUT},
        "crashy": {**unruly, "args": [UNRULY, "--crash-on-start"], "required": False},
        "notes": fixture_server("notes", tools=2),
    }


@pytest.fixture
async def manifold(tmp_path: Path) -> AsyncIterator[RunningManifold]:
    async with running_manifold(tmp_path, {"auth": OBSERVER, "servers": servers()}) as running:
        await wait_for_health(running, lambda h: h["servers"]["unruly"]["state"] == "ready")
        yield running


async def call(manifold: RunningManifold, tool: str, arguments: dict[str, Any]) -> tuple[float, Any]:
    """One tools/call on a session of its own: seconds it took, and the JSON-RPC body."""
    with anyio.fail_after(REQUEST_TIMEOUT + 10):
        async with aiohttp.ClientSession() as http:
            session_id = await raw_session(http, manifold.url)
            started = anyio.current_time()
            body = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
            _, _, answer = await post(http, manifold.url, body, {"Mcp-Session-Id": session_id})
            return anyio.current_time() - started, answer


def error_of(answer: Any) -> str:
    assert "error" in answer, answer
    return str(answer["error"]["message"])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_100_mb_stderr_flood_neither_slows_calls_nor_grows_the_log(manifold: RunningManifold) -> None:
    log_before = manifold.log_path.stat().st_size
    rss_before = rss_mib(manifold.process)
    echoes: list[float] = []
    flooded: list[Any] = []

    async def flood() -> None:
        flooded.append(await call(manifold, "unruly.stderr_flood", {"mib": 100}))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(flood)
            for _ in range(10):  # bounded: ten echoes on the same server while it floods
                took, answer = await call(manifold, "unruly.echo", {})
                assert "result" in answer, answer
                echoes.append(took)

    [(_, answer)] = flooded
    assert answer["result"]["content"][0]["text"] == "flooded"
    assert max(echoes) < AT_ONCE
    grew = manifold.log_path.stat().st_size - log_before
    assert grew < 1024 * 1024, f"the log grew by {grew} bytes"
    assert rss_mib(manifold.process) - rss_before < 50
    await another_client_is_served(manifold, *NOTES_ECHO)


@pytest.mark.parametrize("setsid", [False, True], ids=["same-group", "setsid"])
async def test_a_server_that_exits_leaving_a_grandchild_fails_the_call_at_once_and_restarts(
    tmp_path: Path, setsid: bool
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    try:
        async with running_manifold(tmp_path, {"auth": OBSERVER, "servers": servers()}) as manifold:
            await wait_for_health(manifold, lambda h: h["servers"]["unruly"]["state"] == "ready")
            took, answer = await call(
                manifold, "unruly.exit_leaving_grandchild", {"setsid": setsid, "pidfile": str(pidfile)}
            )
            assert took < AT_ONCE
            assert "server 'unruly' is unavailable: the process exited with code 5" in error_of(answer)
            await wait_for_health(manifold, lambda h: h["servers"]["unruly"]["state"] == "ready")
            took, answer = await call(manifold, "unruly.echo", {})
            assert "result" in answer, answer
            await another_client_is_served(manifold, *NOTES_ECHO)
        grandchild = int(pidfile.read_text())
        # In our process group it was killed with it; after setsid() no signal of ours reaches it
        # (documented): it holds nothing of Manifold's open, and the test ends it. An orphan is
        # reaped by init in its own time: wait for that (bounded), not for a signal.
        with anyio.move_on_after(5):
            while alive(grandchild) and not setsid:  # noqa: ASYNC110 - no event: the kernel reaps it
                await anyio.sleep(0.05)
        assert alive(grandchild) is setsid
    finally:
        if pidfile.exists() and alive(pid := int(pidfile.read_text())):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("id_last", [False, True], ids=["id-first", "id-last"])
async def test_a_17_mib_answer_fails_its_call_at_once_naming_the_limit(
    manifold: RunningManifold, id_last: bool
) -> None:
    took, answer = await call(manifold, "unruly.big_answer", {"mib": 17, "id_last": id_last})
    assert took < AT_ONCE
    message = error_of(answer)
    assert "server 'unruly' broke the protocol: its answer was too large" in message
    assert "limits.max_server_message_bytes" in message
    assert await refusals(manifold, "max_server_message_bytes") == 1
    _, answer = await call(manifold, "unruly.echo", {})  # the connection lives on
    assert "result" in answer, answer
    await another_client_is_served(manifold, *NOTES_ECHO)


async def test_an_oversized_notification_is_dropped_and_fails_no_call(manifold: RunningManifold) -> None:
    # Not an answer: no call of ours waited on it, so none fails (the head shows its "method").
    took, answer = await call(manifold, "unruly.big_notice", {"mib": 17})
    assert took < AT_ONCE
    assert "result" in answer, answer
    assert "dropped a request or notification from stdout" in manifold.log()


async def test_an_answer_that_is_not_utf8_fails_its_call_at_once(manifold: RunningManifold) -> None:
    took, answer = await call(manifold, "unruly.bad_utf8", {})
    assert took < AT_ONCE
    assert "server 'unruly' broke the protocol: its answer was not JSON" in error_of(answer)
    await another_client_is_served(manifold, *NOTES_ECHO)


def starts_of(manifold: RunningManifold, server: str) -> int:
    return manifold.log().count(f"server {server}: started pid")


async def counted(manifold: RunningManifold, prefix: str) -> float:
    """The value of the one series whose line starts with ``prefix`` (name and labels) on /metrics."""
    url = manifold.url.replace("/mcp", "/metrics")
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        text = await response.text()
    return float(next(line for line in text.splitlines() if line.startswith(prefix)).removeprefix(prefix))


async def restarts_counted(manifold: RunningManifold, server: str) -> float:
    return await counted(manifold, f'manifold_server_restarts_total{{server="{server}"}} ')


async def test_a_crash_loop_is_counted_from_its_first_restart_and_shows_its_stderr(
    manifold: RunningManifold,
) -> None:
    health = await wait_for_health(manifold, lambda h: "stderr" in h["servers"]["crashy"])
    assert health["servers"]["crashy"]["state"] != "ready"
    assert "unruly: fatal: cannot open the database" in health["servers"]["crashy"]["stderr"]
    # Only the observer role reads stderr lines, and what a server prints of its secrets is redacted.
    assert "hunter2" not in str(health), health
    # Every start after the first is a restart, the first one too: a counter one behind never
    # catches up, and this bounded wait fails (the backoff doubles from half a second).
    with anyio.fail_after(20):
        while True:
            starts = starts_of(manifold, "crashy")
            if starts >= 2 and await restarts_counted(manifold, "crashy") == starts - 1:
                break
            await anyio.sleep(0.1)  # a restart after a backoff has no event to wait on from outside
    await another_client_is_served(manifold, *NOTES_ECHO)
