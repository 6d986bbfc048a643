"""How Manifold, as a client, speaks to a server of each era, pure: no I/O, no clock.

A server is either spoken to with the ``initialize`` handshake (the handshake era) or, from
revision 2026-07-28 on, statelessly: it answers ``server/discover`` and every request carries an
envelope in ``params._meta`` about the client it is for. This module decides the shapes on the
2026-07-28 side: the envelope Manifold sends (:func:`envelope`), and which of a server's tools
survive its ``x-mcp-header`` annotations, with the annotations to mirror into ``Mcp-Param-*``
headers (:func:`mirror_tools`); and for both eras, what a server says of itself when first
spoken to (:func:`parse_discover`, :func:`parse_initialize`).
:class:`~proxy.outbound.connection.ServerConnection` does the talking.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy import __version__
from proxy.core.errors import ServerProtocolError, ServerUnavailable
from proxy.outbound.relay import Relay
from proxy.protocol import versions
from proxy.protocol.asks import ASKED_CAPABILITIES
from proxy.protocol.extensions import OWN, TASKS, HoldingTasks, relayable
from proxy.protocol.headers import ParamHeader, x_mcp_header_problem, x_mcp_headers
from proxy.protocol.stateless import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LOG_LEVEL_KEY,
    PROTOCOL_VERSION_KEY,
    SERVER_INFO_KEY,
)

__all__ = [
    "CLIENT_CAPABILITIES",
    "CLIENT_INFO",
    "RELAYED",
    "relayed_capabilities",
    "Era",
    "Introduction",
    "Mirrored",
    "envelope",
    "mirror_tools",
    "parse_discover",
    "parse_initialize",
]

# What Manifold tells servers it can do as a client: it relays these to the client session
# whose request caused them, if that client declared them too (else the server gets an error);
# and the extensions it relays whatever the client (proxy.protocol.extensions).
CLIENT_CAPABILITIES: Final[dict[str, Any]] = {
    "sampling": {},
    "elicitation": {"form": {}, "url": {}},
    "extensions": dict(OWN),
}
# What a server may ask a client for, and the extensions a client declared that Manifold relays:
# what a client's own connection (per_client, manifold stdio) and a 2026-07-28 request carry.
RELAYED: Final = (*ASKED_CAPABILITIES, "extensions")
CLIENT_INFO: Final = {"name": "manifold", "version": __version__}


def relayed_capabilities(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """What of a client's declared capabilities its server hears of: :data:`RELAYED`, the
    extensions among them only those Manifold relays (a 2026-07-28 caller's come unfiltered),
    and the tasks extension where Manifold holds the server's task for the caller
    (:class:`~proxy.protocol.extensions.HoldingTasks`)."""
    relayed = {k: v for k, v in capabilities.items() if k in RELAYED and k != "extensions"}
    extensions = relayable(capabilities.get("extensions"))[0]
    if isinstance(capabilities, HoldingTasks):
        extensions[TASKS] = {}
    if extensions:
        relayed["extensions"] = extensions
    return relayed


class Era(enum.Enum):
    """How a server is spoken to: the ``initialize`` handshake, or 2026-07-28's envelope per request."""

    UNKNOWN = "unknown"
    HANDSHAKE = "handshake"
    STATELESS = "stateless"

    @classmethod
    def of(cls, setting: str) -> Era:
        """The era a server's ``era:`` setting pins (``auto``: none, find out).

        Raises:
            ValueError: the setting names no era.
        """
        return cls.UNKNOWN if setting == "auto" else cls(setting)


def envelope(relay: Relay | None) -> dict[str, Any]:
    """The ``_meta`` a 2026-07-28 server gets with a request: about the client it is for (what
    that client may be asked through Manifold, its log level), or Manifold's own for requests on
    nobody's behalf; Manifold's client info either way."""
    if relay is None:
        return {
            PROTOCOL_VERSION_KEY: versions.LATEST_STATELESS,
            CLIENT_CAPABILITIES_KEY: {},
            CLIENT_INFO_KEY: CLIENT_INFO,
        }
    meta: dict[str, Any] = {
        PROTOCOL_VERSION_KEY: versions.LATEST_STATELESS,
        CLIENT_CAPABILITIES_KEY: relayed_capabilities(relay.capabilities),
        CLIENT_INFO_KEY: CLIENT_INFO,
    }
    if relay.log_level is not None:
        meta[LOG_LEVEL_KEY] = relay.log_level
    return meta


@dataclass(frozen=True, slots=True)
class Introduction:
    """What a server said of itself when first spoken to (``server/discover`` or ``initialize``)."""

    era: Era
    protocol_version: str
    capabilities: dict[str, Any]
    server_info: dict[str, Any]
    instructions: str | None


def parse_discover(result: Any) -> Introduction | None:
    """What a ``server/discover`` result tells; None when it does not offer 2026-07-28 (the
    server is then spoken to in the handshake era)."""
    offered = result.get("supportedVersions") if isinstance(result, dict) else None
    if not isinstance(offered, list) or versions.LATEST_STATELESS not in offered:
        return None
    assert isinstance(result, dict)
    meta = result.get("_meta")
    info = meta.get(SERVER_INFO_KEY) if isinstance(meta, dict) else None
    instructions, capabilities = result.get("instructions"), result.get("capabilities")
    return Introduction(
        era=Era.STATELESS,
        protocol_version=versions.LATEST_STATELESS,
        capabilities=capabilities if isinstance(capabilities, dict) else {},
        server_info=info if isinstance(info, dict) else {},
        instructions=instructions if isinstance(instructions, str) else None,
    )


def parse_initialize(result: Any, server_id: str) -> Introduction:
    """What an ``initialize`` result tells.

    Raises:
        ServerProtocolError: the result is not an object.
        ServerUnavailable: the server chose a revision Manifold does not speak.
    """
    if not isinstance(result, dict):
        raise ServerProtocolError(server_id, "it answered initialize with a non-object result")
    version = result.get("protocolVersion")
    if version not in versions.SUPPORTED:
        raise ServerUnavailable(
            server_id, f"it chose protocol revision {version!r}, which Manifold does not speak"
        )
    instructions = result.get("instructions")
    capabilities, server_info = result.get("capabilities"), result.get("serverInfo")
    return Introduction(
        era=Era.HANDSHAKE,
        protocol_version=version,
        capabilities=capabilities if isinstance(capabilities, dict) else {},
        server_info=server_info if isinstance(server_info, dict) else {},
        instructions=instructions if isinstance(instructions, str) else None,
    )


@dataclass(frozen=True, slots=True)
class Mirrored:
    """A 2026-07-28 server's tools as a client on HTTP must take them."""

    tools: list[dict[str, Any]]  # those whose x-mcp-header annotations keep the rules, in order
    specs: dict[str, tuple[ParamHeader, ...]]  # the annotations of those that have any, by tool name
    dropped: list[tuple[Any, str]]  # (name, why) of each tool left out


def mirror_tools(tools: Sequence[dict[str, Any]]) -> Mirrored:
    """Split a 2026-07-28 server's tools by their ``x-mcp-header`` annotations: a tool whose
    annotations break the rules is dropped (as a client on HTTP must); the annotations of the
    others are what its ``tools/call`` mirrors into ``Mcp-Param-*`` headers."""
    kept: list[dict[str, Any]] = []
    specs: dict[str, tuple[ParamHeader, ...]] = {}
    dropped: list[tuple[Any, str]] = []
    for tool in tools:
        schema = tool.get("inputSchema") if isinstance(tool, dict) else None
        problem = x_mcp_header_problem(schema)
        if problem is not None:
            dropped.append((tool.get("name"), problem))
            continue
        kept.append(tool)
        if mirrored := x_mcp_headers(schema):
            specs[str(tool.get("name"))] = mirrored
    return Mirrored(kept, specs, dropped)
