"""One long-lived, multiplexed connection to one MCP server, kept alive by a supervisor.

``ServerConnection.run`` owns the server for Manifold's lifetime: it connects, learns the
server's era (``server/discover`` first; any error or silence means a handshake-era server, so
``initialize``), drains every list the server offers (tools, prompts, resources, resource
templates), then serves requests until the link dies, and starts over after an exponential
backoff. The era found is remembered across restarts and checked again when it fails. To a
2026-07-28 server every request carries the ``_meta`` envelope of the client it is for (that
client's capabilities and log level, Manifold's client info), and ``resources/(un)subscribe``
become the filter of the ``subscriptions/listen`` stream kept open to it.

Requests from every client session share the one link: each gets a fresh id from this
connection's own counter, so clients that reuse JSON-RPC ids never receive each other's
answers, and progress tokens are remapped the same way.

Messages a server sends *about* a request (progress, log lines, sampling/elicitation/roots
requests) go back through that request's :class:`Relay`, i.e. to the one client session that
caused them, never to everyone.

Nothing one server sends ends more than that server's own requests: an unusable answer fails
the request it was for (the transport says which), a message that breaks the rules is dropped,
and an unexpected error in one connected lifetime is logged, counted and followed by a restart,
like any other failure. Only cancellation leaves :meth:`ServerConnection.run`.

Health follows outcomes, not only the link (:mod:`proxy.outbound.health`); the requests in
flight are :mod:`proxy.outbound.pending`'s.

The rules live beside it: ``era`` (the envelope, what a server says of itself, x-mcp-header
tools), ``lists`` (paging), ``listening`` (the listen stream), ``relay`` (whose request it is),
``client_tasks`` (a server's task-augmented sampling and elicitation, held as tasks by Manifold).
It depends on nothing above it: what a failed server request is answered with comes in from the
caller (``answer_error``), as does the counter of internal errors (``on_internal_error``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Final

import anyio
import anyio.abc

from proxy.core.errors import (
    INTERNAL_ERROR,
    InvalidRequest,
    LimitExceeded,
    ProtocolError,
    RemoteError,
    ServerTimeout,
    ServerUnavailable,
    Unencodable,
)
from proxy.outbound.client_tasks import ClientTasks
from proxy.outbound.era import (
    CLIENT_CAPABILITIES,
    Era,
    Introduction,
    envelope,
    mirror_tools,
)
from proxy.outbound.health import SERVING, ConnectionListener, Health, LimitHook, ServerState, backoff_delay
from proxy.outbound.listening import WATCH_METHODS, Listening, untagged
from proxy.outbound.lists import CHANGED, LIST_KINDS, drain, offered
from proxy.outbound.negotiation import negotiate
from proxy.outbound.pending import Pending, time_out
from proxy.outbound.relay import Relay, related_task, relay_for
from proxy.outbound.transport import Diagnostics, Failed, Link, Transport
from proxy.protocol import jsonrpc
from proxy.protocol.client_tasks import POLLS
from proxy.protocol.headers import ParamHeader, param_headers
from proxy.protocol.jsonrpc import Message, MessageKind, RequestId
from proxy.protocol.results import CacheHint
from proxy.protocol.subscriptions import LISTEN
from proxy.tracing.active import RelayTrace
from proxy.tracing.carry import to_client, to_server

__all__ = ["AnswerError", "InternalErrorHook", "ServerConnection"]

# The error response to a server's request that failed (``proxy.observe.boundary.wire_error``).
AnswerError = Callable[[Exception, RequestId], Message]
# Told of each unexpected error (logged already) and where it happened: "outbound.connection" (a
# connected lifetime ended by it; a restart follows), "outbound.dispatch" (one message from the
# server dropped), "outbound.server_request" (one server request answered with -32603).
InternalErrorHook = Callable[[str, BaseException], None]

logger = logging.getLogger("proxy.outbound.connection")

_STABLE_AFTER: Final = 30.0  # seconds up before a crash no longer counts toward the backoff
_CANCEL_GRACE: Final = 1.0


class ServerConnection:
    def __init__(
        self,
        server_id: str,
        transport: Transport,
        listener: ConnectionListener,
        *,
        connect_timeout: float = 30.0,
        request_timeout: float = 60.0,
        max_pages: int = 1000,
        client_capabilities: dict[str, Any] | None = None,
        default_relay: Relay | None = None,
        clock: Callable[[], float] = time.monotonic,
        era: Era = Era.UNKNOWN,
        answer_error: AnswerError,
        on_internal_error: InternalErrorHook | None = None,
        max_items: int = 10_000,
        failures_until_unready: int = 5,
        on_limit: LimitHook | None = None,
        client_tasks: ClientTasks | None = None,
    ) -> None:
        """``answer_error`` turns the failure of a server's request (sampling, elicitation, roots)
        into the error response the server gets; ``on_internal_error`` hears of every unexpected
        error (already logged) with where it happened, ``on_limit`` of every limit the server
        ran into. ``max_items`` bounds each list (``limits.max_server_items``);
        ``failures_until_unready`` calls failed in a row make the server ``failing``."""
        self.server_id = server_id
        self._answer_error = answer_error
        self._on_internal_error = on_internal_error
        self._transport = transport
        self._listener = listener
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._max_pages = max_pages
        self._max_items = max_items
        self._on_limit = on_limit
        self.client_tasks = client_tasks or ClientTasks(server_id)
        self.health = Health(
            server_id, listener, failures_until_unready=failures_until_unready, on_limit=on_limit
        )
        # The lists cut at max_items in this connected lifetime, by kind (shown in /healthz).
        self.capped: dict[str, int] = {}
        self._client_capabilities = (
            CLIENT_CAPABILITIES if client_capabilities is None else client_capabilities
        )
        # A connection that serves one client session only: server requests outside any
        # request of the client (roots/list after initialize) still have somewhere to go.
        self._default_relay = default_relay
        self._clock = clock
        self._pending = Pending(server_id)
        self._server_requests: dict[RequestId, anyio.CancelScope] = {}
        self._unasked = anyio.Event()  # set while no request of the server's waits for its answer
        self._unasked.set()
        self._link: Link | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._stale: set[str] = set()
        self._refresh = anyio.Event()
        # 2026-07-28 servers tell of changes on a subscriptions/listen stream: the resource URIs it
        # is to cover (kept across restarts), and the keeper of the stream while a link lives.
        self._listening = Listening(server_id, backoff=backoff_delay)
        # A 2026-07-28 server's tools/call mirrors annotated arguments in Mcp-Param-* headers:
        # the annotations of its tools that have any, by the server's own tool name.
        self._param_specs: dict[str, tuple[ParamHeader, ...]] = {}
        # What a 2026-07-28 server said of each list's freshness (ttlMs, cacheScope), by kind.
        self.cache_hints: dict[str, CacheHint] = {}
        self.restarts = 0
        self.server_info: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}
        self.instructions: str | None = None
        self.protocol_version: str | None = None
        # Remembered across restarts; UNKNOWN and HANDSHAKE are probed with server/discover first.
        self.era = era
        self._pinned = era is not Era.UNKNOWN  # the operator said which: no probing
        self.first_attempt_done = anyio.Event()

    @property
    def stateless(self) -> bool:
        """Whether the server speaks 2026-07-28 (stateless): no handshake, an envelope per request."""
        return self.era is Era.STATELESS

    @property
    def in_flight(self) -> int:
        """Client requests sent and not yet answered; Manifold's own (lists, a listen stream) are
        not counted. A ``per_client`` connection is idle at 0."""
        return self._pending.in_flight

    # ---- public API -------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        relay: Relay | None = None,
    ) -> Any:
        """Send one request and wait for its result.

        ``relay`` is the client request this one serves: the server's progress, log lines and
        requests about it are passed back through it.

        Raises:
            ServerUnavailable: the server is not connected, or went away mid-request.
            ServerTimeout: no answer within ``timeout`` (default: the server's request timeout).
            RemoteError: the server answered with a JSON-RPC error.
        """
        link = self._link
        if link is None or self.state not in SERVING:
            raise ServerUnavailable(self.server_id, self.reason or self.state.value)
        if self.stateless and method in WATCH_METHODS:
            return self._listening.watch(method, params, self.capabilities)
        try:
            result = await self._call(
                link, method, params, self.request_timeout if timeout is None else timeout, relay
            )
        except ServerUnavailable as exc:  # timeouts and protocol errors included
            self.health.outcome(exc)
            raise
        except RemoteError:
            self.health.outcome(None)  # the server answered: it works
            raise
        self.health.outcome(None)
        return result

    async def answered(self, wait: float) -> None:
        """Until every request the server sent us has been answered (its answer written), or
        ``wait`` seconds: what a client's first request on a ``per_client`` connection waits for,
        so that the server has the ``roots/list`` answer it asked for at initialize first."""
        with anyio.move_on_after(wait):
            await self._unasked.wait()

    @property
    def serving(self) -> bool:
        """Whether requests go out to the server (it is connected, whether or not they succeed)."""
        return self.health.serving

    @property
    def state(self) -> ServerState:
        return self.health.state

    @property
    def reason(self) -> str | None:
        return self.health.reason

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification if connected; dropped silently otherwise (nothing waits for it)."""
        link = self._link
        if link is not None:
            try:
                await link.send(jsonrpc.notification(method, params))
            except ServerUnavailable:
                pass
            except Unencodable as exc:
                logger.warning("server %s: dropped %s: %s", self.server_id, method, exc)

    def stderr_tail(self, count: int | None = None) -> list[str]:
        """The last ``count`` lines the server wrote to stderr, oldest first (a stdio server's;
        none for others): what a health report shows of a server that is not ready."""
        return self._transport.stderr_tail(count) if isinstance(self._transport, Diagnostics) else []

    async def run(self) -> None:
        """Keep the server connected until cancelled; nothing else ever leaves it."""
        attempt = 0
        # Told, not only set in __init__: a listener counts each STARTING after the first as a
        # restart, so a silent first start would make it count the first restart as the start.
        self.health.set(ServerState.STARTING, None)
        while True:
            started = self._clock()
            try:
                reason = await self._serve_once()
            except Exception as exc:  # one lifetime's surprise must not end the gateway
                self._internal_error("outbound.connection", exc)
                reason = f"internal error: {type(exc).__name__}"
            self._link = None
            self._pending.fail_all(ServerUnavailable(self.server_id, reason))
            if self._clock() - started >= _STABLE_AFTER:
                attempt = 0
            delay = backoff_delay(attempt)
            attempt += 1
            self.health.set(ServerState.BACKOFF, reason)
            logger.warning("server %s: %s; restarting in %.1fs", self.server_id, reason, delay)
            self.first_attempt_done.set()
            await anyio.sleep(delay)
            self.restarts += 1
            self.health.set(ServerState.STARTING, None)

    # ---- one connected lifetime ------------------------------------------------------

    async def _serve_once(self) -> str:
        """Connect, handshake, list, then serve until the link dies. Returns why it ended."""
        down: list[str] = []
        try:
            async with self._transport.connect() as link, anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._read_loop, link, down, tg.cancel_scope)
                try:
                    with anyio.fail_after(self.connect_timeout):
                        await self._negotiate(link)
                        lists = {kind: await self._list(link, kind) for kind in offered(self.capabilities)}
                except TimeoutError:
                    down.append(f"no handshake within {self.connect_timeout:g}s (connect timeout)")
                except (ServerUnavailable, RemoteError, ProtocolError) as exc:
                    down.append(str(exc))
                if down:
                    tg.cancel_scope.cancel()
                    return down[0]
                self._link = link
                self.health.connected()
                for kind in LIST_KINDS:
                    self._listener.listed(self.server_id, kind, lists.get(kind, []))
                self.first_attempt_done.set()
                counts = ", ".join(f"{len(items)} {kind}" for kind, items in lists.items())
                logger.info("server %s: ready (%s)", self.server_id, counts or "nothing listed")
                tg.start_soon(self._refresher, link)
                if self.stateless and self._listening.filter(self.capabilities) is not None:
                    listen = functools.partial(self._call, link, LISTEN, timeout=math.inf)
                    tg.start_soon(self._listening.keep, listen, self.capabilities)
        except ServerUnavailable as exc:
            return exc.reason if not down else down[0]
        finally:
            self._tg = None
        return down[0] if down else "the connection closed"

    async def _read_loop(self, link: Link, down: list[str], scope: anyio.CancelScope) -> None:
        try:
            while True:
                message, related = await link.receive()
                if isinstance(message, Failed):
                    if message.request_id is None:  # which one cannot be told: each may have been it
                        if isinstance(cause := message.error.__cause__, LimitExceeded) and self._on_limit:
                            self._on_limit(cause)  # once: the waiters each get a copy without it
                        self._pending.fail_all(message.error)
                    else:
                        self._pending.settle(message.request_id, failure=message.error)
                    continue
                try:
                    await self._dispatch(link, message, related)
                except Exception as exc:  # one message's surprise costs that message only
                    self._internal_error("outbound.dispatch", exc)
        except ServerUnavailable as exc:
            down.append(exc.reason)
        scope.cancel()

    async def _dispatch(self, link: Link, message: Message, related: RequestId | None) -> None:
        kind = jsonrpc.kind_of(message)
        if kind is MessageKind.RESPONSE:
            self._pending.settle(message.get("id"), response=message)
        elif kind is MessageKind.REQUEST:
            request_id = message["id"]
            if message["method"] == "ping":
                await self._reply(link, jsonrpc.result_response(request_id, {}), request_id)
            elif request_id in self._server_requests:
                # Its answer could not tell which of the two it is for: the second is refused.
                refused = InvalidRequest(
                    f"request id {request_id!r} is already in use by a request in flight"
                )
                await self._reply(link, self._answer_error(refused, request_id), request_id)
            elif self._tg is not None:
                # Registered before the task runs, so that a duplicate or a cancel that overtakes
                # the task still finds it.
                scope = self._server_requests[request_id] = anyio.CancelScope()
                if self._unasked.is_set():
                    self._unasked = anyio.Event()
                self._tg.start_soon(self._relay_request, link, message, related, scope)
        else:
            self._notification(message, related)

    def _notification(self, message: Message, related: RequestId | None) -> None:
        method = message["method"]
        params = message.get("params") or {}
        if method == "notifications/progress":
            token = params.get("progressToken")
            slot = self._pending.get(token)
            if slot is not None and slot.relay is not None and slot.progress_token is not None:
                slot.tell(jsonrpc.notification(method, {**params, "progressToken": slot.progress_token}))
        elif method in CHANGED:
            self._stale.update(CHANGED[method])
            self._refresh.set()
        elif method == "notifications/subscriptions/acknowledged":
            logger.debug("server %s: listening for %s", self.server_id, params.get("notifications"))
        elif method == "notifications/cancelled":
            request_id = params.get("requestId")
            scope = self._server_requests.get(request_id) if isinstance(request_id, int | str) else None
            if scope is not None:
                scope.cancel()
        else:
            slot = self._pending.get(related)
            if slot is not None and slot.relay is not None:
                slot.tell(message)
            else:
                self._listener.server_notification(self.server_id, untagged(message))

    async def _relay_request(
        self, link: Link, message: Message, related: RequestId | None, scope: anyio.CancelScope
    ) -> None:
        """Pass a server's request (sampling, elicitation, roots) to its client; answer the server.

        Cancelled (the server's ``notifications/cancelled``): nothing is written back.
        """
        request_id: RequestId = message["id"]
        traced: RelayTrace | None = None
        failure: Exception | None = None
        try:
            with scope:
                try:
                    if message["method"] in POLLS:  # a task Manifold holds for this server
                        result = await self.client_tasks.poll(message["method"], message.get("params"))
                    else:
                        relays = self._pending.relays()
                        if related is None:  # over stdio: the task it is about may say whose it is
                            related = self._pending.waiting_on(related_task(message))
                        default, method = self._default_relay, message["method"]
                        relay = relay_for(related, relays, default, method=method, server_id=self.server_id)
                        call = self._pending.trace_of(related, relay)
                        traced, params = to_client(call, method, message.get("params"))
                        result = await self.client_tasks.ask(relay, method, params, self._tg)
                    reply = jsonrpc.result_response(request_id, result)
                except Exception as exc:
                    failure = exc
                    reply = self._answer_error(exc, request_id)
                await self._reply(link, reply, request_id)
        except Exception as exc:  # answer_error itself failed: the server still gets an answer
            self._internal_error("outbound.server_request", exc)
            with contextlib.suppress(ServerUnavailable, Unencodable):
                await link.send(_internal_error_reply(request_id))
        finally:
            if traced is not None:
                traced.end(failure)
            if self._server_requests.get(request_id) is scope:
                del self._server_requests[request_id]
            if not self._server_requests:
                self._unasked.set()

    async def _reply(self, link: Link, reply: Message, request_id: RequestId) -> None:
        """Answer a server's request; an answer that cannot be written as JSON becomes an error."""
        try:
            await link.send(reply)
        except ServerUnavailable:
            pass  # the link is gone, and the request with it
        except Unencodable as exc:
            with contextlib.suppress(ServerUnavailable):
                await link.send(self._answer_error(exc, request_id))

    def _internal_error(self, where: str, exc: BaseException) -> None:
        """Log an unexpected error once, with its traceback, and count it."""
        logger.error("server %s: internal error in %s", self.server_id, where, exc_info=exc)
        if self._on_internal_error is not None:
            try:
                self._on_internal_error(where, exc)
            except Exception:
                logger.exception("server %s: the internal-error hook failed", self.server_id)

    async def _refresher(self, link: Link) -> None:
        """Re-list what the server says changed; bursts coalesce into one re-list per kind."""
        while True:
            await self._refresh.wait()
            self._refresh = anyio.Event()
            kinds, self._stale = self._stale, set()
            for kind in (k for k in LIST_KINDS if k in kinds and k in offered(self.capabilities)):
                try:
                    items = await self._list(link, kind)
                except (ServerUnavailable, RemoteError, ProtocolError) as exc:
                    logger.warning("server %s: re-listing %s failed: %s", self.server_id, kind, exc)
                    continue
                self._listener.listed(self.server_id, kind, items)

    # ---- protocol steps --------------------------------------------------------------

    async def _negotiate(self, link: Link) -> None:
        async def call(method: str, params: dict[str, Any] | None, timeout: float, *, era: Era) -> Any:
            return await self._call(link, method, params, timeout, era=era)

        async def initialized() -> None:
            await link.send(jsonrpc.notification("notifications/initialized"))

        self._adopt(
            await negotiate(
                call,
                server_id=self.server_id,
                era=self.era,
                pinned=self._pinned,
                connect_timeout=self.connect_timeout,
                client_capabilities=self._client_capabilities,
                initialized=initialized,
            )
        )

    def _adopt(self, introduction: Introduction) -> None:
        self.era = introduction.era
        self.protocol_version = introduction.protocol_version
        self.capabilities = introduction.capabilities
        self.server_info = introduction.server_info
        self.instructions = introduction.instructions

    async def _list(self, link: Link, kind: str) -> list[dict[str, Any]]:
        """Every page of one list (see :func:`~proxy.outbound.lists.drain`)."""

        async def fetch(method: str, params: dict[str, Any] | None) -> Any:
            return await self._call(link, method, params, self.request_timeout)

        drained = await drain(
            fetch, kind, max_pages=self._max_pages, server_id=self.server_id, max_items=self._max_items
        )
        if drained.capped:
            self.capped[kind] = self._max_items
            if self._on_limit is not None:
                what = f"server {self.server_id!r} listed more {kind} than kept"
                self._on_limit(LimitExceeded(what, limit="max_server_items", maximum=self._max_items))
        else:
            self.capped.pop(kind, None)
        if drained.hint is None:
            self.cache_hints.pop(kind, None)
        else:
            self.cache_hints[kind] = drained.hint
        if not (drained.ended and kind == "tools" and self.stateless):
            return drained.items
        # A 2026-07-28 server's tools whose annotations break the rules are dropped (as a client
        # on HTTP must); the annotations of the others are remembered for their calls.
        mirrored = mirror_tools(drained.items)
        for name, problem in mirrored.dropped:
            logger.warning("server %s: dropped tool %r: %s", self.server_id, name, problem)
        self._param_specs = mirrored.specs
        return mirrored.tools

    async def _call(
        self,
        link: Link,
        method: str,
        params: dict[str, Any] | None,
        timeout: float,
        relay: Relay | None = None,
        *,
        era: Era | None = None,
    ) -> Any:
        """``era``: speak this era whatever the server is thought to be (negotiation)."""
        loop = asyncio.get_running_loop()
        request_id, slot = self._pending.open(relay, loop)
        if method == "tasks/result" and params:  # the server asks about that task on this request
            slot.task = params.get("taskId")
        if (era or self.era) is Era.STATELESS:
            params = dict(params or {})
            params["_meta"] = {**(params.get("_meta") or {}), **envelope(relay)}
        meta = params.get("_meta") if params else None
        if relay is not None and isinstance(meta, dict) and "progressToken" in meta:
            # Tokens are the client's; on a shared connection they could collide, so the server
            # sees our request id as the token, and progress is mapped back on the way out.
            assert params is not None
            slot.progress_token = meta["progressToken"]
            params = {**params, "_meta": {**meta, "progressToken": request_id}}
        specs = self._param_specs.get(str(params.get("name"))) if method == "tools/call" and params else None
        headers = None
        if specs and params is not None:
            arguments = params.get("arguments")
            headers = param_headers(specs, arguments if isinstance(arguments, dict) else {})
        # Our CLIENT span is the server's parent (or, untraced, the caller's context cleaned).
        slot.trace, params, headers = to_server(method, params, headers, self.server_id, request_id)
        failure: BaseException | None = None  # how the wait ended if not with an answer (for the span)
        try:
            await link.send(jsonrpc.request(request_id, method, params), headers=headers)
            # math.inf (a listen stream) has no timer: it waits for its answer or its end.
            timer = loop.call_later(timeout, time_out, slot.outcome) if timeout < math.inf else None
            try:
                timed_out = await slot.outcome
            finally:
                if timer is not None:
                    timer.cancel()
            if timed_out:
                await self._cancel(link, request_id, "timeout")
                raise ServerTimeout(self.server_id, method, timeout)
        except anyio.get_cancelled_exc_class() as exc:
            failure = exc
            # Our caller was cancelled: tell the server, under its id, and stop waiting.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_GRACE):
                await self._cancel(link, request_id, "cancelled by the client")
            raise
        except Exception as exc:
            failure = exc
            raise
        finally:
            self._pending.close(request_id, failure)
        if slot.failure is not None:
            raise slot.failure
        assert slot.response is not None
        if "error" in slot.response:
            raise RemoteError(self.server_id, slot.response["error"])
        return slot.response["result"]

    async def _cancel(self, link: Link, request_id: int, reason: str) -> None:
        with contextlib.suppress(ServerUnavailable):
            await link.send(
                jsonrpc.notification("notifications/cancelled", {"requestId": request_id, "reason": reason})
            )

    def retire(self, reason: str) -> None:
        """Its server was removed or replaced (a config reload): fail every request in flight
        with ``reason``, naming the server. Its owner cancels :meth:`run` besides."""
        self._pending.fail_all(ServerUnavailable(self.server_id, reason))


def _internal_error_reply(request_id: RequestId) -> Message:
    return jsonrpc.error_response(request_id, INTERNAL_ERROR, "internal error in Manifold; see its log")
