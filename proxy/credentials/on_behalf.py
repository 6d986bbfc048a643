"""The ``oauth`` credentials mode: each user signs in to a server's authorization server once,
and Manifold calls the server with that user's own access token.

Per (identity key, server): the token set is kept sealed (:class:`~proxy.credentials.tokens.TokenStore`),
refreshed with its refresh token when it is within 30 s of expiry, and forgotten (and revoked at
its issuer) on ``manifold credentials revoke``. With none, :meth:`OnBehalf.begin` makes a
sign-in: a fresh ``state`` (256 bits) and PKCE verifier, kept sealed under a digest of the state
for ``signin_ttl`` seconds and taken once by the callback (:meth:`OnBehalf.complete`), which
checks what RFC 9207 and the phishing section of the elicitation spec ask:

* the ``state`` is one Manifold issued, unused, not expired; the code is exchanged with *that*
  sign-in's verifier, so a code obtained for another sign-in (another identity's) is refused by
  the authorization server;
* the ``iss`` of the callback is the authorization server the sign-in went to (a mix-up attack
  otherwise), required when the server says it sends one;
* the token granted is for this server: a JWT whose ``aud`` does not name the server's resource
  is refused and not kept;
* the browser that lands on the callback is the one the user who asked used to start the
  sign-in: the link in the elicitation is Manifold's own start page (:meth:`OnBehalf.start`),
  where the user presents their Manifold credential; it must be the identity the sign-in is
  for, and only then does that browser get a cookie bound to the ``state`` (an HMAC of it) and go
  on to the authorization server. The callback requires that cookie: a link Mallory sends to
  Alice cannot bind Alice's account at the server to Mallory's identity, even when Alice's
  authorization server redirects at once (consent given before);
* when the caller signed in to Manifold at the same authorization server (``same_subject``), the
  ID token's ``sub`` must be the caller's: a link forwarded to somebody else cannot bind their
  account to the caller.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import urlencode

import anyio
from cachetools import TTLCache

from proxy.core.errors import ManifoldError
from proxy.credentials.oauth_client import (
    AuthServer,
    OAuthClientError,
    OAuthHttp,
    OAuthRefused,
    Registered,
    authorize_url,
    pkce_pair,
    subject_of_id_token,
    token_audiences,
)
from proxy.credentials.tokens import Pending, TokenSet, TokenStore
from proxy.policy.model import Identity

__all__ = ["CallbackRefused", "Clients", "OAuthServer", "OnBehalf", "SignIn"]

logger = logging.getLogger("proxy.credentials.on_behalf")

_REFRESH_MARGIN: Final = 30.0
_POLL: Final = 0.25
_LOCKS_AT_MOST: Final = 10_000  # refresh locks, and sign-ins waited on, kept at once
_FAILED_AT_MOST: Final = 10_000  # how often a waiter looks for a sign-in completed on another replica


class CallbackRefused(ManifoldError):
    """A callback that does not complete a sign-in Manifold started (the page says why)."""


@dataclass(frozen=True, slots=True)
class OAuthServer:
    """One server in ``oauth`` mode."""

    server_id: str
    url: str  # the server's MCP endpoint
    issuer: str | None = None  # its authorization server; None: discovered from the server's 401
    client_id: str | None = None  # None: dynamic registration
    client_secret: str | None = None
    scope: str | None = None
    same_subject: bool | None = None  # None: when the caller's issuer is this server's


@dataclass(frozen=True, slots=True)
class SignIn:
    url: str  # Manifold's start page for this sign-in (the link the user is given)
    state: str
    expires_at: float
    authorize: str = ""  # the authorization server's authorize URL, where the start page sends on


@dataclass(frozen=True, slots=True)
class _Pending:
    identity_key: tuple[str, ...]
    source: str
    issuer: str
    subject: str
    server_id: str
    verifier: str
    expires_at: float
    authorize: str = ""


class Clients(Protocol):
    """Manifold's dynamically registered clients, kept (sealed) where every replica and the next
    start find them: one registration per authorization server and callback, not one per
    process."""

    async def get(self, server_id: str, issuer: str, redirect_uri: str) -> Registered | None: ...

    async def put(self, server_id: str, issuer: str, redirect_uri: str, client: Registered) -> None: ...


@dataclass(slots=True)
class _Known:
    resource: str
    server: AuthServer
    client: Registered


class OnBehalf:
    def __init__(
        self,
        servers: Mapping[str, OAuthServer],
        store: TokenStore,
        pending: Pending,
        *,
        callback_url: str,
        http: OAuthHttp | None = None,
        signin_ttl: float = 600.0,
        cookie_key: bytes | None = None,
        clients: Clients | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.servers = dict(servers)
        self.store = store
        self._pending = pending
        self.callback_url = callback_url
        # The start page sits beside the callback (behind the same prefix, if any).
        self.start_url = callback_url.rsplit("/", 1)[0] + "/start"
        # Binds the browser cookie to the state: the same on every replica that shares the key.
        self._cookie_key = cookie_key if cookie_key is not None else os.urandom(32)
        self._http = http or OAuthHttp()
        self._ttl = self.signin_ttl = signin_ttl
        self._clock = clock
        self._clients = clients
        self._known: dict[str, _Known] = {}
        # Bounded, with a time to live: one entry per identity and server touched, never kept for
        # ever. A lock dropped while held costs at most a second refresh (it is safe:
        # access_token); an event dropped, a waiter's shortcut (it finds the token by polling).
        self._locks: TTLCache[str, anyio.Lock] = TTLCache(maxsize=_LOCKS_AT_MOST, ttl=600.0)
        self._done: TTLCache[tuple[tuple[str, ...], str], anyio.Event] = TTLCache(
            maxsize=_LOCKS_AT_MOST, ttl=max(1.0, signin_ttl)
        )
        # States whose callback was refused, and why, until the waiting call reads it (refusal).
        self._failed: dict[str, str] = {}

    def _lock(self, name: str) -> anyio.Lock:
        return self._locks.setdefault(name, anyio.Lock())

    async def known(self, server_id: str) -> _Known:
        """The server's resource, authorization server and Manifold's client there (found once).

        Raises:
            OAuthClientError: discovery or registration failed.
        """
        async with self._lock("discover:" + server_id):
            known = self._known.get(server_id)
            if known is None:
                settings = self.servers[server_id]
                resource, server = await self._http.discover(settings.url, settings.issuer)
                if settings.client_id is not None:
                    client = Registered(settings.client_id, settings.client_secret)
                else:
                    client = await self._registered(server_id, server, settings)
                known = self._known[server_id] = _Known(resource, server, client)
            return known

    async def _registered(self, server_id: str, server: AuthServer, settings: OAuthServer) -> Registered:
        """Manifold's client at ``server``: the one registered before (by any replica), else a new
        registration, kept."""
        if self._clients is not None:
            kept = await self._clients.get(server_id, server.issuer, self.callback_url)
            if kept is not None:
                return kept
        client = await self._http.register(server, self.callback_url, self._scope(settings, None))
        if self._clients is not None:
            await self._clients.put(server_id, server.issuer, self.callback_url, client)
        return client

    def _same_subject(self, settings: OAuthServer, identity_issuer: str, server: AuthServer) -> bool:
        if settings.same_subject is not None:
            return settings.same_subject
        return identity_issuer == server.issuer

    def _scope(self, settings: OAuthServer, same_subject: bool | None) -> str | None:
        words = (settings.scope or "").split()
        if same_subject and "openid" not in words:
            words.insert(0, "openid")
        return " ".join(words) or None

    # ---- a call's token ---------------------------------------------------------------------

    async def access_token(self, identity: Identity, server_id: str) -> str | None:
        """The identity's access token for the server, refreshed if due; None: sign in first.

        A refresh the authorization server cannot answer now (unreachable, a server error) keeps
        the tokens; only ``invalid_grant`` forgets them, and only when the refresh token kept is
        still the one refused (another replica may have just refreshed, rotating it).

        Raises:
            OAuthClientError: the authorization server cannot be reached, or refused otherwise.
            CallbackRefused: the refresh granted a token for another audience.
        """
        key = identity.key
        tokens = await self.store.get(key, server_id)
        if tokens is None:
            return None
        if not tokens.expired(self._clock(), margin=_REFRESH_MARGIN):
            return tokens.access_token
        async with self._lock(f"refresh:{server_id}:{json.dumps(list(key))}"):
            tokens = await self.store.get(key, server_id)  # another call may have refreshed it
            if tokens is None:
                return None
            if not tokens.expired(self._clock(), margin=_REFRESH_MARGIN):
                return tokens.access_token
            if tokens.refresh_token is None:
                await self.store.revoke(key, server_id)
                return None
            known = await self.known(server_id)
            form = {
                "grant_type": "refresh_token",
                "refresh_token": tokens.refresh_token,
                "resource": known.resource,
            }
            try:
                fresh, _ = await self._http.token(known.server, known.client, form, self._clock())
            except OAuthRefused as exc:
                if exc.error != "invalid_grant":
                    raise
                # The grant ended (revoked, expired): the user signs in again, unless another
                # replica refreshed meanwhile (then its tokens are the ones to use).
                logger.info("refreshing a token for %s was refused: %s", server_id, exc)
                now_kept = await self.store.get(key, server_id)
                if now_kept is not None and now_kept.refresh_token != tokens.refresh_token:
                    return None if now_kept.expired(self._clock()) else now_kept.access_token
                if now_kept is not None:
                    await self.store.revoke(key, server_id)
                return None
            self._check_audience(fresh, known)
            fresh = dataclasses.replace(fresh, client_id=known.client.client_id)
            if fresh.refresh_token is None:  # RFC 6749 §6: the old one stays valid
                fresh = dataclasses.replace(fresh, refresh_token=tokens.refresh_token)
            await self.store.put(key, server_id, fresh)
            logger.info("refreshed the token of an identity for %s", server_id)
            return fresh.access_token

    def _check_audience(self, tokens: TokenSet, known: _Known) -> None:
        audiences = token_audiences(tokens.access_token)
        if audiences is not None and known.resource not in audiences:
            raise CallbackRefused(
                f"the authorization server granted a token for {sorted(audiences)}, not for {known.resource}"
            )

    # ---- signing in ---------------------------------------------------------------------------

    async def begin(self, identity: Identity, server_id: str) -> SignIn:
        """A new sign-in for the identity at the server: the URL to open, bound to both.

        Raises:
            OAuthClientError: the server's authorization server cannot be found or used.
        """
        known = await self.known(server_id)
        settings = self.servers[server_id]
        same = self._same_subject(settings, identity.issuer, known.server)
        state = secrets.token_urlsafe(32)
        verifier, challenge = pkce_pair()
        expires = self._clock() + self._ttl
        authorize = authorize_url(
            known.server,
            known.client,
            redirect_uri=self.callback_url,
            state=state,
            challenge=challenge,
            resource=known.resource,
            scope=self._scope(settings, same),
        )
        pending = _Pending(
            identity.key,
            identity.source,
            identity.issuer,
            identity.subject,
            server_id,
            verifier,
            expires,
            authorize,
        )
        await self._pending.put(state, json.dumps(dataclasses.asdict(pending)).encode(), self._ttl)
        return SignIn(f"{self.start_url}?{urlencode({'state': state})}", state, expires, authorize)

    def cookie(self, state: str) -> tuple[str, str]:
        """The name and value of the cookie that binds a browser to sign-in ``state``."""
        digest = hashlib.sha256(state.encode()).hexdigest()[:16]
        value = hmac.new(self._cookie_key, b"sign-in:" + state.encode(), hashlib.sha256).hexdigest()
        return f"manifold_signin_{digest}", value

    async def start(self, state: str, identity: Identity) -> str:
        """The start page: the authorize URL of sign-in ``state``, when ``identity`` (who opened
        the link, authenticated) is the one it was made for.

        Raises:
            CallbackRefused: unknown, used or expired state, or made for another identity (the
                same answer: a link for somebody else is as good as none).
        """
        plain = await self._pending.get(state) if state else None
        pending = _decode(plain) if plain is not None else None
        if pending is None or pending.identity_key != identity.key or self._clock() > pending.expires_at:
            raise CallbackRefused(
                "this sign-in link is unknown, expired, or for another user: start again from your client"
            )
        return pending.authorize

    async def complete(
        self, query: Mapping[str, str], cookies: Mapping[str, str]
    ) -> tuple[tuple[str, ...], str]:
        """The callback: the sign-in its ``state`` names, completed; (identity key, server id).

        Raises:
            CallbackRefused: unknown, used or expired state; an error from the authorization
                server; a wrong ``iss``; a refused code; a token for another audience or subject.
            OAuthClientError: the authorization server cannot be reached.
            StoreError, RedisError, ValueError: the tokens or the sign-in cannot be kept or read.
        """
        state = query.get("state", "")
        if state:
            name, value = self.cookie(state)
            if not hmac.compare_digest(cookies.get(name, "").encode(), value.encode()):
                # Not taken: a browser that did not start this sign-in cannot spend it either.
                raise CallbackRefused(
                    "this browser did not start this sign-in: open the link from your client, in "
                    "the browser you sign in with"
                )
        plain = await self._pending.take(state) if state else None  # single use, whatever follows
        if plain is None:
            raise CallbackRefused(
                "this sign-in link is unknown, already used or expired: start again from your client"
            )
        try:
            pending = _decode(plain)
        except (ValueError, TypeError, KeyError):
            raise CallbackRefused("this sign-in could not be read: start again from your client") from None
        # Whatever happens (refused, unreachable, the store failing), the call waiting for it
        # stops waiting at once, and can tell its user why.
        try:
            await self._exchange_code(pending, query)
        except CallbackRefused as exc:
            self._finish(pending, state, failed=str(exc))
            raise
        except OAuthClientError:
            self._finish(pending, state, failed="the authorization server could not be reached to finish it")
            raise
        except BaseException:
            self._finish(pending, state, failed="Manifold could not finish it (its log says why)")
            raise
        self._finish(pending, state, failed=None)
        logger.info("an identity signed in for %s", pending.server_id)
        return pending.identity_key, pending.server_id

    async def _exchange_code(self, pending: _Pending, query: Mapping[str, str]) -> None:
        if self._clock() > pending.expires_at:
            raise CallbackRefused("this sign-in link has expired: start again from your client")
        known = await self.known(pending.server_id)
        iss = query.get("iss")
        if (iss is not None or known.server.iss_parameter_supported) and iss != known.server.issuer:
            raise CallbackRefused(
                "the answer comes from another authorization server than the one asked (iss)"
            )
        if "error" in query:
            raise CallbackRefused(
                f"the authorization server answered {query['error']!r}: {query.get('error_description', '')}"
            )
        code = query.get("code")
        if not code:
            raise CallbackRefused("the answer carries no authorization code")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.callback_url,
            "code_verifier": pending.verifier,
            "resource": known.resource,
        }
        try:
            tokens, answer = await self._http.token(known.server, known.client, form, self._clock())
        except OAuthClientError as exc:
            raise CallbackRefused(f"the authorization code was refused: {exc}") from None
        self._check_audience(tokens, known)
        tokens = dataclasses.replace(tokens, client_id=known.client.client_id)  # to revoke with
        if self._same_subject(self.servers[pending.server_id], pending.issuer, known.server):
            id_token = answer.get("id_token")
            signed_in_as = subject_of_id_token(id_token) if isinstance(id_token, str) else None
            if signed_in_as != pending.subject:
                raise CallbackRefused(
                    "you signed in as somebody else than the user who asked: the link is for that user alone"
                )
        await self.store.put(pending.identity_key, pending.server_id, tokens)

    def _finish(self, pending: _Pending, state: str, *, failed: str | None) -> None:
        if failed is not None:
            if len(self._failed) >= _FAILED_AT_MOST:
                self._failed.clear()  # only a waiter's shortcut: it would time out instead
            self._failed[state] = failed
        self._done.pop((pending.identity_key, pending.server_id), anyio.Event()).set()

    def refusal(self, state: str) -> str | None:
        """Why the callback of sign-in ``state`` was refused here (once), or None: it was not,
        or not on this replica, or nobody knows yet."""
        return self._failed.pop(state, None)

    async def wait(
        self, identity: Identity, server_id: str, timeout: float, state: str | None = None
    ) -> bool:
        """Wait (at most ``timeout`` s) until the identity has a token for the server: a sign-in
        completed here, or on another replica (looked for every 250 ms). False at once when the
        callback of sign-in ``state`` was refused here."""
        key = (identity.key, server_id)
        with anyio.move_on_after(timeout):
            while await self.store.get(identity.key, server_id) is None:
                if state is not None and state in self._failed:
                    return False  # the reason stays for refusal()
                event = self._done.setdefault(key, anyio.Event())
                with anyio.move_on_after(_POLL):
                    await event.wait()
            return True
        return False

    async def revoke(self, identity_key: tuple[str, ...], server_id: str) -> bool:
        """Forget the identity's tokens for the server, and revoke them at the issuer (best
        effort); whether there were any."""
        tokens = await self.store.revoke(identity_key, server_id)
        if tokens is None:
            return False
        await self.revoke_at_issuer(server_id, tokens)
        return True

    async def revoke_at_issuer(self, server_id: str, tokens: TokenSet) -> None:
        """RFC 7009 at the server's authorization server: the refresh token (which ends the grant
        at most providers), then the access token, with the client they were granted to when it
        is the one in use (else nothing: another client's revocation would be refused, and the
        CLI's ``manifold credentials revoke`` finds the right one in the store). Best effort: a
        failure is logged."""
        try:
            known = await self.known(server_id)
            if tokens.client_id is not None and tokens.client_id != known.client.client_id:
                logger.warning(
                    "the tokens for %s were granted to another OAuth client than the one in use: "
                    "not revoked at the authorization server (manifold credentials revoke does)",
                    server_id,
                )
                return
            if tokens.refresh_token is not None:
                await self._http.revoke(known.server, known.client, tokens.refresh_token, "refresh_token")
            await self._http.revoke(known.server, known.client, tokens.access_token, "access_token")
        except OAuthClientError as exc:
            logger.warning(
                "revoking at %s's authorization server failed (forgotten here): %s", server_id, exc
            )


def _decode(plain: bytes) -> _Pending:
    data: Any = json.loads(plain)
    return _Pending(**{**data, "identity_key": tuple(data["identity_key"])})
