"""Session ids that carry their own state, so any replica can serve any session.

A session id is ``<nonce>.<payload>.<mac>``: a random nonce first, so that the first characters
of an id (all a log line keeps of it) tell sessions apart; the payload (base64url JSON) holds
what a replica needs to take a session over (the negotiated revision, the capabilities Manifold
keeps of the client's, :func:`proxy.protocol.asks.kept_capabilities`, and a fingerprint of the
identity that opened it); the MAC (HMAC-SHA256 over both, under a key derived from a secret the
replicas share, see :mod:`proxy.keys`) proves a replica issued it. Whatever a client declares,
an id stays a few hundred bytes. The payload is
signed, not encrypted: it holds nothing secret, and the identity fingerprint is a hash. A
restored session must still be presented with credentials of the same identity, so a leaked id
alone is worth nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, Final

import orjson

from proxy.keys import fingerprint
from proxy.policy.model import Identity
from proxy.protocol.asks import kept_capabilities

__all__ = ["SessionClaims", "SessionTokens"]

_MAC_BYTES: Final = 16
_MAX_TOKEN: Final = 2048  # an id this replica set issues is far smaller


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class SessionClaims:
    protocol_version: str
    capabilities: dict[str, Any]
    endpoint: str = ""  # the endpoint the session was opened on


class SessionTokens:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def issue(
        self, protocol_version: str, capabilities: dict[str, Any], identity: Identity, endpoint: str = ""
    ) -> str:
        claims = {
            "v": protocol_version[:64],
            "c": kept_capabilities(capabilities),
            "i": fingerprint(identity),
        }
        if endpoint:
            claims["e"] = endpoint
        payload = orjson.dumps(claims)
        signed = f"{_b64(secrets.token_bytes(16))}.{_b64(payload)}"
        return f"{signed}.{self._mac(signed)}"

    def restore(self, token: str, identity: Identity) -> SessionClaims | None:
        """The claims of a session id this secret issued for ``identity``; None for anything else."""
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
        version, capabilities, endpoint = claims.get("v"), claims.get("c"), claims.get("e", "")
        if (
            not isinstance(version, str)
            or not isinstance(capabilities, dict)
            or not isinstance(endpoint, str)
        ):
            return None
        return SessionClaims(version, kept_capabilities(capabilities), endpoint)

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest()[:_MAC_BYTES])
