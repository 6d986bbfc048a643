"""Session ids that carry their own state, so any replica can serve any session.

A session id is ``<nonce>.<payload>.<mac>``: a random nonce first, so that the first characters
of an id (all a log line keeps of it) tell sessions apart, and so that it names the session
where an ended one is remembered (:mod:`proxy.clients.revocations`); the payload (base64url JSON) holds
what a replica needs to take a session over (the negotiated revision, the capabilities Manifold
keeps of the client's, :func:`proxy.protocol.asks.kept_capabilities`, a fingerprint of the
identity that opened it, and its expiry: ``sessions.max_lifetime`` after it was issued, in Unix
seconds, so that no id can be taken over forever); the MAC (HMAC-SHA256 over both, under a
key derived from a secret the replicas share, see :mod:`proxy.core.keys`) proves a replica issued it.
Whatever a client declares, an id stays a few hundred bytes. The payload is signed, not
encrypted: it holds nothing secret, and the identity fingerprint is a hash. A restored session
must still be presented with credentials of the same identity, so a leaked id alone is worth
nothing. An id without an expiry (issued by a release before expiries) is refused.

The clock is the wall clock, injected: another replica checks the expiry this one wrote.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from proxy.core.keys import fingerprint
from proxy.policy.model import Identity
from proxy.protocol.asks import kept_capabilities

__all__ = ["DEFAULT_LIFETIME", "SessionClaims", "SessionTokens", "nonce_of"]

_MAC_BYTES: Final = 16
_MAX_TOKEN: Final = 2048  # an id this replica set issues is far smaller
DEFAULT_LIFETIME: Final = 86_400.0  # sessions.max_lifetime's default: a day


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def nonce_of(token: str) -> str:
    """The random part an id starts with: what names it once ended (the rest is derived)."""
    return token.partition(".")[0]


@dataclass(frozen=True, slots=True)
class SessionClaims:
    protocol_version: str
    capabilities: dict[str, Any]
    expires: int  # Unix seconds: the id is refused from then on, and its session ends
    endpoint: str = ""  # the endpoint the session was opened on


class SessionTokens:
    def __init__(
        self, key: bytes, *, lifetime: float = DEFAULT_LIFETIME, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = key
        self._lifetime = lifetime
        self._clock = clock

    def issue(
        self, protocol_version: str, capabilities: dict[str, Any], identity: Identity, endpoint: str = ""
    ) -> tuple[str, int]:
        """A new signed id, and when it expires (Unix seconds)."""
        expires = math.ceil(self._clock() + self._lifetime)  # never shorter than configured
        claims: dict[str, Any] = {
            "v": protocol_version[:64],
            "c": kept_capabilities(capabilities),
            "i": fingerprint(identity),
            "x": expires,
        }
        if endpoint:
            claims["e"] = endpoint
        payload = orjson.dumps(claims)
        signed = f"{_b64(secrets.token_bytes(16))}.{_b64(payload)}"
        return f"{signed}.{self._mac(signed)}", expires

    def expired(self, expires: int) -> bool:
        """Whether an id expiring at ``expires`` is past its lifetime now."""
        return self._clock() >= expires

    def restore(self, token: str, identity: Identity) -> SessionClaims | None:
        """The claims of a session id this secret issued for ``identity``, not yet expired; None
        for anything else."""
        if len(token) > _MAX_TOKEN:
            return None
        signed, _, mac = token.rpartition(".")
        nonce, _, body = signed.partition(".")
        if not nonce or not body or not hmac.compare_digest(mac, self._mac(signed)):
            return None
        try:
            claims = orjson.loads(_unb64(body))
        except (binascii.Error, ValueError):
            return None
        if not isinstance(claims, dict) or claims.get("i") != fingerprint(identity):
            return None
        version, capabilities, expires = claims.get("v"), claims.get("c"), claims.get("x")
        endpoint = claims.get("e", "")
        if (
            not isinstance(version, str)
            or not isinstance(capabilities, dict)
            or not isinstance(endpoint, str)
        ):
            return None
        if type(expires) is not int or self.expired(expires):  # no expiry: never taken over
            return None
        return SessionClaims(version, kept_capabilities(capabilities), expires, endpoint)

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest()[:_MAC_BYTES])
