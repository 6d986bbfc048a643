"""The HTTP server around the MCP endpoint: routes, probes, metrics, access log, uvicorn.

    /mcp       the MCP endpoint (proxy.inbound.streamable_http): the whole catalog
    /mcp/NAME  a configured endpoint's view of it (proxy.views.endpoints); only configured names,
               matched exactly (no normalisation: /mcp/../mcp and /mcp/%2e%2e are 404)
    /healthz   200 while the process runs, with how many servers are in each state
    /readyz    200 once every server marked ``required`` is up, else 503
    /metrics   Prometheus text (here, or on ``metrics.port`` when that is set)
    /.well-known/oauth-protected-resource[/mcp]   with ``auth.oauth``: how to sign in (RFC 9728)
    /approvals/{id}  the approval page of a call waiting for an approver (proxy.inbound.approval_page)
    /oauth/callback  where users land after signing in to a server (proxy.inbound.signin_page)

What each caller may see of the last three, and the Host and Origin they are served to, is
:mod:`proxy.inbound.observers`' business.

The outermost ASGI layer counts bytes and writes one access-log line per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.config import Config
from uvicorn.server import Server

from proxy.auth.resource_metadata import metadata_document, metadata_paths
from proxy.clients.contract import Inbound
from proxy.inbound.approval_page import approval_routes
from proxy.inbound.connection_guard import ConnectionGuard
from proxy.inbound.descriptors import ACCEPT_BATCH, LISTEN_BACKLOG, AcceptFailures, relisten
from proxy.inbound.observers import (
    Observers,
    Refusal,
    View,
    detailed_health,
    metrics_require_auth,
    public_health,
)
from proxy.inbound.streamable_http import McpEndpoint, OriginPolicy, Receive, Scope, Send
from proxy.inbound.whole_post import Posts
from proxy.observe.boundary import supervised
from proxy.observe.logs import log_access
from proxy.observe.metrics import Metrics

__all__ = ["Mount", "bind", "build_app", "metrics_app", "mounts_app", "serve"]

logger = logging.getLogger("proxy.inbound.server")

Mount = tuple[str, Any]  # (path prefix, ASGI app): served at the prefix and every path under it


class _Observed:
    """Counts request and response bytes and writes the access-log line, for every request.

    It also sends ``/mcp`` straight to the endpoint: that path carries every call, and the
    router's matching is work it does not need.
    """

    def __init__(
        self,
        app: Any,
        endpoint: McpEndpoint | None,
        metrics: Metrics,
        endpoints: Mapping[str, McpEndpoint],
        mounts: Sequence[Mount] = (),
    ) -> None:
        self._app = app
        self._endpoint = endpoint
        self._metrics = metrics
        self._endpoints = endpoints  # exact path -> a named endpoint's app
        self._mounts = tuple(mounts)  # (path prefix, app): the admin API and console (proxy.admin)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        sizes = [0, 0]  # received, sent

        async def counted_receive() -> MutableMapping[str, Any]:
            message = await receive()
            sizes[0] += len(message.get("body", b""))
            return message

        async def counted_send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            else:
                sizes[1] += len(message.get("body", b""))
            await send(message)

        try:
            await self.route(scope["path"])(scope, counted_receive, counted_send)
        finally:
            self.account(scope, status, sizes[0], sizes[1], started)

    def route(self, path: str) -> Any:
        """The app that serves ``path``."""
        app = (
            self._endpoint
            if path == "/mcp" and self._endpoint is not None
            else self._endpoints.get(path, self._app)
        )
        for prefix, mounted in self._mounts:
            if path == prefix or path.startswith(prefix + "/"):
                return mounted
        return app

    def endpoint(self, path: str) -> McpEndpoint | None:
        """The MCP endpoint that serves ``path``, if any: its whole POSTs skip uvicorn's cycle and
        this layer's wrappers, and are counted by :mod:`proxy.inbound.whole_post`."""
        app = self.route(path)
        return app if isinstance(app, McpEndpoint) else None

    def account(self, scope: Scope, status: int, received: int, sent: int, started: float) -> None:
        """Count a request's bytes and write its access-log line."""
        self._metrics.bytes_in("http", received)
        self._metrics.bytes_out("http", sent)
        session = None
        for k, v in scope["headers"]:  # a loop, not next(generator): a generator resumes per header
            if k == b"mcp-session-id":
                session = bytes(v).decode("latin-1")
                break
        elapsed = (time.perf_counter() - started) * 1000
        log_access(scope["method"], scope["path"], status, elapsed, sent, session)


def _observers(inbound: Inbound) -> Observers:
    listen, config = inbound.config.listen, inbound.config
    origins = OriginPolicy(listen.host, listen.allowed_origins, listen.allowed_hosts)
    return Observers(inbound.auth, origins, config.metrics, require_auth=metrics_require_auth(config))


def _refused(refusal: Refusal) -> Response:
    return Response(f"{refusal.message}\n", status_code=refusal.status, headers=dict(refusal.headers))


def _metrics_route(inbound: Inbound, observers: Observers) -> Route:
    settings = inbound.config.metrics

    async def metrics(request: Request) -> Response:
        refusal = observers.admitted(request.headers) or await observers.may_scrape(request.headers)
        if refusal is not None:
            return _refused(refusal)
        # Rendering walks every series: seconds for a big catalog, so not on the event loop.
        body, content_type = await anyio.to_thread.run_sync(
            inbound.metrics.render, request.headers.get("accept")
        )
        return Response(body, media_type=content_type)

    return Route(settings.path, metrics)


def _probe_routes(inbound: Inbound, observers: Observers) -> list[Route]:
    health = inbound.health

    async def answer(request: Request, ready: bool) -> Response:
        if (refusal := observers.admitted(request.headers)) is not None:
            return _refused(refusal)
        view = await observers.view(request.headers)
        if isinstance(view, Refusal):
            return _refused(view)
        report = health.health()
        down = health.waiting_for() if ready else None
        shown = detailed_health(report, down) if view is View.DETAILS else public_health(report, down)
        if not ready:
            return JSONResponse({"status": "ok", **shown})
        return JSONResponse({"status": "not ready" if down else "ready", **shown}, 503 if down else 200)

    async def healthz(request: Request) -> Response:
        return await answer(request, ready=False)

    async def readyz(request: Request) -> Response:
        return await answer(request, ready=True)

    return [Route("/healthz", healthz), Route("/readyz", readyz)]


def endpoint_paths(endpoints: Mapping[str, Inbound]) -> dict[str, str]:
    """Each path an MCP endpoint is served at -> its endpoint name (``""``: ``/mcp``).

    With ``auth.oauth`` each also has its Protected Resource Metadata at
    ``/.well-known/oauth-protected-resource/mcp/NAME``: the one resource (``auth.oauth.resource``)
    covers them all (:func:`proxy.auth.resource_metadata.metadata_paths`).
    """
    return {"/mcp": "", **{f"/mcp/{name}": name for name in endpoints}}


class _Named(Mapping[str, "McpEndpoint"]):
    """``/mcp/NAME`` -> the app of endpoint NAME, read from ``endpoints`` as it is now (a config
    reload adds, replaces and removes endpoints in it), each app made once per :class:`Inbound`."""

    def __init__(self, endpoints: Mapping[str, Inbound], origins: OriginPolicy) -> None:
        self._endpoints = endpoints
        self._origins = origins
        self._apps: dict[str, tuple[Inbound, McpEndpoint]] = {}

    def __getitem__(self, path: str) -> McpEndpoint:
        if not path.startswith("/mcp/"):
            raise KeyError(path)
        name = path[len("/mcp/") :]
        inbound = self._endpoints[name]
        made = self._apps.get(name)
        if made is None or made[0] is not inbound:
            made = self._apps[name] = (inbound, McpEndpoint(inbound, self._origins))
        return made[1]

    def __iter__(self) -> Iterator[str]:
        return iter([f"/mcp/{name}" for name in self._endpoints])

    def __len__(self) -> int:
        return len(self._endpoints)


def build_app(
    inbound: Inbound, endpoints: Mapping[str, Inbound] | None = None, mounts: Sequence[Mount] = ()
) -> Any:
    """The HTTP app: ``/mcp`` serves ``inbound``; ``/mcp/NAME`` serves ``endpoints[NAME]``; each
    of ``mounts`` (path prefix, ASGI app) serves its prefix and every path under it."""
    listen = inbound.config.listen
    origins = OriginPolicy(listen.host, listen.allowed_origins, listen.allowed_hosts)
    endpoint = McpEndpoint(inbound, origins)
    named = _Named(endpoints or {}, origins)
    observers = _observers(inbound)
    routes = [Route("/mcp", endpoint), *_probe_routes(inbound, observers)]
    oauth = inbound.config.auth.oauth
    if oauth is not None:
        # A public document that browser-based clients (the MCP Inspector) read cross-origin.
        document = metadata_document(oauth)

        async def protected_resource(_: Request) -> JSONResponse:
            return JSONResponse(document, headers={"access-control-allow-origin": "*"})

        paths = metadata_paths(oauth, *endpoint_paths(endpoints or {}))
        routes += [Route(path, protected_resource, methods=["GET"]) for path in paths]
    if inbound.approvals is not None:
        origins = OriginPolicy(listen.host, listen.allowed_origins, listen.allowed_hosts)
        routes += approval_routes(inbound.approvals, inbound.auth, origins)
    if inbound.sign_in is not None:
        from proxy.inbound.signin_page import signin_routes  # with its OAuth client: only if used

        origins = OriginPolicy(listen.host, listen.allowed_origins, listen.allowed_hosts)
        routes += signin_routes(inbound.sign_in, inbound.auth, origins)
    if inbound.config.metrics.enabled and inbound.config.metrics.port is None:
        routes.append(_metrics_route(inbound, observers))
    return _Observed(Starlette(routes=routes), endpoint, inbound.metrics, named, mounts)


def mounts_app(inbound: Inbound, mounts: Sequence[Mount]) -> Any:
    """The app of a listener that serves ``mounts`` only (``admin.listen``); 404 elsewhere."""
    return _Observed(Starlette(routes=[]), None, inbound.metrics, {}, mounts)


def metrics_app(inbound: Inbound) -> Any:
    """The app of the separate metrics listener (``metrics.port``)."""
    return Starlette(routes=[_metrics_route(inbound, _observers(inbound))])


def bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket up front, so ``port=0`` works and readiness is exact."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


class _Server(Server):
    """uvicorn without its signal handlers: the CLI owns SIGINT/SIGTERM and cancels us; and with
    the kernel's listen queue set back once serving (:mod:`proxy.inbound.descriptors`)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        relisten(sockets or [])

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _guard(inbound: Inbound) -> ConnectionGuard:
    """One connection budget for both listeners: it stands for the process's descriptors."""
    config = inbound.config
    probes = {"/healthz", "/readyz"}
    if config.metrics.enabled:
        probes.add(config.metrics.path)
    # Server connections that hold descriptors: one per shared server, and as many per_client
    # ones as may run at once (limits.max_per_client_connections, across all such servers).
    servers = config.enabled_servers()
    per_client = any(s.session_mode == "per_client" for s in servers)
    connections = len(servers) + (config.limits.max_per_client_connections if per_client else 0)
    return ConnectionGuard(config.limits, inbound.boundary, frozenset(probes), servers=connections)


async def _run_uvicorn(app: Any, sock: socket.socket, guard: ConnectionGuard) -> None:
    """Serve ``app`` on ``sock`` until cancelled, then let uvicorn drain its connections."""
    http = guard.protocol()
    config = Config(
        app,
        http=http,  # httptools, with limits.max_connections, headers and timeouts
        ws="none",  # MCP has no WebSocket transport; an upgraded connection would leave the guard
        # An idle keep-alive connection is closed before its next request's header_timeout runs out.
        timeout_keep_alive=min(5, math.ceil(guard.header_timeout)),
        lifespan="off",
        log_config=None,  # our logging setup (JSON, redaction) applies to uvicorn's lines too
        access_log=False,  # _Observed writes the access log
        server_header=False,  # two headers fewer to build and validate on every response
        date_header=False,
        timeout_graceful_shutdown=2,
        backlog=ACCEPT_BATCH,  # asyncio accepts this many per wake-up: no burst takes every descriptor
    )
    if isinstance(app, _Observed):  # a listener of MCP endpoints: their whole POSTs skip the cycle
        http.posts = Posts(app, config, guard.max_body)
    server = _Server(config)
    stopped = anyio.Event()

    async def run() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            await stopped.wait()
        finally:
            # Ask uvicorn to drain and close its connections rather than cancelling it mid-write.
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await stopped.wait()
            tg.cancel_scope.cancel()


async def serve(
    inbound: Inbound,
    sock: socket.socket,
    metrics_sock: socket.socket | None = None,
    *,
    endpoints: Mapping[str, Inbound] | None = None,
    mounts: Sequence[Mount] = (),
    mounts_sock: socket.socket | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``/mcp`` (and the probes) on an already-bound socket until cancelled; ``mounts``
    there too, or on ``mounts_sock`` alone when it is given (``admin.listen``)."""
    with contextlib.suppress(RuntimeError):  # asyncio's loop (uvloop's never logs these)
        AcceptFailures().install(asyncio.get_running_loop())
    async with anyio.create_task_group() as tg:
        tg.start_soon(supervised, inbound.boundary, "session expiry", inbound.sessions.expire)
        guard = _guard(inbound)
        here = () if mounts_sock is not None else mounts
        tg.start_soon(_run_uvicorn, build_app(inbound, endpoints, here), sock, guard)
        if mounts_sock is not None:
            tg.start_soon(_run_uvicorn, mounts_app(inbound, mounts), mounts_sock, guard)
        if metrics_sock is not None:
            tg.start_soon(_run_uvicorn, metrics_app(inbound), metrics_sock, guard)
        task_status.started()
