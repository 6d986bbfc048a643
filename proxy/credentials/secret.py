"""``credentials.mode: secret``: each identity's own secret, from the credential store.

Looked up on every request that goes to the server (one ``stat`` for the file store, one GET for
Redis), so a revoked or replaced secret takes effect on the identity's next call: its running
connection, built with the old one, is stopped and the next starts with the new
(:mod:`proxy.servers.per_client`). The secret goes into a header (HTTP servers, the configured template)
or into the environment of the identity's own process (stdio servers), and is told to the
redaction of logs as it is loaded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from proxy.config.credentials import SecretCredentials
from proxy.config.model import ServerConfig
from proxy.core.errors import ServerUnavailable, SignInNeeded
from proxy.core.redaction import remember_more
from proxy.credentials import Credentials
from proxy.credentials.sealing import Unsealable
from proxy.credentials.store import SecretStore, StoreError
from proxy.policy.model import Identity

__all__ = ["KIND", "SecretSource"]

logger = logging.getLogger("proxy.credentials.secret")

KIND = "secret"  # the store's kind for these entries


class SecretSource:
    def __init__(self, servers: Mapping[str, ServerConfig], store: SecretStore) -> None:
        self._servers = servers
        self._store = store

    async def credentials(self, identity: Identity, server_id: str) -> Credentials:
        """``identity``'s secret to ``server_id``, as the server takes it.

        Raises:
            SignInNeeded: none is stored for it (or the caller is anonymous).
            ServerUnavailable: the store cannot be read, or the entry does not open with the key.
        """
        server = self._servers[server_id]
        settings = server.credentials
        assert isinstance(settings, SecretCredentials)
        if not identity.authenticated:
            raise SignInNeeded(
                server_id,
                None,
                "each caller reaches it with a secret of their own; authenticate to Manifold first",
            )
        try:
            secret = await self._store.get(KIND, server_id, identity.key)
        except Unsealable:
            logger.error(
                "the stored secret of %s to %s does not open with credentials.key (another key, or altered)",
                identity.name,
                server_id,
            )
            raise ServerUnavailable(
                server_id, "your stored secret cannot be read by Manifold; ask an operator to set it again"
            ) from None
        except StoreError as exc:
            logger.error("credential store: %s", exc)
            raise ServerUnavailable(server_id, "the credential store cannot be read now") from None
        if secret is None:
            source, issuer, subject = identity.key
            issued = f" --issuer {issuer}" if issuer else ""
            raise SignInNeeded(
                server_id,
                None,
                f"no secret of yours ({identity.name}) is stored for it; ask an operator to run "
                f"`manifold credentials set --server {server_id} --identity {subject} "
                f"--source {source}{issued} --secret-stdin`",
            )
        if server.kind == "stdio":
            assert settings.env is not None
            remember_more([secret])
            return Credentials(env={settings.env: secret}, label=KIND)
        value = settings.render(secret)
        remember_more([secret, value])
        return Credentials(headers={settings.header: value}, label=KIND)
