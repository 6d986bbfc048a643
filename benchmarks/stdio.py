"""A fixture server reached directly over stdio: the like-for-like baseline for Manifold's stdio servers.

The SDK's stdio server costs more CPU per call than its Streamable HTTP one (it reads stdin through
a worker thread), so "through Manifold to a stdio server" is also compared with "straight to the
same stdio server". Requests from every worker share the one pipe pair, told apart by id, exactly
as Manifold shares it.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import anyio
import orjson

from benchmarks.clients import HttpPoster, PosterFactory, Reply
from benchmarks.load import PROTOCOL_VERSION, WrongAnswer
from tests.fixtures.spawn import fixture_command

__all__ = ["StdioServer", "stdio_fixture"]

_SESSION: Final = "stdio"  # stands in for an Mcp-Session-Id: a pipe is one session
_LINE_LIMIT: Final = 1 << 22
_START_TIMEOUT: Final = 60.0


class StdioServer:
    """One stdio server process; many concurrent requests on its pipes, matched by id."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._pending: dict[int, asyncio.Future[bytes]] = {}

    @property
    def pid(self) -> int:
        return self.process.pid

    async def read_loop(self) -> None:
        while line := await self._stdout.readline():
            request_id = orjson.loads(line).get("id")
            future = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
            if future is not None and not future.done():
                future.set_result(line)
        for future in self._pending.values():
            future.set_exception(WrongAnswer("the stdio server closed its stdout"))

    async def request(self, request_id: int, body: bytes) -> bytes:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._stdin.write(body + b"\n")
        return await future

    def notify(self, body: bytes) -> None:
        self._stdin.write(body + b"\n")

    def poster_factory(self) -> PosterFactory:
        """Posters that speak to this server (the URL they are given is ignored)."""

        async def open_poster(_: str) -> HttpPoster:
            return _StdioPoster(self)

        return open_poster


class _StdioPoster:
    """The load generator's poster interface over the shared pipes: answers look like HTTP 200 JSON."""

    def __init__(self, server: StdioServer) -> None:
        self._server = server

    async def post(self, body: bytes, session_id: str | None = None) -> Reply:
        request_id = orjson.loads(body).get("id")
        if not isinstance(request_id, int):
            self._server.notify(body)
            return Reply(202, "", _SESSION, b"")
        return Reply(200, "application/json", _SESSION, await self._server.request(request_id, body))

    async def aclose(self) -> None:
        return None


@asynccontextmanager
async def stdio_fixture(
    name: str, log_path: Path, *, tools: int, page_size: int
) -> AsyncIterator[StdioServer]:
    """The fixture server as our own child over stdio, initialized; stopped (bounded) on exit.

    Raises:
        WrongAnswer: it did not answer ``initialize``.
        TimeoutError: not within a minute.
    """
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *fixture_command(name, tools=tools, page_size=page_size),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            limit=_LINE_LIMIT,
        )
    server = StdioServer(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.read_loop)
            with anyio.fail_after(_START_TIMEOUT):
                params = {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "manifold-bench", "version": "0"},
                }
                init = orjson.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
                answer = orjson.loads(await server.request(0, init))
                if "result" not in answer:
                    raise WrongAnswer(f"stdio {name}: initialize failed: {answer!r:.300}")
                server.notify(orjson.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            try:
                yield server
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            if process.stdin is not None:
                process.stdin.close()
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
