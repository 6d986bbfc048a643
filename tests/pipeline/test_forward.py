"""The innermost stage: which bridge a request takes, and what reaches the server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from proxy.clients.session import ClientSession, InboundRequest
from proxy.core.errors import InvalidRequestState
from proxy.outbound.connection import ServerConnection
from proxy.pipeline.bridge.mrtr import Rounds
from proxy.pipeline.bridge.parking import Connection
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import CallContext, Caller
from proxy.pipeline.forward import Forward

pytestmark = pytest.mark.anyio


@dataclass
class HandshakeServer:
    """A handshake-era server connection: records the params of every request."""

    sent: list[dict[str, Any]] = field(default_factory=list)
    server_id: str = "hs"
    stateless: bool = False

    async def request(self, method: str, params: dict[str, Any] | None = None, **_: Any) -> Any:
        self.sent.append(dict(params or {}))
        return {"content": []}


class Connections:
    def __init__(self, server: HandshakeServer) -> None:
        self.server = server

    async def for_call(self, caller: Caller, server_id: str) -> ServerConnection:
        return self.server  # type: ignore[return-value]  # duck-typed: request(), server_id, stateless

    def asked_through(self, connection: ServerConnection) -> Connection:
        return connection


class NoParking:
    async def call(self, connection: Connection, ctx: CallContext) -> Any:
        raise AssertionError("a handshake-era caller is never parked")


def forward(server: HandshakeServer) -> Forward:
    rounds = Rounds(RequestStates(b"k" * 32, ttl=60), max_rounds=10)
    return Forward(Connections(server), rounds, NoParking())


def call(params: dict[str, Any]) -> CallContext:
    session = ClientSession("s1", "http", protocol_version="2025-11-25", initialized=True)
    return CallContext(InboundRequest(session, lambda _: None), 1, "tools/call", "hs", "hs.t", params)


async def test_a_handshake_callers_request_state_never_reaches_a_handshake_server() -> None:
    server = HandshakeServer()
    with pytest.raises(InvalidRequestState):
        await forward(server)(call({"name": "t", "requestState": "a state of the client's making"}))
    assert server.sent == []
    await forward(server)(call({"name": "t"}))
    assert server.sent == [{"name": "t"}]
