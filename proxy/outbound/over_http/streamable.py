"""The Streamable HTTP client transport: sessions (2025-03-26 … 2025-11-25) and 2026-07-28 alike.

One long-lived HTTP client (:mod:`proxy.outbound.over_http.h1`, a keep-alive pool) per link. Each request
is POSTed from its own task in the link's task group, so ``send`` returns at once and many
requests are in flight; the answer comes back as a JSON body or an SSE stream and is queued
for ``receive``.

A link serves both protocol eras, per message, because its caller finds out which one the
server speaks by trying: a request carrying the 2026-07-28 envelope goes to
:class:`~proxy.outbound.over_http.stateless.StatelessExchanges` (stateless, no session at all); everything
else takes the handshake-era path here. On that path a GET stream carries what the server sends
unprompted, and the transport keeps the session alive on its own: it resumes broken SSE streams
(``Last-Event-ID``) and replaces an expired session by replaying ``initialize``: HTTP 404 on a
session, as the spec says, or HTTP 400 whose body speaks of the session (what servers built on
the TypeScript SDK's examples answer once restarted: "No valid session ID provided"). Any other
400 is the one request's failure: a bad request must not cost everyone the session.
Anything that keeps a request from being answered becomes that request's
:class:`~proxy.outbound.transport.Failed` outcome, so the caller never waits out its timeout
for nothing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.abc

from proxy.core.errors import MessageTooLarge, ServerUnavailable
from proxy.outbound.over_http import h1
from proxy.outbound.over_http.common import (
    ACCEPT_BOTH,
    JSON,
    MAX_BODY,
    SSE,
    STREAM_END_WAIT,
    TRANSPORT_ERRORS,
    Decoded,
    EventReader,
    Inbox,
    Probe,
    Verdict,
    broken,
    client_session,
    describe,
    error_body,
    failure,
    http_failure,
    messages_in,
    not_streamable,
    owned_task_group,
    read_body,
    request_id_of,
    session_gone,
    with_extra,
)
from proxy.outbound.over_http.post_tasks import PostTasks, post_tasks
from proxy.outbound.over_http.stateless import StatelessExchanges, is_stateless_request
from proxy.outbound.transport import Failed, Received
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import DEFAULT_MAX_DEPTH, Message, RequestId
from proxy.protocol.sse import SSEDecoder

__all__ = ["StreamableHttpTransport"]

# The name operators know this transport's log lines by (it predates the module's split).
logger = logging.getLogger("proxy.outbound.over_http.modes")

_SESSION: Final = "Mcp-Session-Id"
_VERSION: Final = "MCP-Protocol-Version"
_MAX_RESUMES: Final = 5  # GETs with Last-Event-ID for one request before giving up on it
_BACKOFF: Final = (0.5, 30.0)  # GET stream reconnects: first and longest pause, in seconds
_DELETE_TIMEOUT: Final = 2.0
_RENEW_INTERVAL: Final = 2.0  # seconds: the least time between two session renewals
_LIST_CHANGED: Final = jsonrpc.notification("notifications/tools/list_changed")


@dataclass(frozen=True, slots=True)
class _Read:
    """How reading one SSE stream ended."""

    answer: Message | Failed | None  # the response for the request the stream belongs to
    retry_ms: int | None
    error: str | None = None
    unusable: bool = False  # the stream broke the protocol (an event past its limit): no resuming


class StreamableHttpTransport:
    """Opens links to one server over Streamable HTTP."""

    def __init__(
        self,
        server_id: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        connect_timeout: float = 30.0,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_message_bytes: int = MAX_BODY,
    ) -> None:
        """``max_depth`` bounds the nesting of each message the server sends, ``max_message_bytes``
        the size of each JSON body and SSE event (``limits.max_server_message_bytes``)."""
        self._server_id = server_id
        self._url = url
        self._headers = dict(headers or {})
        self._connect_timeout = connect_timeout
        self._max_depth = max_depth
        self._max_bytes = max_message_bytes

    def connect(self) -> AbstractAsyncContextManager[_StreamableHttpLink]:
        """Open the HTTP client; no request is made until the first ``send`` (``initialize``).

        Unreachable servers therefore show up as the failure of that request, not here.
        On exit the session is ended with DELETE (bounded, errors ignored).
        """
        return self.open_link()

    @asynccontextmanager
    async def open_link(self, inbox: Inbox | None = None) -> AsyncIterator[_StreamableHttpLink]:
        """:meth:`connect`, optionally delivering into an inbox the caller shares (``auto`` mode)."""
        owned, inbox = inbox is None, inbox if inbox is not None else Inbox(self._server_id)
        try:
            async with client_session(
                self._url, self._headers, self._connect_timeout, server_id=self._server_id
            ) as http:
                link: _StreamableHttpLink | None = None
                try:
                    async with owned_task_group() as tg, post_tasks() as posts:
                        link = _StreamableHttpLink(
                            self._server_id,
                            self._url,
                            http,
                            tg,
                            posts,
                            inbox,
                            self._connect_timeout,
                            self._max_depth,
                            self._max_bytes,
                        )
                        try:
                            yield link
                        finally:
                            link.closed = True
                finally:
                    if link is not None:
                        await link.end_session()
        finally:
            if owned:  # a shared inbox is its owner's to shut
                inbox.shut()


class _StreamableHttpLink:
    def __init__(
        self,
        server_id: str,
        url: str,
        http: h1.Client,
        tg: anyio.abc.TaskGroup,
        posts: PostTasks,
        inbox: Inbox,
        connect_timeout: float,
        max_depth: int,
        max_bytes: int,
    ) -> None:
        self._server_id = server_id
        self._max_depth = max_depth
        self._max_bytes = max_bytes
        self._url = url
        self._http = http
        self._tg = tg  # the GET stream's task
        self._posts = posts  # a task per request's POST
        self._inbox = inbox
        self._connect_timeout = connect_timeout
        self._log = logging.LoggerAdapter(logger, {"server_id": server_id})
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._initialize: Message | None = None  # kept to replay when the session expires
        self._initialize_id: RequestId | None = None  # whose result tells the protocol version
        self._renew_lock = anyio.Lock()
        self._renewals = 0
        self._renewed_at = -math.inf
        self._listening = False
        self.closed = False
        self.stateless = StatelessExchanges(
            server_id, url, http, posts, inbox, self._log, max_depth=max_depth, max_bytes=max_bytes
        )

    # ------------------------------------------------------------------ the Link contract

    async def send(self, message: Message, *, headers: Mapping[str, str] | None = None) -> None:
        """Requests are POSTed from a task of their own; notifications and responses inline, in order.

        A 2026-07-28 request goes out statelessly, and ``notifications/cancelled`` for one aborts
        its POST instead of being sent. ``headers`` go on this message's POST only.

        Raises:
            ServerUnavailable: the link is closed.
            Unencodable: ``message`` cannot be written as JSON; nothing was sent.
        """
        if self.closed:
            raise ServerUnavailable(self._server_id, "link closed")
        if is_stateless_request(message):
            self.stateless.start(message, headers)
            return
        if message.get("method") == "notifications/cancelled" and self._cancelled_here(message):
            return
        data = jsonrpc.encode(message)  # here, so that a message that cannot go out is the caller's error
        if request_id_of(message) is None:
            accepted = await self._post(message, data, extra=headers)
            if accepted and message.get("method") == "notifications/initialized" and not self._listening:
                self._listening = True
                self._tg.start_soon(self._listen)
            return
        if message.get("method") == "initialize":
            self._initialize, self._initialize_id = message, message["id"]
        self._posts.start_soon(self._post, message, data, True, None, headers)

    async def receive(self) -> Received:
        """The next message, with the id of the request whose POST (or resumed stream) carried it.

        Raises:
            ServerUnavailable: the link is closed.
        """
        return await self._inbox.get()

    async def probe(self, initialize: Message, headers: Mapping[str, str] | None = None) -> Probe:
        """Send ``initialize`` and return once the answer shows whether this is Streamable HTTP.

        Raises:
            Unencodable: ``initialize`` cannot be written as JSON; nothing was sent.
        """
        data = jsonrpc.encode(initialize)
        self._initialize, self._initialize_id = initialize, initialize["id"]
        probe = Probe()
        self._posts.start_soon(self._post, initialize, data, True, probe, headers)
        await probe.settled.wait()
        return probe

    def _cancelled_here(self, cancel: Message) -> bool:
        """Whether ``cancel`` is done with locally: it names a stateless request (whose POST is then
        aborted: on this transport closing the response is the cancel), or there is no session
        for it to go to, so it can only be late for a stateless request that already ended."""
        params = cancel.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if self.stateless.cancel(request_id):
            return True
        if self._initialize is None:
            self._log.debug("server %r: no request %r in flight to cancel", self._server_id, request_id)
            return True
        return False

    # ------------------------------------------------------------------ POST

    def _headers(
        self,
        session_id: str | None,
        *,
        accept: str = ACCEPT_BOTH,
        initialize: bool = False,
        last_event_id: str | None = None,
    ) -> dict[str, str]:
        headers = {"Accept": accept}
        if accept == ACCEPT_BOTH:
            headers["Content-Type"] = JSON
        if session_id is not None:
            headers[_SESSION] = session_id
        if self.protocol_version is not None and not initialize:
            headers[_VERSION] = self.protocol_version
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        return headers

    async def _post(
        self,
        message: Message,
        data: bytes,
        may_renew: bool = True,
        probe: Probe | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> bool:
        """POST one message and route what comes back. True when the server accepted it."""
        request_id = request_id_of(message)
        initialize = message.get("method") == "initialize"
        session_id = None if initialize else self.session_id  # a new session starts without one
        headers = with_extra(self._headers(session_id, initialize=initialize), extra)
        try:
            async with self._http.request("POST", self._url, body=data, headers=headers) as response:
                if session_id is None or not may_renew or response.status not in (400, 404):
                    return await self._answer(response, message, probe)
                said = await error_body(response)
                if not session_gone(response.status, said):
                    return await self._answer(response, message, probe, said)
        except TRANSPORT_ERRORS as exc:
            self._fail(request_id, f"POST {self._url} failed: {describe(exc)}")
            return False
        except MessageTooLarge as exc:
            self._broken(request_id, exc.message, exc)
            return False
        finally:
            if probe is not None:
                probe.settle(Verdict.FAILED)  # only if nothing better was said already
        # The session expired (or the server restarted). Start a new one and retry once.
        if not await self._renew(session_id):
            self._fail(request_id, "the session expired and starting a new one failed")
            return False
        return await self._post(message, data, may_renew=False, extra=extra)

    async def _answer(
        self,
        response: h1.Response,
        message: Message,
        probe: Probe | None,
        said: tuple[dict[str, Any] | None, bytes] | None = None,
    ) -> bool:
        """Route the answer to one POST; ``said`` is its error body, if read already."""
        status, content_type = response.status, response.content_type
        request_id = request_id_of(message)
        if (
            message.get("method") == "initialize"
            and status == 200
            and (session_id := response.header(_SESSION))
        ):
            self.session_id = session_id
        if probe is not None and request_id is not None and not_streamable(status, content_type):
            probe.settle(Verdict.NOT_STREAMABLE, await http_failure(self._server_id, request_id, response))
            return False
        if request_id is None:  # a notification or response: the spec wants 202, any 2xx will do
            if status >= 300:
                what = message.get("method", "a response")
                self._log.warning("server %r: %s was refused: HTTP %s", self._server_id, what, status)
            return status < 300
        if status == 202:
            return True  # no body; a server may send the answer on the GET stream instead
        if status >= 300:
            self._inbox.put(await http_failure(self._server_id, request_id, response, said), request_id)
            return False
        if content_type == JSON:
            decoded = self._decode(await read_body(response, self._max_bytes))
            answer = self._take(decoded.items, request_id)
            why = f" ({decoded.problem})" if decoded.problem else ""
            if answer is None and probe is not None:
                reason = f"the JSON body held no JSON-RPC response{why}: not an MCP endpoint"
                probe.settle(Verdict.NOT_STREAMABLE, broken(self._server_id, request_id, reason))
                return False
            if probe is not None:
                probe.settle(Verdict.SPEAKS)
            if answer is None:
                self._broken(request_id, f"the JSON body held no response to the request{why}")
            return answer is not None
        if content_type != SSE:
            self._broken(request_id, f"HTTP {status} with unexpected Content-Type {content_type!r}")
            return False
        if probe is not None:
            probe.settle(Verdict.SPEAKS)
        return await self._read_answer_stream(response, request_id)

    async def _read_answer_stream(self, response: h1.Response, request_id: RequestId) -> bool:
        """Read the SSE answer to one request, resuming with Last-Event-ID if the stream breaks."""
        reader = EventReader(response, limit=self._max_bytes)
        read = await self._read(reader, request_id)
        if read.answer is not None:  # delivered already: wait for the end of the stream, bounded
            await response.drain(STREAM_END_WAIT)
        for _ in range(_MAX_RESUMES):
            last_event_id = reader.decoder.last_event_id
            if read.answer is not None or read.unusable or last_event_id is None:
                break
            # The spec makes the client wait the server's `retry` before reconnecting.
            await anyio.sleep((read.retry_ms or 0) / 1000)
            self._log.debug(
                "server %r: resuming the answer to %r after event %s",
                self._server_id,
                request_id,
                last_event_id,
            )
            decoder = SSEDecoder(self._max_bytes)
            decoder.last_event_id = last_event_id
            headers = self._headers(self.session_id, accept=SSE, last_event_id=last_event_id)
            try:
                async with self._http.request("GET", self._url, headers=headers) as resumed:
                    if resumed.status != 200 or resumed.content_type != SSE:
                        read = _Read(None, None, f"resuming the stream got HTTP {resumed.status}")
                        break
                    reader = EventReader(resumed, decoder)
                    retry_ms = read.retry_ms
                    read = await self._read(reader, request_id)
                    read = _Read(read.answer, read.retry_ms or retry_ms, read.error, read.unusable)
            except TRANSPORT_ERRORS as exc:
                read = _Read(None, read.retry_ms, describe(exc))
        if read.answer is None and read.unusable:
            self._broken(request_id, read.error or "the SSE stream broke the protocol")
        elif read.answer is None:
            self._fail(request_id, f"the SSE stream ended before the response ({read.error or 'closed'})")
        return read.answer is not None

    async def _read(
        self, reader: EventReader, request_id: RequestId | None, *, capture: bool = False
    ) -> _Read:
        """Route every message on one SSE stream until it ends or brings the answer to ``request_id``."""
        retry_ms: int | None = None
        try:
            while (event := await reader.next()) is not None:
                retry_ms = event.retry if event.retry is not None else retry_ms
                if event.event != "message" or not event.data:
                    continue  # a priming event (id only), or an event type MCP does not use
                answer = self._take(self._decode(event.data).items, request_id, capture=capture)
                if answer is not None:
                    # The server ends the stream after the answer; a resumed GET stream may stay open.
                    return _Read(answer, retry_ms)
        except TRANSPORT_ERRORS as exc:
            return _Read(None, retry_ms, describe(exc))
        except MessageTooLarge as exc:
            self._log.warning("server %r: an SSE stream was dropped: %s", self._server_id, exc.message)
            return _Read(None, retry_ms, exc.message, unusable=True)
        return _Read(None, retry_ms)

    def _decode(self, data: str | bytes) -> Decoded:
        return messages_in(data, self._server_id, self._log, max_depth=self._max_depth)

    def _take(
        self, messages: list[Message | Failed], request_id: RequestId | None, *, capture: bool = False
    ) -> Message | Failed | None:
        """Queue ``messages`` for ``receive``; return the response to ``request_id`` if among them.

        They were carried for ``request_id``, which goes with them. With ``capture`` that request is
        ours (a replayed ``initialize``): its response is kept back, and the caller gets no id it
        never sent.
        """
        related = None if capture else request_id
        answer = None
        for message in messages:
            if isinstance(message, Failed):
                is_answer = message.request_id == request_id
            else:
                is_answer = (
                    request_id is not None and "method" not in message and message.get("id") == request_id
                )
            if is_answer:
                answer = message
                if capture:
                    continue
            if (
                not isinstance(message, Failed)
                and self._initialize_id is not None
                and message.get("id") == self._initialize_id
                and "method" not in message
            ):
                self._note_version(message)
                self._initialize_id = None
            self._inbox.put(message, related)
        return answer

    def _note_version(self, response: Message) -> None:
        result = response.get("result")
        if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
            self.protocol_version = result["protocolVersion"]

    def _fail(self, request_id: RequestId | None, reason: str) -> None:
        if request_id is None:
            self._log.warning("server %r: %s", self._server_id, reason)
        else:
            self._inbox.put(failure(self._server_id, request_id, reason), request_id)

    def _broken(
        self, request_id: RequestId | None, reason: str, cause: MessageTooLarge | None = None
    ) -> None:
        if request_id is None:
            self._log.warning("server %r: %s", self._server_id, reason)
        else:
            self._inbox.put(broken(self._server_id, request_id, reason, cause), request_id)

    # ------------------------------------------------------------------ session upkeep

    async def _renew(self, stale: str | None) -> bool:
        """Replace an expired session by replaying ``initialize``; then tell the caller to refresh."""
        async with self._renew_lock:
            if self.session_id != stale:
                return True  # another task already replaced it while we waited
            if self._initialize is None or anyio.current_time() - self._renewed_at < _RENEW_INTERVAL:
                # A server that answers 404 to a fresh session is not expiring sessions; renewing
                # again would only loop (each renewal makes the caller list tools once more).
                return False
            self._renewals += 1
            replay = {**self._initialize, "id": f"manifold-renew-{self._renewals}"}
            try:
                with anyio.fail_after(self._connect_timeout):
                    self.session_id = await self._replay_initialize(replay)
            except (*TRANSPORT_ERRORS, MessageTooLarge, ServerUnavailable) as exc:
                self._log.warning(
                    "server %r: the session expired; starting a new one failed: %s", self._server_id, exc
                )
                return False
            finally:
                self._renewed_at = anyio.current_time()
        self._log.info("server %r: the session expired; started a new one", self._server_id)
        # Tools may differ in the new session (a restarted server): make the caller list them again.
        self._inbox.put(dict(_LIST_CHANGED))
        return True

    async def _replay_initialize(self, replay: Message) -> str | None:
        """Set up a new session; return its id.

        Raises:
            ServerUnavailable, or a transport error: the new session could not be set up.
        """
        headers = self._headers(None, initialize=True)
        async with self._http.request(
            "POST", self._url, body=jsonrpc.encode(replay), headers=headers
        ) as response:
            if response.status != 200:
                raise ServerUnavailable(self._server_id, f"initialize got HTTP {response.status}")
            session_id = response.header(_SESSION)
            if response.content_type == SSE:
                reader = EventReader(response, limit=self._max_bytes)
                answer = (await self._read(reader, replay["id"], capture=True)).answer
            else:
                body = await read_body(response, self._max_bytes)
                answer = self._take(self._decode(body).items, replay["id"], capture=True)
        if answer is None or isinstance(answer, Failed) or "result" not in answer:
            raise ServerUnavailable(self._server_id, f"initialize was not answered with a result: {answer}")
        self._note_version(answer)
        # Published only after `initialized`: requests must not reach the new session before it.
        initialized = jsonrpc.encode(jsonrpc.notification("notifications/initialized"))
        async with self._http.request(
            "POST", self._url, body=initialized, headers=self._headers(session_id)
        ) as response:
            if response.status >= 300:
                raise ServerUnavailable(
                    self._server_id, f"notifications/initialized got HTTP {response.status}"
                )
        return session_id

    async def _listen(self) -> None:
        """Keep a GET stream open for what the server sends unprompted, reconnecting until the link closes."""
        delay, last_event_id, stream_session, streamed = _BACKOFF[0], None, self.session_id, False
        while True:
            session_id = self.session_id
            if session_id != stream_session:  # event ids belong to the session that issued them
                last_event_id, stream_session, streamed = None, session_id, False
            retry_ms: int | None = None
            try:
                headers = self._headers(session_id, accept=SSE, last_event_id=last_event_id)
                async with self._http.request("GET", self._url, headers=headers) as response:
                    if response.status == 405:
                        self._log.debug("server %r offers no GET stream", self._server_id)
                        return
                    # 404 (or a 400 about the session) means "session expired" only where GET
                    # worked before: some servers that offer no GET stream say 404 instead of 405.
                    if response.status in (400, 404) and streamed and session_id is not None:
                        if session_gone(response.status, await error_body(response)):
                            if await self._renew(session_id):
                                continue
                        else:
                            self._log.info(
                                "server %r: GET stream refused: HTTP %s", self._server_id, response.status
                            )
                    elif response.status == 200 and response.content_type == SSE:
                        streamed = True
                        decoder = SSEDecoder(self._max_bytes)
                        decoder.last_event_id = last_event_id
                        reader = EventReader(response, decoder)
                        retry_ms = (await self._read(reader, None)).retry_ms
                        last_event_id = decoder.last_event_id
                        if reader.count:
                            delay = _BACKOFF[0]  # the stream worked: start the backoff over
                    else:
                        self._log.info(
                            "server %r: GET stream refused: HTTP %s", self._server_id, response.status
                        )
            except TRANSPORT_ERRORS as exc:
                self._log.debug("server %r: GET stream failed: %s", self._server_id, describe(exc))
            await anyio.sleep(retry_ms / 1000 if retry_ms is not None else delay)
            delay = min(delay * 2, _BACKOFF[1])

    async def end_session(self) -> None:
        """DELETE the session: bounded and shielded, because it runs while the link is torn down."""
        if self.session_id is None:
            return
        with anyio.move_on_after(_DELETE_TIMEOUT, shield=True):
            try:
                headers = self._headers(self.session_id, accept=JSON)
                async with self._http.request("DELETE", self._url, headers=headers):
                    pass
            except TRANSPORT_ERRORS as exc:
                self._log.debug("server %r: DELETE of the session failed: %s", self._server_id, describe(exc))
