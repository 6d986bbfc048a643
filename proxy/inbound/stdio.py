"""stdio, inbound: a desktop client spawns ``manifold stdio`` and speaks NDJSON to it.

The client's first request decides the connection's era, once, as the official SDK's dual-era
stdio server does (``mcp.server.runner.serve_dual_era_loop``):

- ``initialize``, or any request without a 2026-07-28 ``_meta`` envelope → **handshake**: one
  handshake-era session, answered by ``Endpoint.handle``; what it has to say besides responses
  (notifications, the servers' questions) goes out on its standalone stream, i.e. stdout.
- a request whose ``params._meta`` names a protocol revision → **stateless**: every request is
  classified on its own (``protocol.stateless.classify``, no header rung on stdio) and answered by
  ``Endpoint.handle_stateless`` for a caller built from its envelope; its progress and the log lines
  it opted into are written before its response, and ``notifications/cancelled {requestId}``
  cancels it (nothing more is written for it). ``subscriptions/listen`` streams the same way.
- a request whose envelope is malformed (no capabilities, a revision not served, …) gets its
  error and decides nothing (see ``_request`` for why this differs from the SDK).

Afterwards the other era is refused: ``initialize`` on a stateless connection gets -32022 naming
the stateless revisions, an enveloped request on a handshake one -32600.

Each request is answered in a task of its own, so a slow tool never holds up the next
request; writes to stdout are serialised. Logs go to stderr only: stdout is the protocol.

There is exactly one client, so the shared servers speak for it (``client_arrived``): they are
started once its first request says what it can do (``initialize``'s capabilities, or the first
2026-07-28 envelope's), declaring its roots, sampling and elicitation to their servers as a
``per_client`` connection does, and every request waits (bounded) for their first attempt to
connect. What a server asks outside any call (``roots/list`` after its ``initialize``) waits at a
:class:`~proxy.servers.held_questions.Doorway`: a handshake client is asked on stdout once it has sent
``notifications/initialized`` (or any further request); a 2026-07-28 client inside its next call.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import anyio
from anyio.abc import TaskGroup

from proxy.clients.contract import Inbound
from proxy.clients.session import ClientSession, InboundRequest
from proxy.core.errors import InvalidRequest, MessageTooLarge, ProtocolError, request_id_of
from proxy.inbound.reading import Reader
from proxy.inbound.refusals import Refused, answer_of
from proxy.inbound.stdio_stateless import StatelessRequests, initialize_refused
from proxy.observe.boundary import wire_error
from proxy.outbound.relay import Relay
from proxy.protocol import jsonrpc, stateless
from proxy.protocol.asks import kept_capabilities
from proxy.protocol.jsonrpc import Message, MessageKind, RequestId

__all__ = ["serve_stdio"]

logger = logging.getLogger("proxy.inbound.stdio")

Write = Callable[[bytes], Awaitable[None]]


class HeldQuestions(Protocol):
    """Where what the servers ask outside any call waits until a caller enters to answer it."""

    def enter(self, caller: Relay) -> None: ...


# The shared servers start for the one client, with its capabilities; back once they have tried.
ClientArrived = Callable[[Mapping[str, Any]], Awaitable[HeldQuestions]]

_ENVELOPE_ON_HANDSHAKE: Final = (
    "this connection serves the handshake protocol era (it began with initialize); "
    "requests carrying the 2026-07-28 _meta envelope are not accepted on it"
)


class _Era(enum.Enum):
    UNDECIDED = "undecided"
    HANDSHAKE = "handshake"
    STATELESS = "stateless"


async def serve_stdio(
    inbound: Inbound,
    lines: AsyncIterable[bytes | MessageTooLarge],
    write: Write,
    *,
    client_arrived: ClientArrived | None = None,
) -> None:
    """Serve one client until ``lines`` ends (the client closed our stdin); requests still in
    flight then are cancelled. A line too long to read (``limits.max_request_bytes``: the reader
    of ``lines`` dropped it, never holding it whole) is answered with its refusal.
    ``client_arrived``: starts the shared servers for this client (see the module docstring)."""
    await _Connection(inbound, write, client_arrived).serve(lines)


class _Connection:
    """One client on stdin/stdout, in the era its first request chose."""

    _tg: TaskGroup  # every request's task, and the handshake session's standalone stream

    def __init__(self, inbound: Inbound, write: Write, client_arrived: ClientArrived | None = None) -> None:
        self._inbound = inbound
        self._write = write
        self._client_arrived = client_arrived
        self._servers_up = anyio.Event()  # every request waits for it: the servers are started
        if client_arrived is None:
            self._servers_up.set()
        self._held: HeldQuestions | None = None  # what the servers ask outside any call waits here
        self._initialized = False  # the handshake client may be asked things on stdout
        self._asked_on_stdout = False
        self._lock = anyio.Lock()
        self._era = _Era.UNDECIDED
        self._session: ClientSession | None = None  # handshake: the one session
        self._stateless = StatelessRequests(inbound, self._send)
        self._read = Reader(inbound.config.limits, inbound.boundary)

    async def serve(self, lines: AsyncIterable[bytes | MessageTooLarge]) -> None:
        try:
            async with anyio.create_task_group() as self._tg:
                async for line in lines:
                    if isinstance(line, MessageTooLarge):
                        self._inbound.boundary.refused(line)
                        await self._send(self._error(line, None))
                        continue
                    self._inbound.metrics.bytes_in("stdio", len(line))
                    if line.strip():
                        await self._line(line)
                logger.info("stdin closed; the client is gone")
                self._tg.cancel_scope.cancel()
        finally:
            if self._session is not None:
                await self._inbound.sessions.end(self._session)

    async def _line(self, line: bytes) -> None:
        """The boundary of one line: a failure of our own is logged and counted, and the
        connection reads on."""
        try:
            await self._received(line)
        except Exception as exc:
            self._inbound.boundary.caught(exc, "session", "a line from the stdio client")

    def _start(self, request_id: RequestId, run: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run one request in its own task, whose failure answers that request and no other."""

        async def supervised() -> None:
            try:
                await self._servers_up.wait()  # bounded: each server's first attempt is
                await run(*args)
            except Exception as exc:
                self._inbound.boundary.caught(exc, "request", f"stdio request {request_id!r}")
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    await self._send(wire_error(exc, request_id, stateless=self._era is _Era.STATELESS))

        self._tg.start_soon(supervised)

    async def _received(self, line: bytes) -> None:
        """Act on one line from the client; never raises for what the client sent."""
        try:
            decoded = self._read.decode(line)
        except ProtocolError as exc:
            return await self._send(self._error(exc, request_id_of(exc)))
        try:
            message = jsonrpc.validate(decoded)
        except ProtocolError as exc:
            return await self._send(self._error(exc, _readable_id(decoded)))
        kind = jsonrpc.kind_of(message)
        if kind is not MessageKind.RESPONSE:
            try:
                self._read.check(message, len(line))
            except ProtocolError as exc:
                if kind is MessageKind.REQUEST:
                    await self._send(self._error(exc, message["id"]))
                return None
        if kind is MessageKind.REQUEST:
            return await self._request(message)
        if self._session is not None:  # handshake
            if message.get("method") == "notifications/initialized":
                self._ask_on_stdout()
            await self._inbound.endpoint.handle(self._session, message)
        elif kind is MessageKind.NOTIFICATION and message["method"] == "notifications/cancelled":
            self._stateless.cancel(message)
        else:
            # Before the first request there is nothing for a notification to be about; a
            # stateless client sends nothing but cancellations, and answers nothing (we ask nothing).
            logger.debug("ignored a %s on a %s connection", kind.value, self._era.value)
        return None

    async def _request(self, message: Message) -> None:
        request_id: RequestId = message["id"]
        method = message["method"]
        enveloped = stateless.has_envelope(message)
        if self._era is _Era.UNDECIDED and (method == "initialize" or not enveloped):
            self._open_handshake()
            params = message.get("params")
            declared = (
                params.get("capabilities") if method == "initialize" and isinstance(params, dict) else None
            )
            self._start_servers(declared)
        if self._session is not None:  # handshake
            if enveloped and method != "initialize":
                return await self._send(
                    answer_of(Refused(InvalidRequest(_ENVELOPE_ON_HANDSHAKE), None, request_id))
                )
            if method != "initialize":
                self._ask_on_stdout()  # a client that asks things is initialized
            self._start(request_id, self._answer_handshake, self._session, message)
            return None
        if method == "initialize":  # only ever here on a connection that is stateless already
            return await self._send(
                answer_of(Refused(initialize_refused(message), None, request_id, stateless=True))
            )
        try:
            envelope = stateless.classify(message, None)
        except ProtocolError as exc:
            # A malformed envelope answers the error and leaves an undecided era undecided.
            # The SDK locks the connection stateless on the version key alone; we do not, because
            # our -32022 names the handshake revisions too (versions.ADVERTISED) and the spec's
            # stdio probe falls back to initialize on any error other than a recognised stateless
            # one: locking now would refuse the very initialize our answer invites.
            return await self._send(answer_of(Refused(exc, None, request_id, stateless=True)))
        if self._era is _Era.UNDECIDED:
            logger.info(
                "the first request carries a %s envelope: serving it statelessly", envelope.protocol_version
            )
            self._era = _Era.STATELESS
            self._start_servers(envelope.capabilities)
        self._start(request_id, self._stateless.answer, message, envelope)
        return None

    def _start_servers(self, declared: object) -> None:
        """The client said what it can do (its first request): start the shared servers for it."""
        arrived = self._client_arrived
        if arrived is None:
            return
        capabilities = kept_capabilities(declared) if isinstance(declared, Mapping) else {}

        async def start() -> None:
            try:
                self._held = await arrived(capabilities)
            finally:
                self._servers_up.set()
            if self._initialized:
                self._ask_on_stdout()

        self._tg.start_soon(start)

    def _ask_on_stdout(self) -> None:
        """The handshake client is initialized: what the servers ask outside any call goes to it."""
        self._initialized = True
        if self._held is not None and self._session is not None and not self._asked_on_stdout:
            self._asked_on_stdout = True
            self._held.enter(InboundRequest(self._session))

    def _open_handshake(self) -> None:
        session = self._inbound.sessions.open("stdio", self._inbound.auth.stdio_identity)
        session.endpoint = self._inbound.endpoint_name
        self._session, self._era = session, _Era.HANDSHAKE
        self._tg.start_soon(self._pump_standalone, session)

    async def _pump_standalone(self, session: ClientSession) -> None:
        # Everything but responses (notifications, our requests to the client) is queued on
        # the session's standalone stream; on stdio that is simply more lines on stdout.
        async def write_event(_: str, data: bytes) -> None:
            await self._write_line(data)

        await session.standalone.follow(0, write_event)

    async def _answer_handshake(self, session: ClientSession, message: Message) -> None:
        response = await self._inbound.endpoint.handle(session, message)
        if response is not None:
            await self._send(response)

    def _error(self, exc: ProtocolError, request_id: RequestId | None) -> Message:
        return answer_of(Refused(exc, None, request_id, stateless=self._era is _Era.STATELESS))

    async def _send(self, message: Message) -> None:
        await self._write_line(jsonrpc.encode(message))

    async def _write_line(self, data: bytes) -> None:
        self._inbound.metrics.bytes_out("stdio", len(data) + 1)
        async with self._lock:
            await self._write(data + b"\n")


def _readable_id(decoded: Any) -> RequestId | None:
    """The id of a request that failed validation, if it has one the client could match."""
    request_id = decoded.get("id") if isinstance(decoded, dict) and "method" in decoded else None
    return request_id if isinstance(request_id, str | int) and not isinstance(request_id, bool) else None
