"""Bearer JWTs: which issuer a token claims, checked with that issuer's key, read into an Identity.

A token goes to the configured issuer its ``iss`` names (or to the one entry without an
``issuer``, which checks no ``iss``). The algorithm in the token's header must be on that
issuer's allow-list; ``none`` never is, and an issuer verifies with one kind of key only (a
secret for HS*, public keys for the rest), so a token cannot choose to be checked with the
public key as an HMAC secret. Then PyJWT checks the signature, ``exp`` (required), ``nbf``,
``iat``, ``iss`` and ``aud``, with the issuer's leeway. Note PyJWT's rule on audience: a token
that names an ``aud`` is refused by an issuer without a configured ``audience``, because that
token was meant for someone else.

The identity a token proves is keyed on ``(jwt, iss, sub)`` (:attr:`Identity.key`): the same
``sub`` from two issuers is two identities, whatever ``name_claim`` calls them. A token without
``sub`` is its ``name_claim`` value to its issuer.

Claim names are looked up as written first (``https://example.com/roles`` is one claim), then as
a dotted path through nested objects (``realm_access.roles``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio
import anyio.abc
import jwt

from proxy.auth.jwks import Fetch, JwksError, JwksFile, JwksUrl, KeySource
from proxy.config.auth import JwtIssuer
from proxy.core.errors import ConfigError
from proxy.policy.model import Identity

__all__ = ["MESSAGES", "JwtVerifier", "TokenRejected", "VerifiedToken", "claim", "signing_key"]

# Which key types may verify which algorithm family.
_FAMILIES: Final = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
MESSAGES: Final[list[tuple[type[jwt.PyJWTError], str]]] = [
    (jwt.InvalidAudienceError, "the token's audience (aud) is not accepted here"),
    (jwt.InvalidIssuerError, "the token's issuer (iss) is not accepted here"),
    (jwt.ImmatureSignatureError, "the token is not valid yet (nbf)"),
    (jwt.InvalidIssuedAtError, "the token's issue time (iat) is invalid"),
    (jwt.InvalidSignatureError, "the token's signature does not verify"),
    (jwt.InvalidAlgorithmError, "the token's algorithm is not accepted"),
    (jwt.InvalidKeyError, "the issuer's signing key is not acceptable"),
    (jwt.exceptions.InvalidSubjectError, "the token's subject (sub) is not a string"),
]


class TokenRejected(Exception):
    """The token proves nothing; ``message`` is safe to show the client (it never holds the token)."""

    def __init__(
        self, reason: Literal["invalid", "expired"], message: str, outcome: str | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.outcome = outcome or reason  # the finer word metrics count it under


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    """Who a valid token says the caller is, and until when (``exp``, seconds since the epoch)."""

    identity: Identity
    expires_at: float


def claim(payload: dict[str, Any], name: str) -> Any:
    """The claim ``name``: the key as written, else a dotted path through nested objects; or None."""
    if name in payload:
        return payload[name]
    value: Any = payload
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


@dataclass(frozen=True, slots=True)
class _Issuer:
    settings: JwtIssuer
    secret: bytes | None
    keys: KeySource | None


class JwtVerifier:
    """Verifies tokens for the configured issuers."""

    def __init__(self, issuers: Sequence[tuple[JwtIssuer, KeySource | None]]) -> None:
        self._issuers: dict[str | None, _Issuer] = {}
        for settings, keys in issuers:
            secret = settings.secret.get_secret_value().encode() if settings.secret is not None else None
            self._issuers[settings.issuer] = _Issuer(settings, secret, keys)

    @classmethod
    def from_settings(
        cls,
        issuers: Sequence[JwtIssuer],
        *,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> JwtVerifier:
        """Set up each issuer's key source; JWKS files are read now, URLs fetched by :meth:`run`.

        Raises:
            ConfigError: a ``jwks_file`` cannot be read or is not a JWKS.
        """
        entries: list[tuple[JwtIssuer, KeySource | None]] = []
        for index, settings in enumerate(issuers):
            keys: KeySource | None = None
            if settings.jwks_file is not None:
                try:
                    keys = JwksFile(settings.jwks_file, clock=clock)
                except JwksError as exc:  # the message names the file
                    raise ConfigError(f"auth.jwt[{index}].jwks_file: {exc}") from None
            elif settings.jwks_url is not None:
                keys = JwksUrl(settings.jwks_url, fetch=fetch, refresh=settings.jwks_refresh, clock=clock)
            entries.append((settings, keys))
        return cls(entries)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Load every issuer's keys (bounded), report readiness, then keep them fresh until cancelled."""
        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as starting:  # all issuers at once, not in turn
                for issuer in self._issuers.values():
                    if issuer.keys is not None:
                        starting.start_soon(tg.start, issuer.keys.run)
            task_status.started()

    async def verify(self, token: str) -> VerifiedToken:
        """Check ``token`` completely and read the identity it carries.

        Raises:
            TokenRejected: ``expired`` past ``exp`` plus leeway; ``invalid`` for anything else.
        """
        try:
            header = jwt.get_unverified_header(token)
            # Only to choose the issuer; nothing from it is believed before the signature is checked.
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise TokenRejected("invalid", "the token is malformed") from None
        issuer = self._route(unverified.get("iss"))
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in issuer.settings.algorithms:
            raise TokenRejected("invalid", "the token's algorithm is not accepted for its issuer")
        key = await self._key(issuer, algorithm, header.get("kid"))
        settings = issuer.settings
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=settings.leeway,
                options={"require": ["exp"], "enforce_minimum_key_length": True},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRejected("expired", "the token has expired") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRejected("invalid", f"the token lacks the required {exc.claim!r} claim") from None
        except jwt.PyJWTError as exc:
            message = next((m for kind, m in MESSAGES if isinstance(exc, kind)), "the token is malformed")
            raise TokenRejected("invalid", message) from None
        return VerifiedToken(_identity(payload, settings), float(payload["exp"]))

    def _route(self, iss: Any) -> _Issuer:
        issuer = self._issuers.get(iss) if isinstance(iss, str) else None
        issuer = issuer or self._issuers.get(None)
        if issuer is None:
            raise TokenRejected("invalid", "the token's issuer (iss) is not trusted here", "wrong_issuer")
        return issuer

    async def _key(self, issuer: _Issuer, algorithm: str, kid: Any) -> Any:
        if issuer.secret is not None:
            return issuer.secret
        assert issuer.keys is not None  # settings guarantee a secret or a key set
        return await signing_key(issuer.keys, algorithm, kid)


async def signing_key(keys: KeySource, algorithm: str, kid: Any) -> Any:
    """The key of ``keys`` that may verify a token signed with ``algorithm`` under ``kid``.

    Raises:
        TokenRejected: no such key, or one of another family than the algorithm (confusion).
    """
    if kid is not None and not isinstance(kid, str):
        raise TokenRejected("invalid", "the token's key id (kid) is not a string")
    key = await keys.key(kid)
    if key is None:
        raise TokenRejected("invalid", "no signing key of the issuer matches the token's key id (kid)")
    if _FAMILIES.get(algorithm[:2]) != key.kty or (key.alg is not None and key.alg != algorithm):
        raise TokenRejected("invalid", "the token's algorithm does not match its signing key")
    return key.key


def _identity(payload: dict[str, Any], settings: JwtIssuer) -> Identity:
    name = claim(payload, settings.name_claim)
    if not isinstance(name, str) or not name:
        raise TokenRejected(
            "invalid", f"the token has no string {settings.name_claim!r} claim to name the caller"
        )
    roles = claim(payload, settings.roles_claim)
    if roles is None:
        roles = []
    elif isinstance(roles, str):
        roles = roles.split()  # the OAuth `scope` style: "read write"
    if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
        raise TokenRejected("invalid", f"the token's {settings.roles_claim!r} claim is not a list of strings")
    # Who vouches (iss: checked against the configured issuer, or signed by the one entry without
    # one) and who it is to them (sub): the key. The name is for policy and logs only.
    issuer = payload.get("iss")
    subject = payload.get("sub")
    return Identity(
        name,
        frozenset(roles),
        "jwt",
        issuer=issuer if isinstance(issuer, str) else "",
        subject=subject if isinstance(subject, str) and subject else name,
    )
