"""Streamable HTTP, inbound: ``/mcp`` (POST, GET, DELETE) and ``/healthz``.

The MCP endpoint is a plain ASGI callable, because it is on every call's path and an
ASGI ``send`` of pre-encoded bytes is the cheapest response there is; Starlette only routes.
HTTP-level refusals (bad Origin, missing session, wrong content type) are answered here;
everything about MCP itself is the gateway's business.

Two eras share the endpoint. A request whose ``MCP-Protocol-Version`` header names no handshake
revision (2026-07-28, or one nobody knows), or that carries a 2026-07-28 ``_meta`` envelope with
neither that header nor a session id, is stateless: ``proxy.inbound.stateless_http`` serves it. Everything
else is the handshake era: ``initialize`` mints a session, and later requests name it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import anyio.abc

from proxy.auth.authenticator import Rejected
from proxy.clients.contract import Inbound
from proxy.clients.session import ClientSession
from proxy.clients.streams import EventStream, parse_event_id
from proxy.core.errors import (
    InvalidRequest,
    LimitExceeded,
    ProtocolError,
    RateLimited,
    request_id_of,
)
from proxy.core.quotas import Quota
from proxy.inbound.asgi import (
    JSON_HEADERS,
    Receive,
    Scope,
    Send,
    cancel_on_disconnect,
    header,
    read_body,
    respond,
)
from proxy.inbound.reading import Reader
from proxy.inbound.refusals import Refused, answer_of, write_http
from proxy.inbound.stateless_http import StatelessEndpoint, is_stateless_header
from proxy.observe.boundary import wire_error
from proxy.policy.model import Identity
from proxy.protocol import jsonrpc, versions
from proxy.protocol.asks import ASKED_CAPABILITIES
from proxy.protocol.jsonrpc import Message, MessageKind
from proxy.protocol.sse import encode_event
from proxy.protocol.stateless import has_envelope, http_status
from proxy.ratelimit import LimitCheck, MemoryBackend
from proxy.tracing import active as tracing
from proxy.tracing.w3c import from_headers

__all__ = ["McpEndpoint", "OriginPolicy", "Receive", "Scope", "Send"]

logger = logging.getLogger("proxy.inbound.streamable_http")

_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
_KEEPALIVE: Final = 15.0
_RETRY_MS: Final = 1000
# Requests Manifold forwards to a server, which may answer through an SSE stream.
_RELAYED: Final = frozenset({"tools/call", "prompts/get", "resources/read", "completion/complete"})
_SSE: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


class OriginPolicy:
    """DNS-rebinding protection: which ``Origin`` and ``Host`` headers may reach ``/mcp``.

    Loopback origins are always allowed. Hosts: the configured list; when none is configured,
    loopback names if we are bound to loopback, anything if bound to all interfaces.
    """

    def __init__(self, bind_host: str, allowed_origins: Iterable[str], allowed_hosts: Iterable[str]) -> None:
        self._origins = frozenset(o.rstrip("/") for o in allowed_origins)
        self._hosts = frozenset(h.lower() for h in allowed_hosts)
        self._any_host = not self._hosts and bind_host in ("0.0.0.0", "::", "")

    def origin_ok(self, origin: str | None) -> bool:
        if origin is None:
            return True  # not a browser, or a same-origin request: nothing to rebind
        if origin.rstrip("/") in self._origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and (parts.hostname or "") in _LOOPBACK_HOSTS

    def host_ok(self, host: str | None) -> bool:
        if host is None or self._any_host:
            return True
        host = host.lower()
        if self._hosts:
            return host in self._hosts
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in _LOOPBACK_HOSTS


class McpEndpoint:
    """The ASGI app behind ``/mcp``."""

    def __init__(
        self, inbound: Inbound, policy: OriginPolicy, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._endpoint = inbound.endpoint
        self._name = inbound.endpoint_name
        self._admits = inbound.admits
        self._sessions = inbound.sessions
        self._auth = inbound.auth
        self._boundary = inbound.boundary
        limits = inbound.config.limits
        self._read = Reader(limits, inbound.boundary)
        self._max_batch = limits.max_batch
        self._batch_concurrency = limits.batch_concurrency
        self._policy = policy
        self._clock = clock
        self._flood = inbound.config.rate_limits.http
        self._flood_buckets = MemoryBackend()
        self._stateless = StatelessEndpoint(inbound, self._read)
        # Open GET streams, counted per session by the stream they follow (a resumption of a
        # stream already followed takes it over: not one more).
        self._listening = Quota(
            "max_listen_streams_per_session",
            inbound.config.limits.max_listen_streams_per_session,
            "this session already has as many GET streams open as it may; close one first",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request; the boundary of everything this transport does for it: a
        failure of our own is logged and counted once and answered as a JSON-RPC error (a
        stream already under way is ended), never an HTTP 500."""
        started = False

        async def tracked(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            try:
                await self._serve(scope, receive, tracked)
            except Refused as refused:
                await write_http(tracked, refused)
        except Exception as exc:
            self._boundary.caught(exc, "session", f"{scope['method']} /mcp")
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                if not started:
                    stateless = is_stateless_header(header(scope, b"mcp-protocol-version"))
                    response = wire_error(exc, None, stateless=stateless)
                    status = http_status(response) if stateless else 200
                    await respond(send, status, jsonrpc.encode(response), JSON_HEADERS)
                else:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        stateless = is_stateless_header(header(scope, b"mcp-protocol-version"))
        if self._flood is not None:
            address = (scope.get("client") or ("unknown", 0))[0]
            check = LimitCheck(f"http:{address}", self._flood.rate.interval, self._flood.burst, "http")
            outcome = self._flood_buckets.hit_now([check])
            if not outcome.allowed:
                wait = str(max(1, math.ceil(outcome.retry_after))).encode()
                retry = [(b"retry-after", wait)]
                raise Refused(RateLimited("Too Many Requests"), 429, headers=retry, stateless=stateless)
        if not self._policy.origin_ok(header(scope, b"origin")):
            raise Refused(InvalidRequest("Forbidden: Origin not allowed"), 403, stateless=stateless)
        if not self._policy.host_ok(header(scope, b"host")):
            raise Refused(InvalidRequest("Forbidden: Host not allowed"), 403, stateless=stateless)
        method = scope["method"]
        if stateless and method != "POST":  # 2026-07-28 has no GET stream and no session to DELETE
            return await respond(send, 405, b"", [(b"allow", b"POST")])
        if method not in ("POST", "GET", "DELETE"):
            return await respond(send, 405, b"", [(b"allow", b"GET, POST, DELETE")])
        credentials = {
            n: v for n in ("authorization", "x-api-key") if (v := header(scope, n.encode())) is not None
        }
        peer = scope.get("client")
        verdict = await self._auth.authenticate(credentials, peer[0] if peer else None)
        if isinstance(verdict, Rejected):
            said = [(name.encode(), value.encode("latin-1")) for name, value in verdict.headers()]
            unauthorized = InvalidRequest(f"Unauthorized: {verdict.message}")
            raise Refused(unauthorized, verdict.status, headers=said, stateless=stateless)
        if not self._admits(verdict.identity):
            # An endpoint an identity may not use answers as a path that does not exist.
            return await respond(send, 404, b"Not Found", [(b"content-type", b"text/plain")])
        scope["manifold.identity"] = verdict.identity
        if stateless:
            return await self._stateless.post(scope, receive, send)
        if method == "POST":
            return await self._post(scope, receive, send)
        if method == "GET":
            return await self._get(scope, receive, send)
        return await self._delete(scope, send)

    async def _session(self, scope: Scope) -> ClientSession:
        """The session a non-initialize request names.

        Raises:
            Refused: none named (400), unknown here (404), another identity's (403).
        """
        session_id = header(scope, b"mcp-session-id")
        if session_id is None:
            raise Refused(InvalidRequest("Bad Request: missing Mcp-Session-Id header"), 400)
        session = await self._sessions.find(session_id, scope["manifold.identity"])
        if session is None or session.endpoint != self._name:
            # A session is served on the endpoint it was opened on; elsewhere it is unknown.
            raise Refused(InvalidRequest("Not Found: unknown or expired session; initialize again"), 404)
        identity: Identity = scope["manifold.identity"]
        if session.identity.key != identity.key:
            # A session id alone is not a credential: it works only with the credential that made it.
            raise Refused(InvalidRequest("Forbidden: this session belongs to another identity"), 403)
        if session.identity != identity:
            # The same principal, with other roles now (a refreshed token with other scopes): what
            # the session may see was decided for the old ones, so it starts anew.
            changed = "Not Found: your roles changed since this session began; initialize again"
            raise Refused(InvalidRequest(changed), 404)
        # (An MCP-Protocol-Version that is no handshake revision never gets here: see __call__.)
        return session  # Sessions.find counted this request as the session's activity

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        if tracing.tracer is not None:  # the request's trace context headers, for the router
            tracing.HEADERS.set(from_headers(scope["headers"]))
        content_type = (header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            raise Refused(InvalidRequest("Unsupported Media Type: POST application/json"), 415)
        accept = header(scope, b"accept")
        if accept is not None and not any(t in accept for t in ("application/json", "*/*", "application/*")):
            raise Refused(InvalidRequest("Not Acceptable: Accept must include application/json"), 406)
        body = await read_body(receive, self._read.max_bytes)
        if body is None:
            raise Refused(self._read.too_large("Payload Too Large: the request body"), 413)
        try:
            decoded = self._read.decode(body)
            message = None if isinstance(decoded, list) else jsonrpc.validate(decoded)
        except ProtocolError as exc:
            raise Refused(exc, 400, request_id_of(exc)) from None
        if (
            message is not None
            and jsonrpc.kind_of(message) is MessageKind.REQUEST
            and message["method"] != "initialize"  # the handshake's own, whatever it carries
            and has_envelope(message)
            and header(scope, b"mcp-session-id") is None
            and header(scope, b"mcp-protocol-version") is None
        ):
            # A 2026-07-28 request without its headers: the stateless path tells the client so.
            return await self._stateless.answer(scope, message, len(body), receive, send)
        if message is not None and jsonrpc.kind_of(message) is not MessageKind.RESPONSE:
            try:
                self._read.check(message, len(body))
            except LimitExceeded as exc:
                # Answered as the request's own error (HTTP 200), as a client's SDK expects one.
                request_id = message.get("id")
                raise Refused(exc, 200 if request_id is not None else 400, request_id) from None
        if message is not None and message.get("method") == "initialize" and "id" in message:
            return await self._initialize(message, scope["manifold.identity"], send)
        session = await self._session(scope)
        if message is None:
            return await self._batch(session, decoded, len(body), send)
        if jsonrpc.kind_of(message) is not MessageKind.REQUEST:
            await self._endpoint.handle(session, message)
            return await respond(send, 202)
        if _wants_stream(session, message):
            return await self._stream_response(session, message, receive, send)
        response = await self._endpoint.handle(session, message)
        if response is None:
            # Cancelled by the client: it hears nothing back, so the stream closes empty.
            return await respond(send, 200, b"", _SSE)
        return await respond(send, 200, jsonrpc.encode(response), JSON_HEADERS)

    async def _stream_response(
        self, session: ClientSession, message: Message, receive: Receive, send: Send
    ) -> None:
        """Answer on an SSE stream that also carries the request's progress, logs and questions.

        A dropped connection does not cancel the request (the spec says so): the stream keeps
        its events, and the client may resume it with GET and Last-Event-ID.
        """
        stream = session.open_stream()
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        write = _sse_writer(send)
        if versions.at_least(session.protocol_version, "2025-11-25"):
            await send({"type": "http.response.body", "body": stream.priming(_RETRY_MS), "more_body": True})
        async with anyio.create_task_group() as tg:
            tg.start_soon(_follow_until_disconnect, stream, 0, write, receive)
            try:
                response = await self._endpoint.handle(session, message, stream.push)
                if response is not None:
                    stream.push(response)
            finally:
                stream.close()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _batch(self, session: ClientSession, batch: list[Any], size: int, send: Send) -> None:
        """JSON-RPC batches: part of revision 2025-03-26 only (2025-06-18 removed them).

        At most ``limits.max_batch`` entries (else the whole batch is refused), answered by
        ``limits.batch_concurrency`` workers: a batch never runs more entries at once than that,
        and its answers still come back in its order."""
        if session.protocol_version != "2025-03-26" or not batch:
            why = (
                "an empty batch"
                if not batch
                else f"batches, which revision {session.protocol_version} does not allow"
            )
            raise Refused(InvalidRequest(f"Invalid Request: {why}"), 400)
        if len(batch) > self._max_batch:
            refusal = LimitExceeded(
                f"a batch of {len(batch)} entries", limit="max_batch", maximum=self._max_batch
            )
            self._boundary.refused(refusal)
            raise Refused(refusal, 400)
        responses: list[Message | None] = [None] * len(batch)
        entries = iter(enumerate(batch))

        async def one(index: int, item: Any) -> None:
            try:
                message = jsonrpc.validate(item)
            except ProtocolError as exc:
                responses[index] = answer_of(Refused(exc, None))
                return
            if jsonrpc.kind_of(message) is not MessageKind.RESPONSE:
                try:
                    self._read.check(message, size)  # the batch's size bounds each entry's
                except LimitExceeded as exc:
                    if "id" in message:  # a notification is never answered, not even so
                        responses[index] = answer_of(Refused(exc, None, message["id"]))
                    return
            responses[index] = await self._endpoint.handle(session, message)

        async def worker() -> None:
            for index, item in entries:  # the workers share one iterator: each entry runs once
                await one(index, item)

        async with anyio.create_task_group() as tg:
            for _ in range(min(self._batch_concurrency, len(batch))):
                tg.start_soon(worker)
        answers = [r for r in responses if r is not None]
        if not answers:
            return await respond(send, 202)
        return await respond(send, 200, jsonrpc.encode(answers), JSON_HEADERS)

    async def _initialize(self, message: Message, identity: Identity, send: Send) -> None:
        session = self._sessions.fresh("http", identity)
        session.endpoint = self._name
        response = await self._endpoint.handle(session, message)
        assert response is not None
        if "error" in response:
            return await respond(send, 200, jsonrpc.encode(response), JSON_HEADERS)
        try:
            session_id = await self._sessions.admit(session)
        except LimitExceeded as exc:  # full, and none of the identity's sessions idle
            self._boundary.refused(exc)
            raise Refused(exc, 200, message["id"]) from None
        headers = [*JSON_HEADERS, (b"mcp-session-id", session_id.encode())]
        return await respond(send, 200, jsonrpc.encode(response), headers)

    async def _get(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The standalone stream, or the resumption of a stream after ``Last-Event-ID``."""
        accept = header(scope, b"accept") or ""
        if "text/event-stream" not in accept:
            raise Refused(InvalidRequest("Not Acceptable: GET needs Accept: text/event-stream"), 406)
        session = await self._session(scope)
        last = header(scope, b"last-event-id")
        resume = parse_event_id(last) if last else None
        stream = session.find_stream(resume[0]) if resume else None
        if last is not None and stream is None:
            raise Refused(InvalidRequest(f"Not Found: no stream to resume for event {last!r}"), 404)
        followed = stream or session.standalone
        try:
            self._listening.take(session.id, followed.id)
        except LimitExceeded as exc:
            # 409, not 429: waiting does not help, closing one of the session's own streams does;
            # and not 405, which tells a client the server has no GET stream at all.
            self._boundary.refused(exc)
            raise Refused(exc, 409) from None
        try:
            await self._follow(session, followed, resume[1] if resume else None, receive, send)
        finally:
            self._listening.give_back(session.id, followed.id)
        return

    async def _follow(
        self, session: ClientSession, stream: EventStream, after: int | None, receive: Receive, send: Send
    ) -> None:
        """Serve one GET stream: ``stream`` from event ``after`` (else from what was delivered)."""
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        write = _sse_writer(send)
        version = session.protocol_version
        if after is None and stream is session.standalone and versions.at_least(version, "2025-11-25"):
            await send({"type": "http.response.body", "body": stream.priming(_RETRY_MS), "more_body": True})
        async with anyio.create_task_group() as tg:
            if stream is session.standalone:
                tg.start_soon(self._keepalive, session, write)
            await _follow_until_disconnect(
                stream, stream.delivered if after is None else after, write, receive
            )
            tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _keepalive(
        self, session: ClientSession, write: Callable[[str, bytes], Awaitable[None]]
    ) -> None:
        while True:
            await anyio.sleep(_KEEPALIVE)
            session.last_seen = self._clock()  # an open stream is not an idle session
            await write("", b"")

    async def _delete(self, scope: Scope, send: Send) -> None:
        session = await self._session(scope)
        await self._sessions.end(session)
        return await respond(send, 200)


def _wants_stream(session: ClientSession, message: Message) -> bool:
    """Answer with SSE when the server may send something first: progress the client asked
    for, or a request (sampling, elicitation, roots) the client said it can answer."""
    if message["method"] not in _RELAYED or session.protocol_version == "2024-11-05":
        return False
    meta = (message.get("params") or {}).get("_meta")
    if isinstance(meta, dict) and "progressToken" in meta:
        return True
    return any(capability in session.capabilities for capability in ASKED_CAPABILITIES)


def _sse_writer(send: Send) -> Callable[[str, bytes], Awaitable[None]]:
    lock = anyio.Lock()

    async def write(event_id: str, data: bytes) -> None:
        body = encode_event(data, event_id=event_id) if event_id else b": keepalive\n\n"
        async with lock:
            await send({"type": "http.response.body", "body": body, "more_body": True})

    return write


async def _follow_until_disconnect(
    stream: EventStream, after: int, write: Callable[[str, bytes], Awaitable[None]], receive: Receive
) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_on_disconnect, receive, tg.cancel_scope)
        await stream.follow(after, write)
        tg.cancel_scope.cancel()
