"""The innermost stage: send a resolved request to its server, over the right connection, in
the server's era.

Most requests go out as they are. The three that may need the client's input mid-call
(``tools/call``, ``prompts/get``, ``resources/read``) are bridged when the caller and the server
differ in how they ask for it (:mod:`proxy.pipeline.bridge`):

    caller \\ server   handshake era                  2026-07-28
    handshake era      server requests relayed        input_required unrolled into requests
    2026-07-28         call parked, input_required    input_required passed, state wrapped

A handshake-era caller never sees what only 2026-07-28 defines (``resultType``, cache hints; a
task handle is left whole for :mod:`proxy.tasks.modern_servers` to turn into a handshake-era task), and
no server is sent a ``requestState`` that is not its own unwrapped from Manifold's seal: one a
handshake-era caller sends to a handshake-era server (which never issued one) is refused.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.core.errors import InvalidRequestState
from proxy.outbound.connection import ServerConnection
from proxy.pipeline.bridge.mrtr import Rounds
from proxy.pipeline.bridge.parking import Connection
from proxy.pipeline.context import CallContext, Caller
from proxy.protocol import results

__all__ = ["Forward", "Parking"]


class Parking(Protocol):
    """Runs a 2026-07-28 caller's request on a handshake-era server (see proxy.pipeline.bridge.parking)."""

    async def call(self, connection: Connection, ctx: CallContext) -> Any: ...


class ConnectionChoice(Protocol):
    """Which connection a caller reaches a server on (:class:`proxy.servers.connections.Connections`)."""

    async def for_call(self, caller: Caller, server_id: str) -> ServerConnection: ...

    def asked_through(self, connection: ServerConnection) -> Connection:
        """``connection`` as a parked call goes out on it: an identity's own connection first
        has the caller answer what its server asked outside any call (:mod:`proxy.servers.held_questions`)."""
        ...


class Forward:
    def __init__(self, connections: ConnectionChoice, rounds: Rounds, parking: Parking) -> None:
        self._connections = connections
        self._rounds = rounds
        self._parking = parking

    async def __call__(self, ctx: CallContext) -> Any:
        """Raises: ServerUnavailable, ServerTimeout, RemoteError (from the connection);
        InvalidRequestState (a state that is not Manifold's for this request)."""
        connection = await self._connections.for_call(ctx.caller, ctx.server_id)
        stateless_caller = ctx.caller.stateless
        if ctx.method not in results.INPUT_REQUIRED_METHODS:
            result = await connection.request(ctx.method, dict(ctx.params), relay=ctx.caller)
        elif connection.stateless:
            bridge = self._rounds.pass_through if stateless_caller else self._rounds.unroll
            result = await bridge(connection, ctx)
        elif stateless_caller:
            return await self._parking.call(self._connections.asked_through(connection), ctx)
        else:
            if "requestState" in ctx.params:  # nobody issued this caller one for this server
                raise InvalidRequestState()
            result = await connection.request(ctx.method, dict(ctx.params), relay=ctx.caller)
        if connection.stateless and not stateless_caller and isinstance(result, dict):
            # A task handle stays one: proxy.tasks.modern_servers takes it for the caller.
            return result if result.get("resultType") == "task" else results.handshake(result)
        return result
