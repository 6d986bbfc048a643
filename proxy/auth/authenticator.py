"""Who is calling: one request's headers in, an :data:`AuthResult` out. No HTTP framework here.

Credentials, in the order they are looked at:

- no ``Authorization`` and no ``X-API-Key``: the anonymous identity if anonymous access is on
  (see :mod:`proxy.auth.settings`), else :attr:`FailureReason.MISSING`;
- ``X-API-Key: <key>``, or ``Authorization: Bearer <key>``: a configured API key;
- ``Authorization: Bearer <JWT>``: a token from a configured issuer.

A presented credential that proves nothing is refused; it is never downgraded to anonymous.

The common cases cost one SHA-256 and one or two dict lookups: API keys are found by digest, and
a verified token is remembered under the same digest until it expires (but at most
``MAX_CACHED_SECONDS``, which bounds how long a token outlives the removal of its signing key).

The HTTP layer answers a :class:`Rejected` with ``rejected.status`` (401) and the header
``WWW-Authenticate: rejected.www_authenticate()`` (RFC 6750 §3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Final, TypeAlias

import anyio
import anyio.abc
from cachetools import TLRUCache

from proxy.auth.apikeys import ApiKeyTable, digest
from proxy.auth.jwks import Fetch
from proxy.auth.jwt import JwtVerifier, TokenRejected
from proxy.auth.settings import AuthSettings
from proxy.policy.model import Identity

__all__ = ["MAX_CACHED_SECONDS", "AuthResult", "Authenticated", "Authenticator", "FailureReason", "Rejected"]

MAX_CACHED_SECONDS: Final = 300.0
_REALM: Final = "manifold"


class FailureReason(StrEnum):
    """Why a request is not let in."""

    MISSING = "missing"  # no credential, and anonymous access is off
    INVALID = "invalid"  # a credential that proves nothing
    EXPIRED = "expired"  # a token past its exp


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The request proved (or, anonymously, did not need to prove) who it is."""

    identity: Identity


@dataclass(frozen=True, slots=True)
class Rejected:
    """The request is refused; ``message`` is safe to show the client (it never holds a credential)."""

    reason: FailureReason
    message: str

    status: ClassVar[int] = 401

    def www_authenticate(self, realm: str = _REALM) -> str:
        """The ``WWW-Authenticate`` value for the 401 (RFC 6750 §3).

        Without a credential, only the challenge; with a bad one, ``error="invalid_token"`` and
        the message as ``error_description`` (reduced to the characters RFC 6750 allows there).
        """
        challenge = f'Bearer realm="{realm}"'
        if self.reason is FailureReason.MISSING:
            return challenge
        description = "".join(c if " " <= c <= "~" and c not in '"\\' else "?" for c in self.message)
        return f'{challenge}, error="invalid_token", error_description="{description}"'


AuthResult: TypeAlias = Authenticated | Rejected


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
        cache_size: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``anonymous`` is the identity for credential-less requests, or None to refuse them."""
        self._api_keys = api_keys
        self._jwt = jwt
        self._no_credential: AuthResult = (
            Authenticated(anonymous)
            if anonymous is not None
            else Rejected(FailureReason.MISSING, "credentials are required: an API key or a bearer token")
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
        return cls(
            ApiKeyTable.from_settings(settings.api_keys, environ),
            JwtVerifier.from_settings(settings.jwt, fetch=fetch) if settings.jwt else None,
            anonymous=(
                Identity(anonymous.name, frozenset(anonymous.roles), "anonymous")
                if settings.anonymous_enabled
                else None
            ),
            stdio=Identity(settings.stdio_identity.name, frozenset(settings.stdio_identity.roles), "stdio"),
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
        if self._jwt is None:
            task_status.started()
            return
        await self._jwt.run(task_status=task_status)

    async def authenticate(self, headers: Mapping[str, str]) -> AuthResult:
        """Judge one request by its headers (names lower-cased). Never raises to say no."""
        authorization = headers.get("authorization")
        api_key = headers.get("x-api-key")
        if authorization is None and api_key is None:
            return self._no_credential
        if authorization is not None and api_key is not None:
            return Rejected(
                FailureReason.INVALID, "send one credential: Authorization or X-API-Key, not both"
            )
        if authorization is not None:
            scheme, _, credential = authorization.strip().partition(" ")
            if scheme.lower() != "bearer":
                return Rejected(FailureReason.INVALID, "the Authorization header must use the Bearer scheme")
        else:
            credential = api_key or ""
        credential = credential.strip()
        if not credential:
            return Rejected(FailureReason.INVALID, "the credential is empty")
        key_digest = digest(credential)
        identity = self._api_keys.lookup(key_digest)
        if identity is not None:
            return Authenticated(identity)
        if authorization is None or credential.count(".") != 2:
            return Rejected(FailureReason.INVALID, "the API key is not valid")
        if self._jwt is None:
            return Rejected(
                FailureReason.INVALID, "the credential is not a valid API key, and tokens are not accepted"
            )
        cached = self._tokens.get(key_digest)
        if cached is not None:
            return cached.result
        try:
            verified = await self._jwt.verify(credential)
        except TokenRejected as exc:
            return Rejected(FailureReason(exc.reason), exc.message)
        result = Authenticated(verified.identity)
        until = min(verified.expires_at, self._clock() + MAX_CACHED_SECONDS)
        if until > self._clock():
            self._tokens[key_digest] = _Cached(result, until)
        return result
