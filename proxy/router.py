"""The innermost stage: send a resolved call to its server under the server's own name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.outbound.connection import ServerConnection
from proxy.pipeline import CallContext

__all__ = ["Router"]


class Router:
    def __init__(self, connections: Mapping[str, ServerConnection]) -> None:
        self._connections = connections

    async def __call__(self, ctx: CallContext) -> Any:
        """Raises: ServerUnavailable, ServerTimeout, RemoteError (from the connection)."""
        params = dict(ctx.params)
        params["name"] = ctx.tool.original_name
        return await self._connections[ctx.tool.server_id].request("tools/call", params)
