"""``manifold credentials revoke`` of a server in ``oauth`` mode: the kept tokens are revoked at
its authorization server (RFC 7009) with the OAuth client they were granted to.

That client is the configured ``client_id``, or the dynamically registered one the credential
store keeps (kind ``oauth-client``): each token set records the ``client_id`` it was granted to,
and an authorization server that checks client binding refuses a revocation from any other.
Nothing here registers a client: a client registered to revoke would be refused. The callback
URL plays no part (the CLI derives it from the file, which may not be what ``serve --port``
used).

:func:`revoke_kept` says what went wrong (a :class:`Revocation`) instead of raising: the CLI
forgets the tokens locally either way, and tells the user whether the authorization server
revoked them too.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from proxy.config.credentials import OAuthCredentials
from proxy.config.model import Config
from proxy.credentials.oauth_client import OAuthClientError, OAuthHttp, OAuthRefused, Registered
from proxy.credentials.store import SecretStore, StoreError
from proxy.credentials.token_modes import CLIENT_KIND, StoreTokens, oauth_http
from proxy.credentials.tokens import TokenSet

__all__ = ["Revocation", "RevokeTarget", "revoke_at_issuer", "revoke_kept"]

logger = logging.getLogger("proxy.credentials.revoke")


@dataclass(frozen=True, slots=True)
class RevokeTarget:
    """A server in ``oauth`` mode, as configured."""

    server_id: str
    url: str
    issuer: str | None = None
    client_id: str | None = None
    client_secret: str | None = None


class _NoClient(Exception):
    """The client the tokens were granted to cannot be found."""


@dataclass(frozen=True, slots=True)
class Revocation:
    """What the authorization server did: ``problem`` (not revoked: why, its error included) or
    a ``note`` on a partial success (a JWT access token it cannot revoke lives until it expires)."""

    problem: str | None = None
    note: str | None = None


async def revoke_kept(
    store: SecretStore, target: RevokeTarget, holder: tuple[str, str, str], *, http: OAuthHttp
) -> Revocation:
    """Revoke the identity's kept tokens for the server at its authorization server: the refresh
    token first (which ends the grant), then the access token."""
    try:
        tokens = await StoreTokens(store).get(holder, target.server_id)
    except StoreError as exc:
        return Revocation(f"the kept tokens cannot be read: {exc}")
    except ValueError:
        return Revocation("the kept tokens cannot be read (not a token set)")
    if tokens is None:
        return Revocation()
    note = None
    try:
        client = await _client_of(store, target, tokens)
        _, server = await http.discover(target.url, tokens.issuer or target.issuer, pkce=False)
        if tokens.refresh_token is not None:
            await http.revoke(server, client, tokens.refresh_token, "refresh_token")
        try:
            await http.revoke(server, client, tokens.access_token, "access_token")
        except OAuthRefused as exc:
            # RFC 7009 §2.2.1: the server does not revoke this type (self-contained JWT access
            # tokens, at many). Not a refusal of the grant: with the refresh token revoked, it
            # ends when the access token expires.
            if exc.error != "unsupported_token_type" or tokens.refresh_token is None:
                raise
            note = "the access token itself cannot be revoked there (a JWT); it stays valid until it expires"
    except (_NoClient, OAuthClientError, StoreError) as exc:
        logger.warning(
            "revoking the tokens for %s at its authorization server failed: %s", target.server_id, exc
        )
        return Revocation(str(exc))
    logger.info("revoked the tokens of an identity for %s at its authorization server", target.server_id)
    return Revocation(note=note)


async def _client_of(store: SecretStore, target: RevokeTarget, tokens: TokenSet) -> Registered:
    """The OAuth client ``tokens`` were granted to.

    Raises:
        _NoClient: not configured and not (or not unambiguously) in the store.
    """
    if target.client_id is not None and tokens.client_id in (None, target.client_id):
        return Registered(target.client_id, target.client_secret)
    found: list[Registered] = []
    for entry in await store.entries():
        if entry.kind != CLIENT_KIND or entry.server != target.server_id:
            continue
        if tokens.issuer is not None and entry.holder[1] != tokens.issuer:
            continue
        raw = await store.get(CLIENT_KIND, entry.server, entry.holder)
        try:
            data = json.loads(raw or "")
            client = Registered(str(data["client_id"]), data.get("client_secret"))
        except (ValueError, KeyError, TypeError):
            continue
        if tokens.client_id is None or client.client_id == tokens.client_id:
            found.append(client)
    unique = {client.client_id: client for client in found}
    if len(unique) == 1:
        return next(iter(unique.values()))
    if not unique:
        named = f" ({tokens.client_id})" if tokens.client_id else ""
        raise _NoClient(
            f"the OAuth client the tokens were granted to{named} is neither configured nor kept in "
            "the credential store; registering another one to revoke them would be refused"
        )
    raise _NoClient(
        f"{len(unique)} OAuth clients are kept for this server and the tokens do not say which one "
        "they were granted to (kept before Manifold recorded it)"
    )


async def revoke_at_issuer(
    config: Config, store: SecretStore, server_id: str, holder: tuple[str, str, str]
) -> Revocation:
    """``manifold credentials revoke`` of the ``oauth`` server ``server_id``: its kept tokens
    revoked at the authorization server (:func:`revoke_kept`), before the store forgets them."""
    server = config.servers[server_id]
    settings = server.credentials
    assert isinstance(settings, OAuthCredentials)
    assert server.url is not None
    secret = settings.client_secret.get_secret_value() if settings.client_secret is not None else None
    target = RevokeTarget(server_id, server.url, settings.issuer, settings.client_id, secret)
    return await revoke_kept(store, target, holder, http=oauth_http(config))
