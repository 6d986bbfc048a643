"""Manifold as an OAuth 2.1 resource server: which access tokens prove whom (MCP authorization).

A JWT access token whose ``iss`` is a configured authorization server is checked here (RFC 9068):
its ``typ`` (``at+jwt``, unless the server is configured not to require it), a signature by a
key of the server's discovered JWKS, ``iss``, ``aud`` (this resource: a token minted for another
resource is refused, so a token cannot be replayed from one service to another), ``exp``. An
opaque token is asked about at each configured introspection endpoint in turn (RFC 7662), and
must be active and, when the answer names an audience, meant for this resource.

The identity is ``(source "oauth", issuer, subject)``; its name is the ``name_claim`` (``sub``
by default), its roles those ``scope_roles`` maps its granted scopes to, and those in
``roles_claim``. A granted scope is a role of the same name only with ``scopes_as_roles: true``:
an authorization server that grants any scope a registered client asks for would otherwise hand
out every role the policy knows. The token itself goes no further than this module: Manifold never passes a
client's token on to a server.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.abc
import jwt

from proxy.auth.budget import Budget, Spent
from proxy.auth.discovery import DiscoveredKeys
from proxy.auth.introspection import (
    IntrospectionError,
    IntrospectionThrottled,
    Introspector,
    Post,
    post_form,
)
from proxy.auth.jwks import Fetch, fetch_url
from proxy.auth.jwt import MESSAGES, TokenRejected, claim, signing_key
from proxy.auth.tls import client_context
from proxy.config.oauth import AuthorizationServer, OAuthSettings
from proxy.policy.model import Identity

__all__ = ["OAuthVerifier", "SignedIn", "granted_scopes"]

logger = logging.getLogger("proxy.auth.oauth")

_JWT_TYPES: Final = frozenset({"at+jwt", "application/at+jwt"})  # RFC 9068 §4, case-insensitive


_UNDATED_SECONDS: Final = 300.0  # how long an introspected token without exp is taken as signed in


def _refused(outcome: str, message: str) -> TokenRejected:
    return TokenRejected("expired" if outcome == "expired" else "invalid", message, outcome)


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A valid access token: who it speaks for, what it grants, until when (seconds since the epoch)."""

    identity: Identity
    scopes: frozenset[str]
    expires_at: float


def granted_scopes(claims: dict[str, Any]) -> frozenset[str]:
    """The scopes a token grants: ``scope`` (a space-separated string, RFC 9068 / RFC 7662), or
    ``scp`` (a list or string, as Entra ID and Okta write it)."""
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            return frozenset(value.split())
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return frozenset(value)
    return frozenset()


@dataclass(frozen=True, slots=True)
class _Server:
    settings: AuthorizationServer
    keys: DiscoveredKeys
    introspector: Introspector | None


class OAuthVerifier:
    """Checks access tokens issued for this resource by the configured authorization servers."""

    def __init__(
        self,
        settings: OAuthSettings,
        *,
        fetch: Fetch | None = None,
        post: Post | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._servers: dict[str, _Server] = {}
        tls = client_context(settings.ca_file)
        if fetch is None and tls is not None:
            fetch = functools.partial(fetch_url, timeout=10.0, ssl=tls)
        if post is None and tls is not None:
            post = functools.partial(post_form, ssl=tls)
        budget = Budget(
            per_client=settings.introspections_per_client,
            total=settings.introspections_per_second,
            clock=time.monotonic,
        )
        for server in settings.authorization_servers:
            introspector = None
            if server.introspection is not None:
                introspector = Introspector(
                    server.introspection.client_id,
                    server.introspection.client_secret.get_secret_value(),
                    cache_seconds=settings.introspection_cache,
                    post=post,
                    budget=budget,
                    clock=clock,
                )
            keys = DiscoveredKeys(server.issuer, metadata_url=server.metadata_url, fetch=fetch)
            self._servers[server.issuer] = _Server(server, keys, introspector)
        self.introspects = any(s.introspector is not None for s in self._servers.values())

    def issues(self, iss: Any) -> bool:
        """Whether a token claiming ``iss`` is ours to check."""
        return isinstance(iss, str) and iss in self._servers

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Report readiness at once; discover every server and keep its keys fresh, in the
        background, until cancelled. A hanging authorization server delays nothing: its tokens
        get 503 with Retry-After until it answers."""
        async with anyio.create_task_group() as tg:
            for server in self._servers.values():
                tg.start_soon(server.keys.run)
            task_status.started()

    async def verify_jwt(self, token: str, iss: str) -> SignedIn:
        """Check a JWT access token from the server ``iss`` (see :meth:`issues`).

        Raises:
            TokenRejected: anything wrong with it; ``outcome`` says what, for the metrics.
        """
        server = self._servers[iss]
        settings = server.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _refused("malformed", "the token is malformed") from None
        typ = header.get("typ")
        if settings.require_jwt_type and not (isinstance(typ, str) and typ.lower() in _JWT_TYPES):
            raise _refused(
                "wrong_type", "the token is not a JWT access token (its typ is not at+jwt, RFC 9068)"
            )
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in settings.algorithms:
            raise _refused("bad_signature", "the token's algorithm is not accepted for its issuer")
        try:
            key = await signing_key(server.keys, algorithm, header.get("kid"))
        except TokenRejected as exc:
            if (why := server.keys.unreachable) is not None:
                # No metadata, or the key set did not answer: the token cannot be judged, and a
                # client told invalid_token would sign in again during the provider's outage.
                logger.info("a token from %s cannot be checked now: %s", iss, why)
                raise _refused(
                    "unavailable", "the token's authorization server cannot be reached to check it"
                ) from None
            raise TokenRejected(exc.reason, exc.message, "bad_signature") from None
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=settings.audience or self.settings.resource,
                issuer=settings.issuer,
                leeway=settings.leeway,
                options={"require": ["exp", "iss", "aud", "sub"], "enforce_minimum_key_length": True},
            )
        except jwt.ExpiredSignatureError:
            raise _refused("expired", "the token has expired") from None
        except jwt.MissingRequiredClaimError as exc:
            raise _refused("malformed", f"the token lacks the required {exc.claim!r} claim") from None
        except jwt.InvalidAudienceError:
            raise _refused(
                "wrong_audience", f"the token was not issued for this resource ({self.settings.resource})"
            ) from None
        except jwt.PyJWTError as exc:
            message = next((m for kind, m in MESSAGES if isinstance(exc, kind)), "the token is malformed")
            outcome = "bad_signature" if isinstance(exc, jwt.InvalidSignatureError) else "invalid"
            raise TokenRejected("invalid", message, outcome) from None
        return self._signed_in(payload, iss, float(payload["exp"]))

    async def verify_opaque(self, token: str, key: bytes, client: str | None = None) -> SignedIn:
        """Ask the introspection endpoints about an opaque token (``key``: its digest; ``client``:
        the caller's address, for the introspection budget).

        Raises:
            TokenRejected: inactive everywhere (revoked, expired, unknown), for another resource,
                the client's share of introspections spent (``throttled``), or no endpoint could
                answer, everyone's share included (``unavailable``).
        """
        unreachable: list[str] = []
        for server in self._servers.values():
            if server.introspector is None or server.settings.introspection is None:
                continue
            endpoint = await self._endpoint(server)
            if endpoint is None:
                unreachable.append(server.settings.issuer)
                continue
            try:
                answer = await server.introspector.introspect(endpoint, token, key, client)
            except IntrospectionThrottled as exc:
                if exc.spent is Spent.CLIENT:
                    raise _refused("throttled", f"not checked: {exc}; retry later") from None
                logger.debug("token introspection skipped: %s", exc)
                unreachable.append(server.settings.issuer)
                continue
            except IntrospectionError as exc:
                logger.warning("token introspection failed: %s", exc)
                unreachable.append(server.settings.issuer)
                continue
            claims = answer.claims
            if claims is None:
                continue
            audiences = claims.get("aud")
            wanted = server.settings.audience or self.settings.resource
            if audiences is None and server.settings.introspection.require_audience:
                raise _refused("wrong_audience", "the token's introspection names no audience (aud)")
            if audiences is not None and wanted not in (
                audiences if isinstance(audiences, list) else [audiences]
            ):
                raise _refused(
                    "wrong_audience", f"the token was not issued for this resource ({self.settings.resource})"
                )
            iss = claims.get("iss", server.settings.issuer)
            if iss != server.settings.issuer:
                raise _refused("wrong_issuer", "the token's issuer (iss) is not accepted here")
            exp = claims.get("exp")
            numeric = isinstance(exp, int | float) and not isinstance(exp, bool)
            expires_at = float(exp) if numeric and exp is not None else self._clock() + _UNDATED_SECONDS
            # Believed no longer than an introspection answer is: a revocation takes effect then.
            expires_at = min(expires_at, self._clock() + self.settings.introspection_cache)
            return self._signed_in(claims, iss, expires_at)
        if unreachable:
            raise _refused(
                "unavailable", "the token could not be checked: its authorization server did not answer"
            )
        raise _refused("inactive", "the token is not active (revoked, expired or unknown)")

    async def _endpoint(self, server: _Server) -> str | None:
        assert server.settings.introspection is not None
        if server.settings.introspection.endpoint is not None:
            return server.settings.introspection.endpoint
        metadata = server.keys.metadata
        if metadata is None:
            await server.keys.key(None)  # discover now (rate-limited)
            metadata = server.keys.metadata
        return metadata.introspection_endpoint if metadata is not None else None

    def _signed_in(self, claims: dict[str, Any], iss: str, expires_at: float) -> SignedIn:
        settings = self.settings
        # A token of the client credentials grant speaks for the client itself: RFC 9068 §2.2
        # gives it sub = client_id, and an introspection answer may leave sub out altogether.
        subject = claims.get("sub", claims.get("client_id"))
        if not isinstance(subject, str) or not subject:
            raise _refused("malformed", "the token names no subject (sub)")
        name = claim(claims, settings.name_claim) if settings.name_claim != "sub" else subject
        if not isinstance(name, str) or not name:
            raise _refused(
                "malformed", f"the token has no string {settings.name_claim!r} claim to name the caller"
            )
        scopes = granted_scopes(claims)
        roles = set(scopes) if settings.scopes_as_roles else set()
        for scope in scopes:
            roles.update(settings.scope_roles.get(scope, ()))
        if settings.roles_claim is not None:
            roles.update(_roles(claim(claims, settings.roles_claim), settings.roles_claim))
        return SignedIn(Identity(name, frozenset(roles), "oauth", iss, subject), scopes, expires_at)

    def missing_scopes(self, scopes: Iterable[str]) -> tuple[str, ...]:
        """The required scopes a token without ``scopes`` lacks (empty: it may come in)."""
        granted = set(scopes)
        return tuple(s for s in self.settings.required_scopes if s not in granted)


def _roles(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(role, str) for role in value):
        return value
    raise _refused("malformed", f"the token's {name!r} claim is not a list of strings")
