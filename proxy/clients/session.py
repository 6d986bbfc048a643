"""Our session with one client: what it negotiated, and the channels back to it.

Messages to a client travel one of two ways. A message about a request (progress, a log
line, a server's sampling request) goes on that request's own stream when it has one (an SSE
response on HTTP); everything else, and request-related messages when the request has no
stream, goes on the session's standalone stream (the GET stream on HTTP, stdout on stdio).
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import anyio

from proxy.clients.streams import REPLAY_BYTES, EventStream
from proxy.core.errors import MethodNotFound, MissingCapability, RemoteError
from proxy.policy.model import ANONYMOUS, Identity
from proxy.protocol import jsonrpc
from proxy.protocol.asks import NEEDS
from proxy.protocol.jsonrpc import Message, RequestId
from proxy.protocol.stateless import LOG_LEVELS

__all__ = [
    "Client",
    "ClientSession",
    "InboundRequest",
    "LOG_LEVELS",
    "StatelessCaller",
    "cancel_named",
    "declared",
    "kept_client_info",
    "new_session_id",
    "wants_log",
]

logger = logging.getLogger("proxy.clients.session")

_KEEP_CLOSED_STREAMS: Final = 8  # finished request streams kept for Last-Event-ID replay
_CLIENT_ANSWER_TIMEOUT: Final = 600.0  # a person may be answering an elicitation

Deliver = Callable[[Message], None]


def cancel_named(in_flight: Mapping[RequestId, anyio.CancelScope], notification: Message) -> bool:
    """Act on a client's ``notifications/cancelled``: cancel the request it names, if it is
    still in flight (an unknown or finished id is no error); whether one was."""
    request_id = (notification.get("params") or {}).get("requestId")
    scope = in_flight.get(request_id) if isinstance(request_id, str | int) else None
    if scope is None:
        return False
    scope.cancel()
    return True


_CLIENT_INFO_FIELDS: Final = ("name", "title", "version")
_MAX_CLIENT_INFO_FIELD: Final = 256


def kept_client_info(client_info: Mapping[str, Any]) -> dict[str, Any]:
    """What a session keeps of a client's ``clientInfo``: its name, title and version, as strings
    of at most 256 characters (it lives as long as the session; nothing else reads more)."""
    return {
        key: value[:_MAX_CLIENT_INFO_FIELD]
        for key in _CLIENT_INFO_FIELDS
        if isinstance(value := client_info.get(key), str)
    }


def new_session_id() -> str:
    """A cryptographically random id of visible ASCII, as the transport spec requires."""
    return secrets.token_urlsafe(32)


@dataclass(slots=True)
class _Asked:
    event: anyio.Event = field(default_factory=anyio.Event)
    response: Message | None = None


def wants_log(floor: str | None, level: object) -> bool:
    """Whether a log line at ``level`` reaches a client that asked for ``floor`` and above."""
    if floor is None or level not in LOG_LEVELS:
        return False
    return LOG_LEVELS.index(str(level)) >= LOG_LEVELS.index(floor)


def declared(capabilities: Mapping[str, Any], method: str, params: dict[str, Any] | None) -> bool:
    """Whether a client with ``capabilities`` declared what a server's ``method`` request needs."""
    need = NEEDS.get(method)
    if need is None or need not in capabilities:
        return False
    if method == "elicitation/create" and (params or {}).get("mode") == "url":
        return "url" in (capabilities.get("elicitation") or {})
    return True


@dataclass(frozen=True, eq=False, slots=True)
class StatelessCaller:
    """The caller of one 2026-07-28 request: what its envelope said, for as long as the request
    lives. Nothing registers it; its id is unique, so a server's question is never attributed to
    another request."""

    id: str
    transport: str  # "http" | "stdio"
    protocol_version: str
    capabilities: Mapping[str, Any]
    identity: Identity
    client_info: Mapping[str, Any] = field(default_factory=dict)
    log_level: str | None = None  # log lines only if the request asked, at or above it
    stateless: ClassVar[bool] = True

    def wants_log(self, level: object) -> bool:
        return wants_log(self.log_level, level)

    def supports(self, method: str, params: dict[str, Any] | None) -> bool:
        return declared(self.capabilities, method, params)


@dataclass(eq=False)
class ClientSession:
    """A handshake-era client's session: from ``initialize`` (or stdio's first request) to its end
    (:class:`proxy.clients.sessions.Sessions`)."""

    id: str
    transport: str  # "http" | "stdio"
    protocol_version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    initialized: bool = False
    identity: Identity = ANONYMOUS
    last_seen: float = 0.0
    log_level: str | None = None
    subscriptions: dict[str, str] = field(default_factory=dict)  # resource URI: its server
    in_flight: dict[RequestId, anyio.CancelScope] = field(default_factory=dict)
    replay_bytes: int = REPLAY_BYTES  # limits.replay_buffer_bytes: kept per stream for replay
    endpoint: str = ""  # the endpoint it was opened on ("": /mcp); it is served there only
    standalone: EventStream = field(init=False)
    streams: dict[str, EventStream] = field(default_factory=dict)
    _last_notice: Message | None = None
    _asked: dict[str, _Asked] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _stream_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    stateless: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.standalone = EventStream("0", self.replay_bytes)

    def notify(self, message: Message) -> None:
        """Queue a message on the client's standalone stream; never blocks."""
        if message is self._last_notice and self.standalone.pending:
            return  # the same list_changed, still unread, tells the client nothing new
        self._last_notice = message
        self.standalone.push(message)

    def open_stream(self) -> EventStream:
        """A new stream for one request's response; old finished ones are forgotten."""
        stream = EventStream(str(next(self._stream_ids)), self.replay_bytes)
        self.streams[stream.id] = stream
        finished = [sid for sid, s in self.streams.items() if s.closed]
        for sid in finished[: max(0, len(finished) - _KEEP_CLOSED_STREAMS)]:
            del self.streams[sid]
        return stream

    def find_stream(self, stream_id: str) -> EventStream | None:
        return self.standalone if stream_id == self.standalone.id else self.streams.get(stream_id)

    def wants_log(self, level: object) -> bool:
        """Whether a server log line at ``level`` reaches this client (it set a level at or below)."""
        return wants_log(self.log_level, level)

    def wants_notification(self, message: Message) -> bool:
        """Whether a server notification about no request is for this session: a log line at or
        above the level it asked for, or an update of a resource it subscribed to."""
        params = message.get("params") or {}
        if message["method"] == "notifications/message":
            return self.wants_log(params.get("level"))
        if message["method"] == "notifications/resources/updated":
            return params.get("uri") in self.subscriptions
        return False

    def supports(self, method: str, params: dict[str, Any] | None) -> bool:
        return declared(self.capabilities, method, params)

    async def ask(self, method: str, params: dict[str, Any] | None, deliver: Deliver) -> Any:
        """Send the client a request of our own and wait for its answer.

        Raises:
            RemoteError: the client answered with an error.
            TimeoutError: no answer within the (generous) client answer timeout.
        """
        request_id = f"manifold-{next(self._ids)}"
        asked = self._asked[request_id] = _Asked()
        try:
            deliver(jsonrpc.request(request_id, method, params))
            with anyio.fail_after(_CLIENT_ANSWER_TIMEOUT):
                await asked.event.wait()
        except anyio.get_cancelled_exc_class():
            # The server gave up on its request: let the client stop asking its user.
            deliver(jsonrpc.notification("notifications/cancelled", {"requestId": request_id}))
            raise
        finally:
            del self._asked[request_id]
        assert asked.response is not None
        if "error" in asked.response:
            raise RemoteError("client", asked.response["error"])
        return asked.response.get("result")

    def answered(self, response: Message) -> None:
        """A response from the client to one of our requests (unknown ids are dropped)."""
        request_id = response.get("id")
        asked = self._asked.get(request_id) if isinstance(request_id, str) else None
        if asked is None:
            logger.debug("session %s: dropped a response to unknown id %r", self.id[:8], response.get("id"))
            return
        asked.response = response
        asked.event.set()


Client = ClientSession | StatelessCaller


@dataclass(frozen=True, slots=True)
class InboundRequest:
    """One client request in progress: the :class:`~proxy.pipeline.context.Caller` of what it causes."""

    session: Client
    stream: Deliver | None = None  # the request's own stream, if its transport gives it one

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def capabilities(self) -> Mapping[str, Any]:
        return self.session.capabilities

    @property
    def log_level(self) -> str | None:
        return self.session.log_level

    @property
    def asleep(self) -> bool:
        return False  # a client's own request is waiting for its answer

    @property
    def identity(self) -> Identity:
        return self.session.identity

    @property
    def stateless(self) -> bool:
        return self.session.stateless

    def supports(self, method: str, params: dict[str, Any] | None) -> bool:
        return self.session.supports(method, params)

    def notify(self, message: Message) -> None:
        session = self.session
        if isinstance(session, StatelessCaller):
            if message["method"] == "notifications/message" and not session.wants_log(
                (message.get("params") or {}).get("level")
            ):
                return  # 2026-07-28: log lines only for a request that asked (logLevel), at its level
            if self.stream is not None:
                self.stream(message)
            return
        (self.stream or session.notify)(message)

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        session = self.session
        if not session.supports(method, params):
            if session.stateless and method in NEEDS:
                raise MissingCapability(
                    f"{method} needs the client capability {NEEDS[method]!r}, undeclared in the request",
                    required={NEEDS[method]: {}},
                )
            raise MethodNotFound(f"the client did not declare the capability {method} needs")
        if isinstance(session, StatelessCaller):
            # A 2026-07-28 client is asked only through an input_required result (proxy.pipeline.bridge).
            raise MethodNotFound(f"Manifold cannot send {method} to a 2026-07-28 client as a request")
        return await session.ask(method, params, self.notify)
