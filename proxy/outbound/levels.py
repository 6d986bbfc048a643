"""Telling a server what to log: the handshake era's ``logging/setLevel``.

A 2026-07-28 server has no ``logging/setLevel``: each request carries its caller's level
(:mod:`proxy.outbound.era`), so only a handshake-era connection that declared ``logging`` and
is serving is told.
"""

from __future__ import annotations

import logging

from proxy.outbound.connection import ServerConnection

__all__ = ["takes_levels", "tell_level"]

logger = logging.getLogger("proxy.outbound.connection")


def takes_levels(connection: ServerConnection) -> bool:
    """Whether ``connection``'s server can be told a log level now."""
    return "logging" in connection.capabilities and connection.serving and not connection.stateless


async def tell_level(connection: ServerConnection, level: str) -> None:
    """Ask the server to log at ``level`` and above. Never raises but cancellation: one server's
    refusal must not fail the client's request (it is logged)."""
    try:
        await connection.request("logging/setLevel", {"level": level})
    except Exception as exc:
        logger.warning("server %s: logging/setLevel failed: %s", connection.server_id, exc)
