"""Learning a server's era as a connection starts (PLAN §1.11): ``server/discover`` answered with a
stateless revision means 2026-07-28; any error, or no answer in time, means the handshake era,
so ``initialize``.

A server remembered (or pinned) as handshake-era gets ``initialize`` straight away; if it refuses
that as an unsupported revision (-32022: it was upgraded), it is probed again. The requests go
out through the connection's own ``call``; what the server said of itself comes back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from proxy.core.errors import RemoteError, ServerUnavailable
from proxy.outbound.era import CLIENT_INFO, Era, Introduction, envelope, parse_discover, parse_initialize
from proxy.protocol import versions
from proxy.protocol.client_tasks import declared

__all__ = ["Call", "negotiate"]

logger = logging.getLogger("proxy.outbound.connection")

DISCOVER_TIMEOUT: Final = 10.0  # a handshake-era server may ignore server/discover altogether


class Call(Protocol):
    def __call__(
        self, method: str, params: dict[str, Any] | None, timeout: float, *, era: Era
    ) -> Awaitable[Any]: ...


async def negotiate(
    call: Call,
    *,
    server_id: str,
    era: Era,
    pinned: bool,
    connect_timeout: float,
    client_capabilities: dict[str, Any],
    initialized: Callable[[], Awaitable[None]],
) -> Introduction:
    """What the server says of itself, in the era it speaks. ``initialized`` sends
    ``notifications/initialized`` after a handshake.

    Raises:
        ServerUnavailable: no usable answer (a pinned stateless server that did not discover).
        RemoteError: the server refused ``initialize``.
    """

    async def discover() -> Introduction | None:
        timeout = min(DISCOVER_TIMEOUT, connect_timeout / 3)
        try:
            result = await call("server/discover", {"_meta": envelope(None)}, timeout, era=Era.STATELESS)
        except (RemoteError, ServerUnavailable) as exc:
            # An error, silence, or an unusable answer (an HTTP status, the legacy HTTP+SSE
            # transport's refusal): not a 2026-07-28 server. A dead link fails initialize as well.
            logger.debug("server %s: server/discover failed (%s): handshake era", server_id, exc)
            return None
        return parse_discover(result)

    async def handshake() -> Introduction:
        params = {
            "protocolVersion": versions.LATEST,
            "capabilities": declared(client_capabilities),  # with the tasks Manifold holds
            "clientInfo": CLIENT_INFO,
        }
        result = await call("initialize", params, connect_timeout, era=Era.HANDSHAKE)
        introduction = parse_initialize(result, server_id)
        await initialized()
        return introduction

    if era is not Era.HANDSHAKE:
        if (found := await discover()) is not None:
            return found
        if pinned:
            raise ServerUnavailable(server_id, "it did not answer server/discover (era: stateless)")
    try:
        return await handshake()
    except RemoteError as exc:
        if exc.error.get("code") != -32022 or pinned or (found := await discover()) is None:
            raise
        return found
