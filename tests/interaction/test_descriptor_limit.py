"""End to end, issue #27: a burst of clients against ``manifold serve`` on asyncio's own event loop
(as it runs without the ``uvloop`` extra) under a lowered open-files limit.

Before: asyncio accepted up to 2048 connections per wake-up, so a burst took every descriptor
before the connection cap could refuse any; accept() then failed with EMFILE and asyncio logged
an error with a traceback for each attempt (tens of thousands of lines), and new clients timed
out. Now the burst waits in the kernel's queue, is accepted a few at a time, and past the cap
each client is told 503 with Retry-After; the log stays a handful of lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.fixtures.spawn import free_port
from tests.interaction.harness import REPO, _terminating, _wait_healthy, fixture_server, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

OPEN_FILES = 256  # the cap becomes 256 - 64 - 8 (one server) = 184
BURST = 600  # at once: far past the cap and the descriptor table
# Manifold's entry point on asyncio's loop: uvloop made unimportable, as where it is not installed.
ON_ASYNCIO = (
    "import runpy, sys; sys.modules['uvloop'] = None; runpy.run_module('proxy.cli', run_name='__main__')"
)


async def _connect(port: int, held: list[anyio.abc.SocketStream]) -> None:
    with anyio.fail_after(20):
        held.append(await anyio.connect_tcp("127.0.0.1", port))


async def _answer(port: int) -> bytes:
    """A new client's GET /mcp: the whole answer (the server closes after a refusal).

    While the burst's own refusals are still being drained (a second each), a connection past
    them is shed: answered and closed at once, which the client may see as a reset. That is the
    flood guard working; a new client then tries again, a bounded number of times."""
    with anyio.fail_after(20):
        for _ in range(50):
            try:
                async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                    await stream.send(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    chunks = []
                    while True:
                        try:
                            chunks.append(await stream.receive())
                        except anyio.EndOfStream:
                            return b"".join(chunks)
            except (anyio.BrokenResourceError, ConnectionResetError):
                await anyio.sleep(0.2)  # the drain ends on the server's clock: nothing to wait on
    raise AssertionError("every attempt was reset")


async def test_a_burst_past_the_descriptor_limit_gets_503s_and_a_quiet_log(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(
        tmp_path / "manifold.yaml",
        {"servers": {"notes": fixture_server("notes", tools=2)}, "limits": {"header_timeout": 30}},
    )
    log_path = tmp_path / "manifold.log"
    command = [
        *("prlimit", f"--nofile={OPEN_FILES}:{OPEN_FILES}", "--"),
        *(sys.executable, "-c", ON_ASYNCIO, "serve", "--config", str(config), "--port", str(port)),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(  # noqa: ASYNC220 (ended by _terminating, bounded)
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    held: list[anyio.abc.SocketStream] = []
    with _terminating(process):
        await _wait_healthy(f"http://127.0.0.1:{port}/healthz", process, log_path)
        started = len(log_path.read_text().splitlines())
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(BURST):
                    tg.start_soon(_connect, port, held)
            answers = [await _answer(port) for _ in range(5)]
        finally:
            for stream in held:
                await stream.aclose()
        assert process.poll() is None
    for answer in answers:
        head = answer.split(b"\r\n\r\n", 1)[0].lower()
        assert head.startswith(b"http/1.1 503"), answer
        assert b"retry-after: " in head, answer
        assert b"max_connections" in answer, answer
    lines = log_path.read_text().splitlines()[started:]
    assert not [line for line in lines if "out of system resource" in line or "Traceback" in line]
    assert len(lines) <= 20, "\n".join(lines[:40])
