"""The innermost stage: send a resolved request to its server, over the right connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from proxy.outbound.connection import ServerConnection
from proxy.pipeline import CallContext

__all__ = ["Router"]


class Router:
    def __init__(self, connection_for: Callable[[CallContext], Awaitable[ServerConnection]]) -> None:
        self._connection_for = connection_for

    async def __call__(self, ctx: CallContext) -> Any:
        """Raises: ServerUnavailable, ServerTimeout, RemoteError (from the connection)."""
        connection = await self._connection_for(ctx)
        return await connection.request(ctx.method, dict(ctx.params), relay=ctx.request)
