"""Keys and fingerprints shared by everything Manifold signs (session ids, cursors, request states).

One shared secret (``sessions.secret``, or a random one per process) signs several kinds of
token. Each kind gets its own key, derived here, so a token of one kind can never pass for
another (a cursor for a session id, say). Identities are named in signed tokens by a
fingerprint, never in clear. Pure: bytes and identities in, bytes and text out.
"""

from __future__ import annotations

import hashlib
import hmac

import orjson

from proxy.core.identity import Identity

__all__ = ["derive_key", "fingerprint"]


def derive_key(secret: bytes, purpose: str) -> bytes:
    """One key per purpose from the shared secret, so a cursor can never pass for a session id."""
    return hmac.new(secret, purpose.encode(), hashlib.sha256).digest()


def fingerprint(identity: Identity) -> str:
    """A short hash naming an identity in signed tokens: its key (source, issuer, subject), and
    the name and roles it acts with.

    The key tells principals apart (one ``alice`` per issuer); name and roles are in too, so a
    token issued to a principal with other roles is not taken as this one's. The fields are
    encoded as a JSON list, so no choice of names can make two identities' material equal."""
    material = orjson.dumps([*identity.key, identity.name, sorted(identity.roles)])
    return hashlib.sha256(material).hexdigest()[:32]
