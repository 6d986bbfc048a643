"""``credentials.mode: oauth`` and ``exchange`` as credential sources, and what they are built from.

* :class:`OAuthSource`: the identity's own access token at the server, from its sign-in
  (:mod:`proxy.credentials.on_behalf`), refreshed when due. Kept in the credential store under
  kind ``oauth`` (sealed, in the file or Redis: ``manifold credentials revoke`` forgets it, and
  every replica sees it); the pending sign-ins are kept in Redis when the store is, else in
  memory (a callback must then land on the replica that made the link).
* :class:`ExchangeSource`: the bearer token the current request presented to Manifold (an
  OAuth access token, ``identity.source == "oauth"``, issued by the exchange's own authorization
  server; any other is never sent there), exchanged (RFC 8693,
  :mod:`proxy.credentials.exchange`) for one whose audience is the server; the exchanged token
  is cached in memory per identity and inbound token, until the first of the two expires.

Either way the header is ``Authorization: Bearer <the server's own token>``; the caller's token
never leaves Manifold. A source with nothing for the identity raises
:class:`~proxy.core.errors.SignInNeeded`; the sign-in stage (:mod:`proxy.pipeline.stages.sign_in`) asks
the user before a tool call gets that far.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.config.credentials import ExchangeCredentials, OAuthCredentials
from proxy.config.model import Config, ServerConfig
from proxy.core.errors import ConfigError, ServerUnavailable, SignInNeeded
from proxy.core.redaction import remember_more
from proxy.credentials import Credentials, CredentialSource
from proxy.credentials.inbound import InboundTokens
from proxy.credentials.store import SecretStore, StoreError
from proxy.policy.model import Identity

if TYPE_CHECKING:  # loaded only when a server is in mode oauth or exchange (aiohttp, redis, AES-GCM)
    from proxy.auth.authenticator import Authenticator
    from proxy.credentials.exchange import Exchanger, ExchangeServer
    from proxy.credentials.oauth_client import OAuthHttp, Registered
    from proxy.credentials.on_behalf import OAuthServer, OnBehalf
    from proxy.credentials.tokens import TokenSet, Vault

__all__ = [
    "ExchangeSource",
    "OAuthSource",
    "StoreClients",
    "StoreTokens",
    "TokenModes",
    "oauth_http",
    "token_modes",
]

logger = logging.getLogger("proxy.credentials.token_modes")

OAUTH_KIND = "oauth"  # the credential store's kind for kept token sets
# Memory bounds (the soonest to expire go first past them): exchanged tokens cached (one per
# inbound token and server), and pending sign-ins when they are not in Redis.
EXCHANGED_AT_MOST = 10_000
PENDING_AT_MOST = 10_000
CLIENT_KIND = "oauth-client"  # ... and for Manifold's dynamically registered clients


class StoreTokens:
    """Token sets in the credential store (sealed there, bound to kind, server and identity)."""

    def __init__(self, store: SecretStore) -> None:
        self._store = store

    async def get(self, identity_key: Sequence[str], server_id: str) -> TokenSet | None:
        from proxy.credentials.tokens import TokenSet

        holder = _holder(identity_key)
        raw = await self._store.get(OAUTH_KIND, server_id, holder)
        return TokenSet.decode(raw.encode()) if raw is not None else None

    async def put(self, identity_key: Sequence[str], server_id: str, tokens: TokenSet) -> None:
        await self._store.put(OAUTH_KIND, server_id, _holder(identity_key), tokens.encode().decode())

    async def revoke(self, identity_key: Sequence[str], server_id: str) -> TokenSet | None:
        kept = await self.get(identity_key, server_id)
        await self._store.delete(OAUTH_KIND, server_id, _holder(identity_key))
        return kept


class StoreClients:
    """Dynamically registered clients in the credential store (kind ``oauth-client``, sealed
    there), so that replicas and restarts reuse one registration."""

    def __init__(self, store: SecretStore) -> None:
        self._store = store

    async def get(self, server_id: str, issuer: str, redirect_uri: str) -> Registered | None:
        from proxy.credentials.oauth_client import Registered

        raw = await self._store.get(CLIENT_KIND, server_id, ("manifold", issuer, redirect_uri))
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            return Registered(str(data["client_id"]), data.get("client_secret"))
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: registered anew

    async def put(self, server_id: str, issuer: str, redirect_uri: str, client: Registered) -> None:
        value = json.dumps({"client_id": client.client_id, "client_secret": client.client_secret})
        await self._store.put(CLIENT_KIND, server_id, ("manifold", issuer, redirect_uri), value)


def _holder(identity_key: Sequence[str]) -> tuple[str, str, str]:
    source, issuer, subject = identity_key
    return (source, issuer, subject)


def _bearer(server_id: str, token: str, label: str) -> Credentials:
    # Not remembered verbatim (short-lived, many: proxy.core.redaction): a log line shows it only in an
    # Authorization header, after "Bearer" or as a JWT, and those are redacted by pattern.
    return Credentials(headers={"Authorization": f"Bearer {token}"}, label=label)


class OAuthSource:
    def __init__(self, flow: OnBehalf) -> None:
        self._flow = flow

    async def credentials(self, identity: Identity, server_id: str) -> Credentials:
        """The identity's own token to the server.

        Raises:
            SignInNeeded: it has not signed in (or its token was revoked or stopped working).
            ServerUnavailable: the store or the authorization server cannot be reached now.
        """
        from proxy.credentials.oauth_client import OAuthClientError
        from proxy.credentials.on_behalf import CallbackRefused

        if not identity.authenticated:
            raise SignInNeeded(
                server_id, None, "each caller signs in to it as themself; authenticate to Manifold first"
            )
        try:
            token = await self._flow.access_token(identity, server_id)
        except OAuthClientError as exc:
            logger.warning("%s: %s", server_id, exc)
            raise ServerUnavailable(server_id, "its authorization server cannot be reached now") from None
        except StoreError as exc:
            logger.error("credential store: %s", exc)
            raise ServerUnavailable(server_id, "the credential store cannot be read now") from None
        except CallbackRefused as exc:  # a refresh granted a token for another audience
            logger.warning("%s: %s", server_id, exc)
            raise ServerUnavailable(
                server_id, "its authorization server granted a token for another server on refresh"
            ) from None
        if token is None:
            raise SignInNeeded(
                server_id,
                None,
                "you have not signed in to it yet: call one of its tools from a client that can open "
                "a sign-in link, and follow the link",
            )
        return _bearer(server_id, token, "oauth")


class ExchangeSource:
    def __init__(self, exchanger: Exchanger, inbound: InboundTokens) -> None:
        self._exchanger = exchanger
        self._inbound = inbound

    async def credentials(self, identity: Identity, server_id: str) -> Credentials:
        """A token for the server, exchanged for the caller's own token to Manifold.

        Raises:
            SignInNeeded: the caller did not present a bearer token (an API key has nothing to
                exchange), or the exchange was refused.
        """
        current = self._inbound.current(identity)
        issuer = self._exchanger.servers[server_id].issuer
        if current is not None and (
            identity.source != "oauth" or identity.issuer.rstrip("/") != issuer.rstrip("/")
        ):
            # Only an OAuth access token from the exchange's own authorization server goes there:
            # any other bearer (a JWT from another issuer) is not that server's to see.
            raise SignInNeeded(
                server_id,
                None,
                "it is reached with your own sign-in to Manifold, exchanged at its authorization "
                "server: sign in to Manifold with an access token from that server",
            )
        if current is None:
            raise SignInNeeded(
                server_id,
                None,
                "it is reached with your own sign-in to Manifold, exchanged: sign in with an OAuth "
                "access token (an API key cannot be exchanged)",
            )
        token, expires_at = current
        from proxy.credentials.oauth_client import OAuthClientError

        try:
            exchanged = await self._exchanger.access_token(identity, server_id, token, expires_at)
        except OAuthClientError as exc:
            logger.warning("token exchange for %s refused: %s", server_id, exc)
            raise SignInNeeded(
                server_id, None, "the authorization server refused to exchange your token for it"
            ) from None
        return _bearer(server_id, exchanged, "exchange")


@dataclass
class TokenModes:
    """What the ``oauth`` and ``exchange`` modes share across a gateway."""

    on_behalf: OnBehalf | None
    exchanger: Exchanger | None
    inbound: InboundTokens
    pending_vault: Vault | None = None

    def sources(self, config: Config) -> dict[str, CredentialSource]:
        found: dict[str, CredentialSource] = {}
        for server in config.enabled_servers():
            mode = server.credentials.mode
            if mode == "oauth" and self.on_behalf is not None:
                found[server.id] = OAuthSource(self.on_behalf)
            elif mode == "exchange" and self.exchanger is not None:
                found[server.id] = ExchangeSource(self.exchanger, self.inbound)
        return found

    def hook(self, auth: Authenticator) -> None:
        """Have ``auth`` report each request's bearer token, when some server exchanges it (else
        nothing reads it, and nothing holds it)."""
        if self.exchanger is not None:
            auth.on_bearer = self.inbound.keep

    async def aclose(self) -> None:
        if self.pending_vault is None:
            return
        from proxy.credentials.tokens import RedisVault

        if isinstance(self.pending_vault, RedisVault):
            await self.pending_vault.aclose()


def callback_url(config: Config) -> str:
    """Where the authorization servers send users back: ``credentials.callback_url``, else the
    listener's ``/oauth/callback``."""
    if config.credentials.callback_url is not None:
        return config.credentials.callback_url
    host = config.listen.host
    host = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host, host)
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{host}:{config.listen.port}/oauth/callback"


def _inbound_issuer(config: Config) -> str | None:
    oauth = config.auth.oauth
    if oauth is None or len(oauth.authorization_servers) != 1:
        return None
    return oauth.authorization_servers[0].issuer


def token_modes(config: Config, store: SecretStore | None) -> TokenModes:
    """The oauth and exchange modes' shared parts, for the servers configured with them.

    Raises:
        ConfigError: an ``oauth`` server without a writable store and its key, or an
            ``exchange`` server whose authorization server cannot be told.
    """
    oauth: dict[str, OAuthServer] = {}
    exchange: dict[str, ExchangeServer] = {}
    for server in config.enabled_servers():
        settings = server.credentials
        if isinstance(settings, OAuthCredentials):
            oauth[server.id] = _oauth_server(server, settings)
        elif isinstance(settings, ExchangeCredentials):
            exchange[server.id] = _exchange_server(config, server, settings)
    inbound = InboundTokens()
    modes = TokenModes(None, None, inbound)
    if not (exchange or oauth):
        return modes
    from proxy.credentials.exchange import Exchanger
    from proxy.credentials.on_behalf import OnBehalf
    from proxy.credentials.tokens import MemoryVault, Pending, RedisVault, Sealer, VaultTokens

    http = oauth_http(config)
    if exchange:
        # A cache only: its own random key, in memory (a restart exchanges anew).
        cache = MemoryVault(size=EXCHANGED_AT_MOST)
        modes.exchanger = Exchanger(exchange, VaultTokens(cache, Sealer(os.urandom(32))), http=http)
    if oauth:
        key = config.credentials.key_bytes()
        if store is None or key is None or config.credentials.store == "env":
            raise ConfigError(
                "credentials: servers in mode 'oauth' keep each user's tokens in the credential store: "
                "set credentials.store to file or redis, and credentials.key"
            )
        vault: Vault = MemoryVault(size=PENDING_AT_MOST)
        if config.credentials.store == "redis":
            from redis.asyncio import Redis

            url = config.credentials.redis_url or config.rate_limits.redis_url
            client = Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
            vault = RedisVault(client, key_prefix=config.credentials.key_prefix)
        modes.pending_vault = vault
        modes.on_behalf = OnBehalf(
            oauth,
            StoreTokens(store),
            Pending(vault, Sealer(key)),
            callback_url=callback_url(config),
            signin_ttl=config.credentials.signin_timeout,
            clients=StoreClients(store),
            http=http,
            cookie_key=hmac.new(key, b"manifold sign-in cookie", hashlib.sha256).digest(),
        )
    return modes


def _oauth_server(server: ServerConfig, settings: OAuthCredentials) -> OAuthServer:
    from proxy.credentials.on_behalf import OAuthServer

    assert server.url is not None
    secret = settings.client_secret.get_secret_value() if settings.client_secret is not None else None
    if secret is not None:
        remember_more([secret])
    return OAuthServer(
        server.id,
        server.url,
        issuer=settings.issuer,
        client_id=settings.client_id,
        client_secret=secret,
        scope=" ".join(settings.scopes) or None,
        same_subject=settings.same_subject,
    )


def _exchange_server(config: Config, server: ServerConfig, settings: ExchangeCredentials) -> ExchangeServer:
    from proxy.credentials.exchange import ExchangeServer

    issuer = settings.issuer or _inbound_issuer(config)
    audience = settings.audience or server.url
    if issuer is None or audience is None:
        raise ConfigError(
            f"servers.{server.id}.credentials: 'exchange' needs the authorization server that exchanges "
            "(issuer; the one of auth.oauth when there is exactly one) and the audience (audience; "
            "the server's url by default)"
        )
    secret = settings.client_secret.get_secret_value()
    remember_more([secret])
    return ExchangeServer(
        server.id, audience, issuer, settings.client_id, secret, " ".join(settings.scopes) or None
    )


def oauth_http(config: Config) -> OAuthHttp:
    """The HTTP client of the oauth and exchange modes; plain http off loopback only when the
    operator opted out (a test rig), said loudly."""
    from proxy.credentials.oauth_client import OAuthHttp

    plain = config.credentials.allow_insecure_http
    if plain:
        logger.warning(
            "credentials.allow_insecure_http is true: authorization servers off loopback may be "
            "reached over plain http, so codes, client secrets and tokens can be read on the way; "
            "for test rigs only"
        )
    return OAuthHttp(plain_http=plain)
