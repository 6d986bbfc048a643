"""The stdio transport: an MCP server as a child process speaking newline-delimited JSON.

The child runs in a session (process group) of its own, so that stopping it also stops what it
spawned (``npx`` starts ``node``, which may start more). Stopping follows the spec's order: close
stdin, wait, SIGTERM the group, wait, SIGKILL it. :mod:`proxy.outbound.over_stdio.child` says why the process
is not ``anyio.open_process``'s.

Everything the server writes is bounded:

- its end is seen from the process itself (a pidfd), not from its stdout, which a grandchild may
  hold open: the link ends at once, with the exit code, and our pipe ends are closed;
- a stdout line past ``max_line`` (``limits.max_server_message_bytes``) or not decodable fails the
  request it answers at once, its id read from the line's first and last 4 KiB
  (:mod:`proxy.protocol.salvage`); an overlong line whose id cannot be read fails every request
  in flight on the link (the server broke its framing, so any of them may have been it);
- stderr is read by a task of its own, a chunk at a time, never holding the stdout reader up: the
  last lines are kept for diagnostics and a few a minute logged (:mod:`proxy.outbound.over_stdio.stderr`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Final

import anyio

from proxy.core.errors import ParseError, ProtocolError, ServerProtocolError, ServerUnavailable
from proxy.outbound.over_stdio.child import Child
from proxy.outbound.over_stdio.stderr import LINE_BYTES, StderrTail
from proxy.outbound.transport import Failed, Received, unusable_answer
from proxy.protocol import jsonrpc
from proxy.protocol.framing import LineBuffer, LineTooLong
from proxy.protocol.jsonrpc import DEFAULT_MAX_DEPTH, Message
from proxy.protocol.salvage import KEEP, answer_id, is_request

__all__ = ["MAX_LINE", "StdioTransport"]

logger = logging.getLogger("proxy.outbound.over_stdio.transport")

# What a child inherits from our environment unless the config names more: enough to find
# programs and a home, never our own secrets (the same set the official SDKs pass on).
_INHERITED_ENV: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")
MAX_LINE: Final = 16 * 1024 * 1024  # bytes in one message line from a server (the default)
# After the process exits, what it wrote before is read for this long (it is in the pipe already);
# then our pipe ends close, whoever else holds the other ends.
_DRAIN_AFTER_EXIT: Final = 0.2
_EXIT_AFTER_EOF: Final = 1.0  # seconds a closed stdout waits for the process's exit code


class _StdioLink:
    def __init__(self, server_id: str, child: Child, *, max_depth: int, max_line: int) -> None:
        self._server_id = server_id
        self._child = child
        self._max_depth = max_depth
        self._lines = LineBuffer(max_line, keep=KEEP)
        self._ready: deque[bytes | LineTooLong] = deque()
        self._closed_reason: str | None = None

    def exited(self, code: int) -> None:
        """The process ended: nothing more can be sent to it."""
        self._closed_reason = f"the process exited with code {code}"

    async def send(self, message: Message, *, headers: Mapping[str, str] | None = None) -> None:
        """Write one line; ``headers`` are ignored: stdio has no header layer.

        Raises:
            ServerUnavailable: the process is gone or its stdin closed.
            Unencodable: ``message`` cannot be written as JSON.
        """
        if self._closed_reason is not None:
            raise ServerUnavailable(self._server_id, self._closed_reason)
        # Encoded before the lock: a message that cannot go out holds no one up.
        data = jsonrpc.encode(message) + b"\n"
        try:
            await self._child.write(data)  # concurrent sends are ordered, and coalesced, there
        except anyio.ClosedResourceError:
            raise ServerUnavailable(self._server_id, self._closed_reason or "its stdin is closed") from None
        except OSError as exc:
            raise ServerUnavailable(self._server_id, f"cannot write to the process: {exc!r}") from None

    async def receive(self) -> Received:
        """The next message on stdout, or the failure of the request a broken line answered (see
        the module's docstring); a line that is neither is dropped and logged.

        Raises:
            ServerUnavailable: the process exited, or closed its stdout.
        """
        while True:
            while self._ready:
                received = self._take(self._ready.popleft())
                if received is not None:
                    return received, None
            try:
                chunk = await self._child.read("stdout")
            except anyio.ClosedResourceError:
                chunk = b""
            if not chunk:
                raise ServerUnavailable(self._server_id, await self._end_reason())
            self._ready.extend(self._lines.feed(chunk))

    def _take(self, line: bytes | LineTooLong) -> Message | Failed | None:
        if isinstance(line, LineTooLong):
            if is_request(line.head):  # the server's own request or notification: no call waits on it
                logger.warning(
                    "server %s: dropped a request or notification from stdout: %s", self._server_id, line
                )
                return None
            request_id = answer_id(line.head, line.tail)
            if request_id is None:
                logger.warning(
                    "server %s: a line from stdout was too long to tell which request it answered"
                    " (%s): every request in flight fails",
                    self._server_id,
                    line,
                )
                reason = f"it wrote a message too large to tell which request it answered: {line}"
                failure = ServerProtocolError(self._server_id, reason)
                failure.__cause__ = line  # the limit, counted where the failure lands
                return Failed(None, failure)
            logger.warning("server %s: answer to %r dropped: %s", self._server_id, request_id, line)
            refused = ServerProtocolError(self._server_id, f"its answer was too large: {line}")
            refused.__cause__ = line  # the limit, counted where the failure lands
            return Failed(request_id, refused)
        try:
            return jsonrpc.parse(line, max_depth=self._max_depth)
        except ProtocolError as exc:
            # A server that prints garbage on stdout breaks only the lines it garbles.
            failed = unusable_answer(self._server_id, exc)
            if failed is None and isinstance(exc, ParseError):
                request_id = answer_id(line[:KEEP], line[-KEEP:])
                if request_id is not None:
                    refused = ServerProtocolError(self._server_id, f"its answer was not JSON: {exc.message}")
                    failed = Failed(request_id, refused)
            if failed is None:
                logger.warning(
                    "server %s: dropped a line from stdout that is not JSON-RPC: %s", self._server_id, exc
                )
            return failed

    async def _end_reason(self) -> str:
        with anyio.move_on_after(_EXIT_AFTER_EOF):
            await self._child.exited.wait()
        code = self._child.returncode
        if code is not None:
            self.exited(code)
        self._closed_reason = self._closed_reason or "the process closed its stdout"
        return self._closed_reason


class StdioTransport:
    """Starts ``command args…`` for each :meth:`connect` and stops it on exit.

    The server's stderr outlives each process: :meth:`stderr_tail` is what the last ones wrote.
    """

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
        stderr_lines_kept: int = 50,
        stderr_lines_logged_per_minute: int = 60,
    ) -> None:
        """``max_depth`` and ``max_line`` bound each message the server writes: its nesting, and
        its bytes (``limits.max_depth``, ``limits.max_server_message_bytes``); the ``stderr_…``
        bounds are ``limits.stderr_lines_kept`` and ``limits.stderr_lines_logged_per_minute``."""
        self.server_id = server_id
        self._max_depth = max_depth
        self._max_line = max_line
        self._argv = [command, *args]
        self._env = {k: v for k in _INHERITED_ENV if (v := os.environ.get(k)) is not None} | dict(env or {})
        self._cwd = cwd
        self._grace = shutdown_grace
        self._stderr = StderrTail(kept=stderr_lines_kept, logged_per_minute=stderr_lines_logged_per_minute)

    def stderr_tail(self, count: int | None = None) -> list[str]:
        """The last ``count`` lines (all kept, by default) the server wrote to stderr, oldest first,
        each cut to 1 KiB."""
        return self._stderr.last(count)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[_StdioLink]:
        try:
            child = Child(self._argv, env=self._env, cwd=self._cwd)
        except OSError as exc:
            raise ServerUnavailable(
                self.server_id, f"cannot start {self._argv[0]!r}: {exc.strerror or exc}"
            ) from None
        logger.info("server %s: started pid %d: %s", self.server_id, child.pid, self._argv[0])
        link = _StdioLink(self.server_id, child, max_depth=self._max_depth, max_line=self._max_line)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_exit, child, link)
                tg.start_soon(self._read_stderr, child)
                try:
                    yield link
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop(child)
                    tg.cancel_scope.cancel()
        finally:
            child.close_all()
            notice = self._stderr.flush()
            if notice is not None:
                logger.info("server %s: stderr: %s", self.server_id, notice)
            code = child.returncode
            logger.info("server %s: process %d stopped (code %s)", self.server_id, child.pid, code)

    async def _watch_exit(self, child: Child, link: _StdioLink) -> None:
        """On the process's exit, end the link even while others hold its pipes open."""
        await child.watch()
        assert child.returncode is not None
        link.exited(child.returncode)
        await anyio.sleep(_DRAIN_AFTER_EXIT)
        child.close("stdout")  # the reader gets what is left, then ServerUnavailable
        child.close("stdin")

    async def _read_stderr(self, child: Child) -> None:
        lines = LineBuffer(LINE_BYTES, limit="stderr_line", keep=LINE_BYTES)
        try:
            while chunk := await child.read("stderr"):
                fed = lines.feed(chunk)
                kept = [line.head if isinstance(line, LineTooLong) else line for line in fed]
                cut = [isinstance(line, LineTooLong) for line in fed]
                for text in self._stderr.took(kept, time.monotonic(), cut=cut):
                    logger.info("server %s: stderr: %s", self.server_id, text)
        except anyio.ClosedResourceError:
            return

    async def _stop(self, child: Child) -> None:
        """Close stdin → wait → SIGTERM the process group → wait → SIGKILL it."""
        if not child.exited.is_set():
            child.close("stdin")
            with anyio.move_on_after(self._grace):
                await child.reaped()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if child.exited.is_set() or not child.signal_group(sig):
                break
            with anyio.move_on_after(self._grace):
                await child.reaped()
        # Children that outlived the leader (the group is ours alone) go too.
        child.signal_group(signal.SIGKILL)
