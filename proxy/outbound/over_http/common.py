"""What the HTTP client transports share: the HTTP client (:mod:`proxy.outbound.over_http.h1`), the inbox
behind ``receive()``, bounded reading and decoding of what a server sends, and the
:class:`Failed` outcomes of requests a server will not answer.

Three transports build on this module — Streamable HTTP with sessions
(:mod:`proxy.outbound.over_http.streamable`), its stateless 2026-07-28 exchanges
(:mod:`proxy.outbound.over_http.stateless`) and the legacy HTTP+SSE transport
(:mod:`proxy.outbound.over_http.sse_legacy`) — so none of them has to import another for its plumbing.
Foreign exceptions stay foreign here: :data:`TRANSPORT_ERRORS` names them for the callers, which
turn them into :class:`Failed` outcomes or :class:`proxy.core.errors.ServerUnavailable` at their edge.
No answer is made up here: a JSON-RPC error response the transports deliver is always the
server's own.
"""

from __future__ import annotations

import enum
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import anyio
import anyio.abc

from proxy.core.errors import MessageTooLarge, ProtocolError, ServerProtocolError, ServerUnavailable
from proxy.outbound.over_http import h1
from proxy.outbound.over_http.redirects import RedirectRefused
from proxy.outbound.transport import Failed, Received, unusable_answer
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message, RequestId
from proxy.protocol.sse import SSEDecoder, SSEEvent

__all__ = [
    "not_streamable",
    "session_gone",
    "ACCEPT_BOTH",
    "JSON",
    "MAX_BODY",
    "SSE",
    "STREAM_END_WAIT",
    "TRANSPORT_ERRORS",
    "Decoded",
    "EventReader",
    "Inbox",
    "Probe",
    "Verdict",
    "broken",
    "client_session",
    "describe",
    "error_body",
    "failure",
    "http_failure",
    "messages_in",
    "read_body",
    "with_extra",
    "owned_task_group",
    "request_id_of",
]

# Foreign exceptions an HTTP exchange can raise (h1's docstring draws them); they are turned into
# ours at this edge. ValueError covers a URL or header that cannot be sent. (An SSE event or a body
# past its size limit is ours: MessageTooLarge, which the callers turn into the server's fault.)
# RedirectRefused is ours too, raised by the client when a server redirects elsewhere, and fails
# the request alike.
TRANSPORT_ERRORS: Final = (h1.HttpError, OSError, TimeoutError, ValueError, RedirectRefused)
SSE: Final = "text/event-stream"
JSON: Final = "application/json"
ACCEPT_BOTH: Final = f"{JSON}, {SSE}"
MAX_BODY: Final = 16 * 1024 * 1024  # bytes in one JSON body from a server (as in one SSE event)
# Seconds an SSE answer stream is read on past its response, for the server's end of it: a
# stream that ends leaves its connection reusable, one that is cut off loses it (a new TCP
# connection, per request, for a server that answers in SSE).
STREAM_END_WAIT: Final = 0.1
_MAX_ERROR_BODY: Final = 64 * 1024


class Inbox:
    """What ``receive()`` hands out, and why it stopped.

    Unbounded on purpose: it only ever holds answers to requests the caller sent (the caller
    bounds those) and the server's occasional notifications, and a bound would let a caller that
    is slow to read stall the tasks reading HTTP responses.
    """

    def __init__(self, server_id: str) -> None:
        self._server_id = server_id
        self._send, self._receive = anyio.create_memory_object_stream[Received](math.inf)
        self.reason = "link closed"
        self.ended = False

    def put(self, message: Message | Failed, related: RequestId | None = None) -> None:
        """Queue ``message`` (or the failure of a request); ``related`` is the request whose response
        stream carried it, if known."""
        # Once the link is closing nobody will read it any more.
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._send.send_nowait((message, related))

    def end(self, reason: str) -> None:
        """No more messages: ``get`` drains what is queued, then raises with ``reason``."""
        if not self.ended:
            self.ended, self.reason = True, reason
            self._send.close()

    def shut(self) -> None:
        """The link is gone: ``get`` raises at once, queued or not."""
        self.end("link closed")
        self._receive.close()

    async def get(self) -> Received:
        # What is queued already is taken without a checkpoint (anyio's costs ~2 µs, one per
        # answer): the read loop still waits, and yields, whenever the queue is empty.
        try:
            return self._receive.receive_nowait()
        except anyio.WouldBlock:
            pass
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ServerUnavailable(self._server_id, self.reason) from None
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ServerUnavailable(self._server_id, self.reason) from None


class Verdict(enum.Enum):
    """What the answer to a first POST says about the server (``auto`` mode)."""

    SPEAKS = "the server speaks Streamable HTTP"
    NOT_STREAMABLE = "not a Streamable HTTP endpoint"
    FAILED = "no usable answer; the request failed"


@dataclass
class Probe:
    """A one-shot outcome the POST task reports while it goes on reading the answer.

    ``on_settle`` runs synchronously in the POST task as the verdict is reached; a stateless
    exchange reaches it before it queues the answer, so whoever acts on the verdict has done so
    by the time the caller can read the answer.
    """

    verdict: Verdict | None = None
    error: Message | Failed | None = None  # with NOT_STREAMABLE: the outcome if the fallback fails too
    settled: anyio.Event = field(default_factory=anyio.Event)
    on_settle: Callable[[Verdict], None] | None = None

    def settle(self, verdict: Verdict, error: Message | Failed | None = None) -> None:
        if self.verdict is None:
            self.verdict, self.error = verdict, error
            self.settled.set()
            if self.on_settle is not None:
                self.on_settle(verdict)


def failure(server_id: str, request_id: RequestId, reason: str) -> Failed:
    """Request ``request_id`` will not be answered: the server could not be reached or went away."""
    return Failed(request_id, ServerUnavailable(server_id, reason))


def broken(
    server_id: str, request_id: RequestId, reason: str, cause: MessageTooLarge | None = None
) -> Failed:
    """Request ``request_id`` will not be answered: what the server sent for it is unusable.

    ``cause``: the limit the answer broke, kept on the error so that whoever settles the request
    can count the refusal (``manifold_limit_refusals_total``); transports hold no metrics.
    """
    error = ServerProtocolError(server_id, reason)
    error.__cause__ = cause
    return Failed(request_id, error)


def describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, RedirectRefused):
        return text  # it says what it is
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def error_body(response: h1.Response) -> tuple[dict[str, Any] | None, bytes]:
    """The JSON-RPC ``error`` object in an HTTP error's body, if it holds one, and the body read.

    Lenient about the id (null, or missing altogether: the server could not or did not read the
    request's), strict about the error itself. Bounded: an error page can be large and only its
    start is worth anything.
    """
    try:
        body = (await response.read(_MAX_ERROR_BODY))[:_MAX_ERROR_BODY]
    except TRANSPORT_ERRORS:
        return None, b""
    try:
        decoded = jsonrpc.decode(body)
    except ProtocolError:  # not JSON, or nested past the default limit: an error page, say
        return None, body
    error = decoded.get("error") if isinstance(decoded, dict) and "method" not in decoded else None
    if (
        isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and not isinstance(error["code"], bool)
        and isinstance(error.get("message"), str)
    ):
        return error, body
    return None, body


async def http_failure(
    server_id: str,
    request_id: RequestId,
    response: h1.Response,
    said: tuple[dict[str, Any] | None, bytes] | None = None,
) -> Message | Failed:
    """The outcome of a request whose POST got an HTTP error status.

    A 4xx whose body is a JSON-RPC error is the server's own answer, so it is passed on (with the
    request's id: servers send ``id: null`` there); anything else fails the request, naming the
    status. ``said`` is what :func:`error_body` returned, when the caller read the body already.
    """
    status = f"HTTP {response.status} {response.reason or ''}".rstrip()
    error, _ = said if said is not None else await error_body(response)
    if error is not None and 400 <= response.status < 500:
        return jsonrpc.error_response(request_id, error["code"], error["message"], error.get("data"))
    detail = f": {error['message']}" if error is not None else ""
    return failure(server_id, request_id, status + detail)


async def read_body(response: h1.Response, limit: int = MAX_BODY) -> bytes:
    """The whole body, read at most ``limit`` bytes far (``limits.max_server_message_bytes``).

    A Content-Length is trusted only for an unencoded body: a gzip/deflate body is inflated as it
    is read, so a small compressed length can stand for any size once decoded.

    Raises:
        MessageTooLarge: the body is longer than ``limit`` (says so, or turned out so).
        HttpError, OSError: the connection broke.
    """
    length = response.content_length
    if length is not None and response.encoding is None and length > limit:
        raise MessageTooLarge("a JSON body", limit="max_server_message_bytes", maximum=limit)
    body = await response.read(limit)  # the usual case, on the hot path: all here, no copy
    if len(body) > limit:
        raise MessageTooLarge("a JSON body", limit="max_server_message_bytes", maximum=limit)
    return body


class Decoded(NamedTuple):
    """What one body or event held: its messages (and the failures of requests whose answers were
    unusable), and why anything in it was dropped."""

    items: list[Message | Failed]
    problem: str | None = None


def messages_in(
    data: str | bytes, server_id: str, log: logging.LoggerAdapter[logging.Logger], *, max_depth: int
) -> Decoded:
    """The JSON-RPC messages in one body or event (an array is a batch), each nested at most
    ``max_depth`` deep. A malformed one is logged and dropped; an answer too deep to use becomes
    the :class:`Failed` outcome of the request it answers."""
    try:
        decoded: Any = jsonrpc.decode(data, max_depth=max_depth)
    except ProtocolError as exc:
        failed = unusable_answer(server_id, exc)
        if failed is not None:
            return Decoded([failed])
        log.warning("server %r: dropped a malformed message: %s", server_id, exc.message)
        return Decoded([], exc.message)
    items: list[Message | Failed] = []
    problem = None
    for item in decoded if isinstance(decoded, list) else [decoded]:
        try:
            items.append(jsonrpc.validate(item))
        except ProtocolError as exc:
            log.warning("server %r: dropped a malformed message: %s", server_id, exc.message)
            problem = exc.message
    return Decoded(items, problem)


def with_extra(headers: dict[str, str], extra: Mapping[str, str] | None) -> dict[str, str]:
    """``headers`` plus the caller's ``extra`` ones, except where those name one of ours (header
    names are case-insensitive, and a header sent twice would be read differently by different
    servers)."""
    if not extra:
        return headers
    taken = {name.lower() for name in headers}
    return {k: v for k, v in extra.items() if k.lower() not in taken} | headers


def request_id_of(message: Message) -> RequestId | None:
    """The id an answer will carry, if ``message`` is a request (responses have ids too, but want none)."""
    return message.get("id") if "method" in message else None


@asynccontextmanager
async def client_session(
    url: str, headers: Mapping[str, str] | None, connect_timeout: float, *, server_id: str
) -> AsyncIterator[h1.Client]:
    """The link's HTTP client for ``url``'s origin, closed (every connection) when the link ends.
    It follows redirects within that origin only (:mod:`proxy.outbound.over_http.redirects`): the configured
    headers never leave it, and https never drops to http."""
    # Only the connect phase is bounded here: a request may legitimately take long (the caller's
    # request timeout covers that), and a GET stream or a 2026-07-28 subscriptions/listen stream
    # lives as long as the link. No pool limit: each in-flight request holds a connection while it
    # streams, and the caller bounds how many.
    http = h1.Client(url, headers, server_id=server_id, connect_timeout=connect_timeout)
    try:
        yield http
    finally:
        http.close()


class EventReader:
    """SSE events from one HTTP response, one at a time."""

    def __init__(
        self, response: h1.Response, decoder: SSEDecoder | None = None, *, limit: int = MAX_BODY
    ) -> None:
        """``limit`` bounds one event (``limits.max_server_message_bytes``) unless ``decoder`` is given."""
        self._response = response
        self.decoder = decoder if decoder is not None else SSEDecoder(limit)
        self._pending: deque[SSEEvent] = deque()
        self.count = 0  # events read so far

    async def next(self) -> SSEEvent | None:
        """The next event, or None at the end of the stream.

        Raises:
            HttpError, OSError: the connection broke.
            MessageTooLarge: an event grew past the decoder's limit (the stream is unusable).
        """
        while not self._pending:
            chunk = await self._response.read_some()
            if not chunk:
                return None
            self._pending.extend(self.decoder.feed(chunk))
        self.count += 1
        return self._pending.popleft()


@asynccontextmanager
async def owned_task_group() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group around a ``yield`` whose body's exception leaves as itself.

    anyio wraps an exception raised in a task group's body in an ExceptionGroup; a transport's
    caller must see its own exception (or our ServerUnavailable) unchanged. The children here never
    raise — they turn failures into messages — so the body's is the only exception there can be.
    The group is cancelled when the body ends: its tasks serve the link, which is then gone.
    """
    caught: BaseException | None = None
    async with anyio.create_task_group() as tg:
        try:
            yield tg
        except BaseException as exc:
            caught = exc
        tg.cancel_scope.cancel()
    if caught is not None:
        raise caught


_SESSION_TEXT: Final = 1024  # bytes of a non-JSON-RPC 400 body searched for word of the session


def session_gone(status: int, said: tuple[dict[str, Any] | None, bytes]) -> bool:
    """Whether an HTTP error to a request that carried a session id says that session is gone.

    404 is the spec's word for it. Servers built on the TypeScript SDK's examples answer 400 with
    "No valid session ID provided" instead; a 400 counts only when its body speaks of the session
    (the JSON-RPC error's message, else the start of the body), so that a malformed request fails
    alone instead of costing every caller a new session.
    """
    if status == 404:
        return True
    error, body = said
    text = error["message"] if error is not None else body[:_SESSION_TEXT].decode(errors="replace")
    return status == 400 and "session" in text.lower()


def not_streamable(status: int, content_type: str) -> bool:
    # The spec's rule for falling back to HTTP+SSE, plus "answered, but not with MCP".
    return status in (400, 404, 405) or (status == 200 and content_type not in (JSON, SSE))
