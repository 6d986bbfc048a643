"""Who is calling: one request's headers in, an :data:`AuthResult` out. No HTTP framework here.

Credentials, in the order they are looked at:

- no ``Authorization`` and no ``X-API-Key``: the anonymous identity if anonymous access is on
  (see :mod:`proxy.config.auth`), else :attr:`FailureReason.MISSING`;
- ``X-API-Key: <key>``, or ``Authorization: Bearer <key>``: a configured API key;
- ``Authorization: Bearer <JWT>``: a token from a configured issuer: an OAuth authorization
  server's access token for this resource (``auth.oauth``, :mod:`proxy.auth.oauth`) or a token
  of an ``auth.jwt`` issuer;
- ``Authorization: Bearer <opaque token>``: asked about at the OAuth introspection endpoints.

A presented credential that proves nothing is refused; it is never downgraded to anonymous.

The common cases cost one SHA-256 and one or two dict lookups: API keys are found by digest, and
a verified token is remembered under the same digest until it expires (but at most
``MAX_CACHED_SECONDS``, which bounds how long a token outlives the removal of its signing key).

The HTTP layer answers a :class:`Rejected` with ``rejected.status`` (401, or 403 for a token
without a required scope) and the header ``WWW-Authenticate: rejected.www_authenticate()``
(RFC 6750 §3; with OAuth, also the ``resource_metadata`` and ``scope`` of RFC 9728 §5.1).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import anyio
import anyio.abc
from cachetools import TLRUCache

from proxy.auth.apikeys import ApiKeyTable, digest
from proxy.config.auth import AuthSettings
from proxy.policy.model import Identity

if TYPE_CHECKING:  # loaded by from_settings when auth.jwt or auth.oauth asks (PyJWT, aiohttp)
    from proxy.auth.jwks import Fetch
    from proxy.auth.jwt import JwtVerifier
    from proxy.auth.oauth import OAuthVerifier, SignedIn
    from proxy.config.oauth import AuthorizationServer

__all__ = [
    "MAX_CACHED_SECONDS",
    "AuthResult",
    "Authenticated",
    "Authenticator",
    "FailureReason",
    "Rejected",
    "SignInHook",
]

MAX_CACHED_SECONDS: Final = 300.0
RETRY_AFTER_SECONDS: Final = 5  # told to a client whose token could not be checked just now
_REALM: Final = "manifold"


class FailureReason(StrEnum):
    """Why a request is not let in."""

    MISSING = "missing"  # no credential, and anonymous access is off
    INVALID = "invalid"  # a credential that proves nothing
    EXPIRED = "expired"  # a token past its exp
    INSUFFICIENT_SCOPE = "insufficient_scope"  # a good token that lacks a required scope (403)
    UNAVAILABLE = "unavailable"  # the token could not be checked now: its issuer is unreachable (503)
    THROTTLED = "throttled"  # this client sent too many unknown tokens to check now (429)


_REASONS: Final[dict[str, FailureReason]] = {
    "unavailable": FailureReason.UNAVAILABLE,
    "throttled": FailureReason.THROTTLED,
}


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The request proved (or, anonymously, did not need to prove) who it is."""

    identity: Identity


@dataclass(frozen=True, slots=True)
class Rejected:
    """The request is refused; ``message`` is safe to show the client (it never holds a credential)."""

    reason: FailureReason
    message: str
    resource_metadata: str | None = None  # with OAuth: where clients find how to sign in
    scope: str | None = None  # with OAuth: the scopes to ask for (space-separated)

    @property
    def status(self) -> int:
        if self.reason is FailureReason.UNAVAILABLE:
            return 503  # not the token's fault: a client that signs in again would lose a good one
        if self.reason is FailureReason.THROTTLED:
            return 429
        return 403 if self.reason is FailureReason.INSUFFICIENT_SCOPE else 401

    def headers(self) -> list[tuple[str, str]]:
        """The response headers: the challenge, and when to come back after a 503."""
        found = [("www-authenticate", self.www_authenticate())]
        if self.reason in (FailureReason.UNAVAILABLE, FailureReason.THROTTLED):
            found.append(("retry-after", str(RETRY_AFTER_SECONDS)))
        return found

    def www_authenticate(self, realm: str = _REALM) -> str:
        """The ``WWW-Authenticate`` value for the 401 or 403 (RFC 6750 §3, RFC 9728 §5.1).

        Without a credential, only the challenge; with a bad one, ``error="invalid_token"`` and
        the message as ``error_description`` (reduced to the characters RFC 6750 allows there);
        a missing scope is ``error="insufficient_scope"``.
        """
        challenge = f'Bearer realm="{realm}"'
        if self.resource_metadata is not None:
            challenge += f', resource_metadata="{self.resource_metadata}"'
        if self.scope:
            challenge += f', scope="{self.scope}"'
        if self.reason in (FailureReason.MISSING, FailureReason.UNAVAILABLE, FailureReason.THROTTLED):
            return challenge  # nothing known to be wrong with the token (if any): keep it, come back
        error = "insufficient_scope" if self.reason is FailureReason.INSUFFICIENT_SCOPE else "invalid_token"
        description = "".join(c if " " <= c <= "~" and c not in '"\\' else "?" for c in self.message)
        return f'{challenge}, error="{error}", error_description="{description}"'


AuthResult: TypeAlias = Authenticated | Rejected
# (method, outcome) of each token verified (not of a cached one): for manifold_sign_ins_total.
SignInHook: TypeAlias = Callable[[str, str], None]
BearerHook: TypeAlias = Callable[[Identity, str, float], None]


@dataclass(frozen=True, slots=True)
class _Cached:
    result: Authenticated
    until: float  # wall-clock seconds, like exp


def _until(_key: bytes, value: _Cached, _now: float) -> float:
    return value.until


class Authenticator:
    """Turns request headers into an identity, or into the reason there is none."""

    def __init__(
        self,
        api_keys: ApiKeyTable,
        jwt: JwtVerifier | None,
        *,
        anonymous: Identity | None,
        stdio: Identity,
        oauth: OAuthVerifier | None = None,
        cache_size: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``anonymous`` is the identity for credential-less requests, or None to refuse them."""
        self._api_keys = api_keys
        self._jwt = jwt
        self._oauth = oauth
        self._metadata_url = oauth.settings.metadata_url if oauth is not None else None
        self._scope = None
        if oauth is not None:
            self._scope = " ".join(oauth.settings.required_scopes or oauth.settings.scopes_supported) or None
        self.on_sign_in: SignInHook = lambda method, outcome: None
        # Each request's bearer token that proved an identity, with its expiry: for the
        # ``exchange`` credentials mode (proxy.credentials.inbound), which never forwards it.
        self.on_bearer: BearerHook = lambda identity, token, until: None
        self._no_credential: AuthResult = (
            Authenticated(anonymous)
            if anonymous is not None
            else self._no(FailureReason.MISSING, "credentials are required: an API key or a bearer token")
        )
        self._stdio = stdio
        self._clock = clock
        self._tokens: TLRUCache[bytes, _Cached] = TLRUCache(maxsize=cache_size, ttu=_until, timer=clock)

    @classmethod
    def from_settings(
        cls,
        settings: AuthSettings,
        environ: Mapping[str, str],
        *,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.time,
    ) -> Authenticator:
        """Build from the ``auth`` section; ``environ`` resolves ``env:`` API keys.

        ``fetch`` replaces the HTTP GET of JWKS URLs, ``clock`` the wall clock that expires cached
        tokens (both for tests). JWKS files are read here; JWKS URLs are fetched by :meth:`run`,
        or by the first token that needs them.

        Raises:
            ConfigError: an ``env:`` key is unset, short or duplicated, or a JWKS file is unusable.
        """
        anonymous = settings.anonymous
        jwt_verifier = oauth = None
        if settings.jwt:
            from proxy.auth.jwt import JwtVerifier

            jwt_verifier = JwtVerifier.from_settings(settings.jwt, fetch=fetch)
        if settings.oauth is not None:
            from proxy.auth.oauth import OAuthVerifier

            oauth = OAuthVerifier(settings.oauth, fetch=fetch)
        return cls(
            ApiKeyTable.from_settings(settings.api_keys, environ),
            jwt_verifier,
            anonymous=(
                Identity(anonymous.name, frozenset(anonymous.roles), "anonymous")
                if settings.anonymous_enabled
                else None
            ),
            stdio=Identity(settings.stdio_identity.name, frozenset(settings.stdio_identity.roles), "stdio"),
            oauth=oauth,
            cache_size=settings.token_cache_size,
            clock=clock,
        )

    @property
    def stdio_identity(self) -> Identity:
        """The identity of the client on the stdio transport."""
        return self._stdio

    @property
    def requires_credentials(self) -> bool:
        """False when requests without credentials are let in as the anonymous identity."""
        return isinstance(self._no_credential, Rejected)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Fetch JWKS URLs (bounded), report readiness, then refresh them until cancelled.

        Start it with ``await task_group.start(authenticator.run)``.
        """
        async with anyio.create_task_group() as tg:
            if self._jwt is not None:
                await tg.start(self._jwt.run)
            if self._oauth is not None:
                await tg.start(self._oauth.run)
            task_status.started()

    @property
    def oauth(self) -> OAuthVerifier | None:
        """The OAuth resource server's settings and verifier, when ``auth.oauth`` is configured."""
        return self._oauth

    def _no(self, reason: FailureReason, message: str) -> Rejected:
        return Rejected(reason, message, self._metadata_url, self._scope)

    async def authenticate(self, headers: Mapping[str, str], client: str | None = None) -> AuthResult:
        """Judge one request by its headers (names lower-cased); ``client`` is its peer address
        (what an unknown opaque token's introspection is budgeted by). Never raises to say no."""
        authorization = headers.get("authorization")
        api_key = headers.get("x-api-key")
        if authorization is None and api_key is None:
            return self._no_credential
        if authorization is not None and api_key is not None:
            return self._no(
                FailureReason.INVALID, "send one credential: Authorization or X-API-Key, not both"
            )
        if authorization is not None:
            scheme, _, credential = authorization.strip().partition(" ")
            if scheme.lower() != "bearer":
                return self._no(FailureReason.INVALID, "the Authorization header must use the Bearer scheme")
        else:
            credential = api_key or ""
        credential = credential.strip()
        if not credential:
            return self._no(FailureReason.INVALID, "the credential is empty")
        key_digest = digest(credential)
        identity = self._api_keys.lookup(key_digest)
        if identity is not None:
            return Authenticated(identity)
        if authorization is None:
            return self._no(FailureReason.INVALID, "the API key is not valid")
        cached = self._tokens.get(key_digest)
        if cached is not None:
            self.on_bearer(cached.result.identity, credential, cached.until)
            return cached.result
        if credential.count(".") != 2:
            if self._oauth is None or not self._oauth.introspects:
                return self._no(FailureReason.INVALID, "the API key is not valid")
            return await self._signed_in(
                "introspection",
                self._oauth.verify_opaque(credential, key_digest, client),
                key_digest,
                credential,
            )
        if self._oauth is None and self._jwt is None:  # no issuer to ask: nothing to decode
            return self._no(
                FailureReason.INVALID, "the credential is not a valid API key, and tokens are not accepted"
            )
        decoded, iss = _unverified_issuer(credential)
        if self._oauth is not None and self._oauth.issues(iss):
            return await self._signed_in(
                "oauth", self._oauth.verify_jwt(credential, iss), key_digest, credential
            )
        if self._jwt is None:
            assert self._oauth is not None
            # Counted like any refused token: a flood of forged or mis-issued tokens shows.
            if not decoded:
                self.on_sign_in("oauth", "malformed")
                return self._no(FailureReason.INVALID, "the token is malformed (not a JWT)")
            self.on_sign_in("oauth", "wrong_issuer")
            servers = self._oauth.settings.authorization_servers
            return self._no(FailureReason.INVALID, _untrusted(iss, servers))
        from proxy.auth.jwt import TokenRejected  # loaded with the verifier

        try:
            verified = await self._jwt.verify(credential)
        except TokenRejected as exc:
            self.on_sign_in("jwt", exc.outcome)
            return self._no(FailureReason(exc.reason), exc.message)
        self.on_sign_in("jwt", "ok")
        return self._remember(Authenticated(verified.identity), verified.expires_at, key_digest, credential)

    async def _signed_in(
        self, method: str, verifying: Awaitable[SignedIn], key_digest: bytes, credential: str
    ) -> AuthResult:
        """The verdict on an OAuth access token, counted; remembered when it lets the caller in."""
        assert self._oauth is not None
        from proxy.auth.jwt import TokenRejected  # loaded with the verifier

        try:
            signed_in = await verifying
        except TokenRejected as exc:
            self.on_sign_in(method, exc.outcome)
            reason = _REASONS.get(exc.outcome) or FailureReason(exc.reason)
            return self._no(reason, exc.message)
        if missing := self._oauth.missing_scopes(signed_in.scopes):
            self.on_sign_in(method, "insufficient_scope")
            return Rejected(
                FailureReason.INSUFFICIENT_SCOPE,
                f"the token lacks the scope{'s' if len(missing) > 1 else ''} {' '.join(missing)}",
                self._metadata_url,
                " ".join(self._oauth.settings.required_scopes),
            )
        self.on_sign_in(method, "ok")
        return self._remember(Authenticated(signed_in.identity), signed_in.expires_at, key_digest, credential)

    def _remember(
        self, result: Authenticated, expires_at: float, key_digest: bytes, credential: str
    ) -> Authenticated:
        self.on_bearer(result.identity, credential, expires_at)
        until = min(expires_at, self._clock() + MAX_CACHED_SECONDS)
        if until > self._clock():
            self._tokens[key_digest] = _Cached(result, until)
        return result


def _unverified_issuer(token: str) -> tuple[bool, Any]:
    """Whether ``token`` decodes as a JWT, and the ``iss`` it claims (unchecked: only to choose
    who checks it; None when it names none)."""
    import jwt  # loaded with the verifiers: there is one when this is asked

    try:
        return True, jwt.decode(token, options={"verify_signature": False}).get("iss")
    except jwt.PyJWTError:
        return False, None


def _untrusted(iss: Any, servers: Iterable[AuthorizationServer]) -> str:
    """Why a well-formed token's issuer is refused: with a hint when it is a configured issuer but
    for a trailing slash (the commonest mistake: the provider's ``iss`` differs by one '/')."""
    if not isinstance(iss, str):
        return "the token names no issuer (iss)"
    for server in servers:
        if server.issuer.rstrip("/") == iss.rstrip("/"):
            return (
                f"the token's issuer (iss) is not trusted here: it differs from the configured "
                f"{server.issuer!r} by a trailing '/'"
            )
    return "the token's issuer (iss) is not trusted here"
