"""The ``exchange`` credentials mode: the caller's own access token, exchanged (RFC 8693) at the
authorization server for one whose audience is the server; the caller's token itself never
leaves Manifold.

The inbound token is the one the caller presented on this request (:mod:`proxy.credentials.inbound`).
The exchanged token is kept per (identity key, server) in the token store until it expires, or
until the inbound token it came from does, whichever is first: a caller whose sign-in to
Manifold has ended does not keep acting at the server through a cached token. A token granted
for another audience (a JWT whose ``aud`` does not name the server) is refused and not kept.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import anyio

from proxy.credentials.oauth_client import (
    AuthServer,
    OAuthClientError,
    OAuthHttp,
    Registered,
    token_audiences,
)
from proxy.credentials.tokens import TokenSet, TokenStore
from proxy.policy.model import Identity

__all__ = ["ExchangeServer", "Exchanger", "TOKEN_TYPE_ACCESS"]

logger = logging.getLogger("proxy.credentials.exchange")

TOKEN_TYPE_ACCESS: Final = "urn:ietf:params:oauth:token-type:access_token"
_GRANT: Final = "urn:ietf:params:oauth:grant-type:token-exchange"


@dataclass(frozen=True, slots=True)
class ExchangeServer:
    """One server in ``exchange`` mode."""

    server_id: str
    audience: str  # the server's resource URI (sent as ``resource`` and ``audience``)
    issuer: str  # the authorization server that exchanges
    client_id: str
    client_secret: str
    scope: str | None = None


class Exchanger:
    def __init__(
        self,
        servers: Mapping[str, ExchangeServer],
        store: TokenStore,
        *,
        http: OAuthHttp | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.servers = dict(servers)
        self.store = store
        self._http = http or OAuthHttp()
        self._clock = clock
        self._metadata: dict[str, AuthServer] = {}
        self._locks: dict[str, anyio.Lock] = {}

    async def _server(self, issuer: str) -> AuthServer:
        async with self._locks.setdefault("issuer:" + issuer, anyio.Lock()):
            if issuer not in self._metadata:
                _, self._metadata[issuer] = await self._http.discover("", issuer, pkce=False)  # no code flow
            return self._metadata[issuer]

    async def access_token(
        self, identity: Identity, server_id: str, inbound: str, inbound_expires_at: float | None
    ) -> str:
        """A token for the server on behalf of the caller of ``inbound`` (cached until expiry).

        Raises:
            OAuthClientError: the exchange was refused, or granted a token for another audience.
        """
        settings = self.servers[server_id]
        # Cached per identity *and* inbound token: a new sign-in to Manifold exchanges anew.
        slot_id = f"{server_id}:x:{hashlib.sha256(inbound.encode()).hexdigest()[:16]}"
        now = self._clock()
        cached = await self.store.get(identity.key, slot_id)
        if cached is not None and not cached.expired(now, margin=10.0):
            return cached.access_token
        server = await self._server(settings.issuer)
        form = {
            "grant_type": _GRANT,
            "subject_token": inbound,
            "subject_token_type": TOKEN_TYPE_ACCESS,
            "requested_token_type": TOKEN_TYPE_ACCESS,
            "resource": settings.audience,
            "audience": settings.audience,
        }
        if settings.scope:
            form["scope"] = settings.scope
        tokens, _ = await self._http.token(
            server, Registered(settings.client_id, settings.client_secret), form, now
        )
        audiences = token_audiences(tokens.access_token)
        if audiences is not None and settings.audience not in audiences:
            raise OAuthClientError(
                f"the token exchange granted a token for {sorted(audiences)}, not for {settings.audience}"
            )
        expires = tokens.expires_at
        if inbound_expires_at is not None:
            expires = inbound_expires_at if expires is None else min(expires, inbound_expires_at)
        kept = TokenSet(tokens.access_token, expires, None, tokens.scope, server.issuer)
        await self.store.put(identity.key, slot_id, kept)
        logger.info("exchanged an identity's token for %s", server_id)
        return kept.access_token
