"""The stdio transport: an MCP server as a child process speaking newline-delimited JSON.

The child runs in a session (process group) of its own, so that stopping it also stops
what it spawned (``npx`` starts ``node``, which may start more). Stopping follows the
spec's order: close stdin, wait, SIGTERM, wait, SIGKILL. The child's stderr goes to our
log, one line a record, tagged with the server id.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final

import anyio
import anyio.abc

from proxy.errors import ProtocolError, ServerUnavailable
from proxy.outbound.transport import Received, unusable_answer
from proxy.protocol import jsonrpc
from proxy.protocol.framing import LineBuffer, LineTooLong
from proxy.protocol.jsonrpc import DEFAULT_MAX_DEPTH, Message

__all__ = ["MAX_LINE", "StdioTransport"]

logger = logging.getLogger("proxy.outbound.stdio")

# What a child inherits from our environment unless the config names more: enough to find
# programs and a home, never our own secrets (the same set the official SDKs pass on).
_INHERITED_ENV: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")
_READ_CHUNK: Final = 65536
MAX_LINE: Final = 16 * 1024 * 1024  # bytes in one message line from a server


class _StdioLink:
    def __init__(self, server_id: str, process: anyio.abc.Process, *, max_depth: int, max_line: int) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._server_id = server_id
        self._process = process
        self._stdin = process.stdin
        self._stdout = process.stdout
        self._max_depth = max_depth
        self._lines = LineBuffer(max_line)
        self._ready: deque[bytes | LineTooLong] = deque()
        self._send_lock = anyio.Lock()
        self._closed_reason: str | None = None

    async def send(self, message: Message, *, headers: Mapping[str, str] | None = None) -> None:
        """Write one line; ``headers`` are ignored: stdio has no header layer.

        Raises:
            ServerUnavailable: the process is gone or its stdin closed.
            Unencodable: ``message`` cannot be written as JSON.
        """
        if self._closed_reason is not None:
            raise ServerUnavailable(self._server_id, self._closed_reason)
        data = (
            jsonrpc.encode(message) + b"\n"
        )  # before the lock: a message that cannot go out holds no one up
        try:
            async with self._send_lock:
                await self._stdin.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise ServerUnavailable(self._server_id, f"cannot write to the process: {exc!r}") from None

    async def receive(self) -> Received:
        """The next message on stdout; a line that is not one is dropped (and logged), unless it
        is an answer too deep to use, which fails the request it answers.

        Raises:
            ServerUnavailable: the process closed its stdout (exited).
        """
        while True:
            while self._ready:
                line = self._ready.popleft()
                if isinstance(line, LineTooLong):
                    logger.warning("server %s: dropped a line from stdout: %s", self._server_id, line)
                    continue
                try:
                    return jsonrpc.parse(line, max_depth=self._max_depth), None
                except ProtocolError as exc:
                    # A server that prints garbage on stdout breaks only the lines it garbles.
                    failed = unusable_answer(self._server_id, exc)
                    if failed is not None:
                        return failed, None
                    logger.warning(
                        "server %s: dropped a line from stdout that is not JSON-RPC: %s", self._server_id, exc
                    )
            try:
                chunk = await self._stdout.receive(_READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                raise ServerUnavailable(self._server_id, await self._exit_reason()) from None
            self._ready.extend(self._lines.feed(chunk))

    async def _exit_reason(self) -> str:
        with anyio.move_on_after(1.0):
            code = await self._process.wait()
            self._closed_reason = f"the process exited with code {code}"
            return self._closed_reason
        self._closed_reason = "the process closed its stdout"
        return self._closed_reason


class StdioTransport:
    """Starts ``command args…`` for each :meth:`connect` and stops it on exit."""

    def __init__(
        self,
        server_id: str,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        shutdown_grace: float = 2.0,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_line: int = MAX_LINE,
    ) -> None:
        """``max_depth`` and ``max_line`` bound each message the server writes: its nesting, and
        its bytes."""
        self.server_id = server_id
        self._max_depth = max_depth
        self._max_line = max_line
        self._argv = [command, *args]
        self._env = {k: v for k in _INHERITED_ENV if (v := os.environ.get(k)) is not None} | dict(env or {})
        self._cwd = cwd
        self._grace = shutdown_grace

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[_StdioLink]:
        try:
            process = await anyio.open_process(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise ServerUnavailable(
                self.server_id, f"cannot start {self._argv[0]!r}: {exc.strerror or exc}"
            ) from None
        logger.info("server %s: started pid %d: %s", self.server_id, process.pid, self._argv[0])
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._log_stderr, process)
            try:
                yield _StdioLink(self.server_id, process, max_depth=self._max_depth, max_line=self._max_line)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._stop(process)
                tg.cancel_scope.cancel()

    async def _log_stderr(self, process: anyio.abc.Process) -> None:
        assert process.stderr is not None
        lines = LineBuffer(max_line=64 * 1024)
        try:
            async for chunk in process.stderr:
                for line in lines.feed(chunk):
                    if isinstance(line, LineTooLong):
                        logger.info("server %s: stderr: (dropped: %s)", self.server_id, line)
                    else:
                        logger.info("server %s: stderr: %s", self.server_id, line.decode(errors="replace"))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return

    async def _stop(self, process: anyio.abc.Process) -> None:
        """Close stdin → wait → SIGTERM the process group → wait → SIGKILL it."""
        if process.returncode is None and process.stdin is not None:
            with anyio.move_on_after(self._grace):
                await process.stdin.aclose()
                await process.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if process.returncode is not None:
                break
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            with anyio.move_on_after(self._grace):
                await process.wait()
        # Children that outlived the leader (the group is ours alone) go too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.aclose()
        logger.info(
            "server %s: process %d stopped (code %s)", self.server_id, process.pid, process.returncode
        )
