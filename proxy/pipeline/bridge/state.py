"""``requestState`` as Manifold issues it: sealed, bound to one request and one caller, short-lived.

Revision 2026-07-28 lets a server answer ``tools/call``, ``prompts/get`` or ``resources/read`` with
``input_required`` and an opaque ``requestState`` the client echoes on its retry. The spec tells
servers to treat that state as attacker-controlled. Manifold never hands a client a state it
cannot check, for two reasons:

- a server behind Manifold binds its own state to *Manifold's* credentials, not to the caller's,
  so passed through raw one identity could replay another's state through Manifold;
- when Manifold itself asks on a handshake-era server's behalf (a parked call), the state names
  that call, and must not name anybody else's.

So every state a client sees is ``<payload>.<mac>``: base64url JSON claims, HMAC-SHA256 under a key
derived from the shared session secret (so any replica can check it). The claims bind it to the
server, method, target (namespaced name or URI), a digest of the arguments, a fingerprint of the
caller's identity, and an expiry; ``payload`` is the server's own state or the parked call's id.
A server's state issued for a call a person approved also carries the approval's mark (``c``:
a digest of the confirm rules that asked, :mod:`proxy.pipeline.stages.confirm`), so that a retry of a
call that needs approval is let through only with a state issued after such an approval.
Signed, not encrypted: the client could read a server's state anyway had Manifold passed it on.

Nothing here does I/O; the clock is injected.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from proxy.core.errors import InvalidRequestState
from proxy.core.keys import fingerprint
from proxy.policy.model import Identity

__all__ = ["Boundary", "RequestStates", "Sealed", "arguments_digest"]

# a server's own state, wrapped | a call Manifold parked | Manifold's own question (proxy.enforce.confirm)
Kind = Literal["server", "parked", "confirm", "signin"]

_MAC_BYTES: Final = 16
_MAX_STATE: Final = 64 * 1024  # a retry's state larger than this was not issued here


def arguments_digest(arguments: Mapping[str, Any] | None) -> str:
    """A digest of a request's arguments, independent of key order."""
    canonical = orjson.dumps(arguments or {}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Boundary:
    """What a state is good for: this request (server, method, target, arguments) by this caller."""

    server_id: str
    method: str
    target: str
    arguments: str  # arguments_digest(...)
    identity: Identity

    def claims(self) -> dict[str, str]:
        return {
            "s": self.server_id,
            "m": self.method,
            "t": self.target,
            "a": self.arguments,
            "i": fingerprint(self.identity),
        }


@dataclass(frozen=True, slots=True)
class Sealed:
    """What an accepted state says: its kind, the payload, and the round it was issued in."""

    kind: Kind
    payload: str
    round: int
    approval: str = ""  # the approval mark, for a server's state issued after an approval


class RequestStates:
    def __init__(self, key: bytes, *, ttl: float, clock: Callable[[], float] = time.time) -> None:
        self._key = key
        self._ttl = ttl
        self._clock = clock  # wall clock: another replica may check what this one issued

    def seal(
        self, boundary: Boundary, kind: Kind, payload: str, round: int = 0, *, approval: str = ""
    ) -> str:
        claims: dict[str, Any] = {
            **boundary.claims(),
            "k": kind,
            "p": payload,
            "r": round,
            "e": int(self._clock() + self._ttl),
        }
        if approval:
            claims["c"] = approval
        body = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=").decode()
        return f"{body}.{self._mac(body)}"

    def open(self, state: object, boundary: Boundary) -> Sealed:
        """The claims of a state this key sealed for ``boundary``, not yet expired.

        Raises:
            InvalidRequestState: anything else (forged, altered, another request's or caller's,
                expired, not a string); the client is not told which.
        """
        if not isinstance(state, str) or len(state) > _MAX_STATE:
            raise InvalidRequestState()
        body, _, mac = state.partition(".")
        if not body or not hmac.compare_digest(mac, self._mac(body)):
            raise InvalidRequestState()
        try:
            claims = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (binascii.Error, ValueError):
            raise InvalidRequestState() from None
        if not isinstance(claims, dict) or any(claims.get(k) != v for k, v in boundary.claims().items()):
            raise InvalidRequestState()
        kind, payload, round_, expiry = claims.get("k"), claims.get("p"), claims.get("r"), claims.get("e")
        approval = claims.get("c", "")
        if (
            kind not in ("server", "parked", "confirm", "signin")
            or not isinstance(payload, str)
            or not isinstance(round_, int)
            or not isinstance(expiry, int)
            or not isinstance(approval, str)
            or expiry < self._clock()
        ):
            raise InvalidRequestState()
        return Sealed(kind, payload, round_, approval)

    def approved(self, state: str, boundary: Boundary, approval: str) -> str:
        """``state`` (a server's, sealed here for ``boundary``) sealed again with ``approval``'s
        mark; any other state is returned as it is.

        Raises:
            InvalidRequestState: ``state`` is not one this key sealed for ``boundary``.
        """
        sealed = self.open(state, boundary)
        if sealed.kind != "server":
            return state
        return self.seal(boundary, "server", sealed.payload, sealed.round, approval=approval)

    def _mac(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()[:_MAC_BYTES]
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
