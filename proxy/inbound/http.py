"""Streamable HTTP, inbound: ``/mcp`` (POST, GET, DELETE) and ``/healthz``.

The MCP endpoint is a plain ASGI callable, because it is on every call's path and an
ASGI ``send`` of pre-encoded bytes is the cheapest response there is; Starlette only routes.
HTTP-level refusals (bad Origin, missing session, wrong content type) are answered here;
everything about MCP itself is the gateway's business.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import anyio.abc
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy.app import Gateway
from proxy.errors import INVALID_REQUEST, ProtocolError
from proxy.inbound.session import ClientSession, new_session_id
from proxy.protocol import jsonrpc, versions
from proxy.protocol.jsonrpc import Message, MessageKind
from proxy.protocol.sse import encode_event

__all__ = ["OriginPolicy", "McpEndpoint", "build_app", "serve"]

logger = logging.getLogger("proxy.inbound.http")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
_MAX_BODY: Final = 4 * 1024 * 1024
_KEEPALIVE: Final = 15.0
_JSON: Final = [(b"content-type", b"application/json")]
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


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def _respond(
    send: Send, status: int, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    head = [*(headers or []), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _error(send: Send, status: int, code: int, message: str, request_id: Any = None) -> None:
    body = jsonrpc.encode(jsonrpc.error_response(request_id, code, message))
    await _respond(send, status, body, _JSON)


class McpEndpoint:
    """The ASGI app behind ``/mcp``."""

    def __init__(
        self, gateway: Gateway, policy: OriginPolicy, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._gateway = gateway
        self._policy = policy
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._policy.origin_ok(_header(scope, b"origin")):
            return await _error(send, 403, INVALID_REQUEST, "Forbidden: Origin not allowed")
        if not self._policy.host_ok(_header(scope, b"host")):
            return await _error(send, 403, INVALID_REQUEST, "Forbidden: Host not allowed")
        method = scope["method"]
        if method == "POST":
            return await self._post(scope, receive, send)
        if method == "GET":
            return await self._get(scope, receive, send)
        if method == "DELETE":
            return await self._delete(scope, send)
        return await _respond(send, 405, b"", [(b"allow", b"GET, POST, DELETE")])

    async def _session(self, scope: Scope, send: Send) -> ClientSession | None:
        """The session a non-initialize request names, or None after answering 400/404."""
        session_id = _header(scope, b"mcp-session-id")
        if session_id is None:
            await _error(send, 400, INVALID_REQUEST, "Bad Request: missing Mcp-Session-Id header")
            return None
        session = self._gateway.sessions.get(session_id)
        if session is None:
            await _error(
                send, 404, INVALID_REQUEST, "Not Found: unknown or expired session; initialize again"
            )
            return None
        version = _header(scope, b"mcp-protocol-version")
        if version is not None and version not in versions.SUPPORTED:
            await _error(
                send, 400, INVALID_REQUEST, f"Bad Request: unsupported MCP-Protocol-Version {version!r}"
            )
            return None
        session.last_seen = self._clock()
        return session

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        content_type = (_header(scope, b"content-type") or "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            return await _error(send, 415, INVALID_REQUEST, "Unsupported Media Type: POST application/json")
        accept = _header(scope, b"accept")
        if accept is not None and not any(t in accept for t in ("application/json", "*/*", "application/*")):
            return await _error(
                send, 406, INVALID_REQUEST, "Not Acceptable: Accept must include application/json"
            )
        body = await _read_body(receive)
        if body is None:
            return await _error(send, 413, INVALID_REQUEST, f"Payload Too Large: limit is {_MAX_BODY} bytes")
        try:
            message = jsonrpc.parse(body)
        except ProtocolError as exc:
            return await _error(send, 400, exc.code, exc.message)
        if message.get("method") == "initialize" and "id" in message:
            return await self._initialize(message, send)
        session = await self._session(scope, send)
        if session is None:
            return None
        if jsonrpc.kind_of(message) is not MessageKind.REQUEST:
            await self._gateway.handle(session, message)
            return await _respond(send, 202)
        response = await self._gateway.handle(session, message)
        if response is None:
            # Cancelled by the client: it hears nothing back, so the stream closes empty.
            return await _respond(send, 200, b"", _SSE)
        return await _respond(send, 200, jsonrpc.encode(response), _JSON)

    async def _initialize(self, message: Message, send: Send) -> None:
        session = ClientSession(id=new_session_id(), transport="http", last_seen=self._clock())
        response = await self._gateway.handle(session, message)
        assert response is not None
        if "error" in response:
            return await _respond(send, 200, jsonrpc.encode(response), _JSON)
        self._gateway.sessions[session.id] = session
        headers = [*_JSON, (b"mcp-session-id", session.id.encode())]
        return await _respond(send, 200, jsonrpc.encode(response), headers)

    async def _get(self, scope: Scope, receive: Receive, send: Send) -> None:
        accept = _header(scope, b"accept") or ""
        if "text/event-stream" not in accept:
            return await _error(
                send, 406, INVALID_REQUEST, "Not Acceptable: GET needs Accept: text/event-stream"
            )
        session = await self._session(scope, send)
        if session is None:
            return None
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
            while session.id in self._gateway.sessions:
                with anyio.move_on_after(_KEEPALIVE):
                    data = jsonrpc.encode(await session.next_notification())
                    await send({"type": "http.response.body", "body": encode_event(data), "more_body": True})
                    continue
                session.last_seen = self._clock()  # an open stream is not an idle session
                await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
            tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return None

    async def _delete(self, scope: Scope, send: Send) -> None:
        session = await self._session(scope, send)
        if session is None:
            return None
        self._gateway.sessions.pop(session.id, None)
        for in_flight in list(session.in_flight.values()):
            in_flight.cancel()
        return await _respond(send, 200)


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def _expire_sessions(gateway: Gateway, idle_timeout: float, clock: Callable[[], float]) -> None:
    """Forget HTTP sessions that have been idle longer than ``idle_timeout``."""
    while True:
        await anyio.sleep(min(60.0, idle_timeout / 2))
        deadline = clock() - idle_timeout
        for session_id, session in list(gateway.sessions.items()):
            if session.transport == "http" and session.last_seen < deadline and not session.in_flight:
                del gateway.sessions[session_id]
                logger.info("session %s expired after %gs idle", session_id[:8], idle_timeout)


def build_app(gateway: Gateway) -> Starlette:
    listen = gateway.config.listen
    endpoint = McpEndpoint(gateway, OriginPolicy(listen.host, listen.allowed_origins, listen.allowed_hosts))

    async def healthz(_: Request) -> JSONResponse:
        servers = {sid: conn.state.value for sid, conn in gateway.connections.items()}
        return JSONResponse({"status": "ok", "servers": servers})

    return Starlette(routes=[Route("/mcp", endpoint), Route("/healthz", healthz)])


def bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket up front, so ``port=0`` works and readiness is exact."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the CLI owns SIGINT/SIGTERM and cancels us."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    gateway: Gateway,
    sock: socket.socket,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``/mcp`` on an already-bound socket until cancelled."""
    config = uvicorn.Config(
        build_app(gateway),
        http="httptools",
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
    )
    server = _Server(config)
    stopped = anyio.Event()

    async def run_server() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            stopped.set()

    idle = gateway.config.sessions.idle_timeout
    async with anyio.create_task_group() as tg:
        tg.start_soon(_expire_sessions, gateway, idle, time.monotonic)
        tg.start_soon(run_server)
        task_status.started()
        try:
            await stopped.wait()
        finally:
            # Ask uvicorn to drain and close its connections rather than cancelling it mid-write.
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await stopped.wait()
            tg.cancel_scope.cancel()
