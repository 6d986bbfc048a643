"""This resource's OAuth 2.0 Protected Resource Metadata (RFC 9728): what MCP clients read first.

Pure: the document and the paths it is served at, from ``auth.oauth``. The paths are the
well-known prefix followed by the resource's path (RFC 9728 §3.1), by the local endpoint's path
(``/mcp``: behind a reverse proxy that adds a prefix, the proxy may pass either on), and the root
form that clients try last.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.config.oauth import OAuthSettings

__all__ = ["WELL_KNOWN", "metadata_document", "metadata_paths"]

WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"


def metadata_document(settings: OAuthSettings) -> dict[str, Any]:
    """The metadata document (RFC 9728 §2)."""
    document: dict[str, Any] = {
        "resource": settings.resource,
        "authorization_servers": [server.issuer for server in settings.authorization_servers],
        "bearer_methods_supported": ["header"],  # never the query string (MCP authorization spec)
        "resource_name": settings.resource_name,
    }
    scopes = settings.scopes_supported or settings.required_scopes
    if scopes:
        document["scopes_supported"] = list(scopes)
    return document


def metadata_paths(settings: OAuthSettings, *endpoint_paths: str) -> list[str]:
    """The local paths the document is served at, most specific first, without repeats.

    Every endpoint Manifold serves (``/mcp``, ``/mcp/NAME``) is part of the one protected
    resource, so each path's metadata names the same ``resource``: a client checks that it is
    the URL it connects to or a prefix of it (RFC 9728 §3.3, RFC 8707), and one token serves them all.
    """
    paths = [
        WELL_KNOWN + settings.path.rstrip("/"),
        *(WELL_KNOWN + path.rstrip("/") for path in endpoint_paths),
        WELL_KNOWN,
    ]
    return list(dict.fromkeys(p or WELL_KNOWN for p in paths))
