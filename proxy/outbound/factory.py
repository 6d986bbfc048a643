"""From a server's config to the transport that reaches it."""

from __future__ import annotations

from collections.abc import Mapping

from proxy.config.model import LimitsConfig, ServerConfig
from proxy.outbound.over_stdio.transport import StdioTransport
from proxy.outbound.transport import Transport

__all__ = ["transport_for"]


def transport_for(
    server: ServerConfig,
    *,
    limits: LimitsConfig | None = None,
    headers: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Transport:
    """The transport that reaches ``server``, bounded by ``limits`` (the defaults where not given):
    ``max_depth`` and ``max_server_message_bytes`` for every message it decodes (a stdio line, an
    HTTP JSON body, an SSE event), and for a stdio server how much of its stderr is kept and
    logged. ``headers`` (an HTTP server) and ``env`` (a stdio server's process) are one identity's
    credentials (:mod:`proxy.credentials`), merged over the configured ones."""
    limits = limits or LimitsConfig()
    if server.kind == "stdio":
        assert server.command is not None
        return StdioTransport(
            server.id,
            server.command,
            server.args,
            env={**server.resolved_env(), **(env or {})},
            cwd=server.cwd,
            max_depth=limits.max_depth,
            max_line=limits.max_server_message_bytes,
            stderr_lines_kept=limits.stderr_lines_kept,
            stderr_lines_logged_per_minute=limits.stderr_lines_logged_per_minute,
        )
    if server.openapi is not None:
        from proxy.outbound.over_openapi.transport import OpenApiTransport  # loads only when configured

        return OpenApiTransport(
            server.id,
            server.openapi,
            server.url,
            _merged_headers(server.resolved_headers(), headers or {}),
            connect_timeout=server.connect_timeout,
        )
    assert server.url is not None
    assert server.transport != "stdio"
    from proxy.outbound.over_http.modes import http_transport  # loads only when an HTTP server is configured

    return http_transport(
        server.id,
        server.url,
        _merged_headers(server.resolved_headers(), headers or {}),
        server.transport,
        connect_timeout=server.connect_timeout,
        max_depth=limits.max_depth,
        max_message_bytes=limits.max_server_message_bytes,
    )


def _merged_headers(configured: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """``own`` over ``configured``, header names compared without case (one Authorization)."""
    replaced = {name.lower() for name in own}
    return {**{k: v for k, v in configured.items() if k.lower() not in replaced}, **own}
