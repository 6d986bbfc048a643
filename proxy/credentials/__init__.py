"""Credentials to servers: whose credentials a request to a server carries.

A server's ``credentials.mode`` (:mod:`proxy.config.credentials`) decides:

- ``shared``: the configured ``headers``/``env``, for everybody (no source is asked);
- ``secret``: the identity's own secret from the credential store (:mod:`proxy.credentials.secret`);
- ``oauth`` / ``exchange``: a token Manifold gets for the identity (their own modules).

Each non-shared mode is a :class:`CredentialSource`. Its :class:`Credentials` are what the
identity's own connection to the server is built with (:mod:`proxy.servers.per_client`): headers merged
over the configured ones for an HTTP server, environment merged over the configured one for a
stdio server's process. A source that has nothing for the identity raises
:class:`~proxy.core.errors.SignInNeeded`, which the boundary turns into an error naming the server
and what the user must do. The caller's own inbound token is never among them.

May import: auth, config, core, policy (pinned in tests/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from proxy.core.errors import SignInNeeded
from proxy.policy.model import Identity

__all__ = ["CredentialSource", "Credentials", "SignInNeeded", "Sources"]


@dataclass(frozen=True, slots=True)
class Credentials:
    """What one identity's connection to one server is built with. ``label`` names the mode
    (for audit lines and logs); the values are secrets and never printed."""

    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    label: str = "shared"


class CredentialSource(Protocol):
    """Where one mode's credentials come from."""

    async def credentials(self, identity: Identity, server_id: str) -> Credentials:
        """``identity``'s credentials to ``server_id``.

        Raises:
            SignInNeeded: ``identity`` has none (yet): the message says what to do.
            ServerUnavailable: the store cannot be read now.
        """
        ...


class Sources:
    """The source of each server whose mode is not ``shared``, by server id."""

    def __init__(self, by_server: Mapping[str, CredentialSource]) -> None:
        self._by_server = dict(by_server)

    def __contains__(self, server_id: str) -> bool:
        return server_id in self._by_server

    async def credentials(self, identity: Identity, server_id: str) -> Credentials:
        """``identity``'s credentials to ``server_id`` (see :class:`CredentialSource`);
        empty ones for a shared server."""
        source = self._by_server.get(server_id)
        if source is None:
            return Credentials()
        return await source.credentials(identity, server_id)
