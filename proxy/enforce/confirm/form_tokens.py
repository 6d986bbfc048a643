"""The approval page's form tokens: what a browser must send back to be heard. Pure.

The page is two forms. The first (shown to whoever opens the link) takes the approver's
credential; its token, :func:`page_token`, only says that the post comes from a view of this
approval's page. The second is shown only to a credential that authenticated and holds an
approver role; its token, :func:`decision_token`, is the decision's authority:

* bound to the approval (its id is in the signed material), so it decides nothing else;
* bound to the approver's identity (key and name, both signed), so the decision is recorded as
  theirs and nobody else's;
* short-lived (:data:`DECISION_TOKEN_SECONDS`), so a token left in a page does not stay a
  capability.

Signed with HMAC-SHA256 under the page's own key (derived from the shared secret, so every
replica reads every other's tokens). Whoever can open the link gets a page token, never a
decision token: that takes an approver's credential.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import Final

import orjson

__all__ = ["DECISION_TOKEN_SECONDS", "Approver", "decision_token", "page_token", "read_decision_token"]

DECISION_TOKEN_SECONDS: Final = 300  # how long a signed-in approver has to decide
_MAX_TOKEN: Final = 2048


@dataclass(frozen=True, slots=True)
class Approver:
    """Who a decision token speaks for."""

    key: tuple[str, str, str]  # the identity's key (source, issuer, subject)
    name: str


def _mac(key: bytes, purpose: str, material: bytes) -> str:
    return hmac.new(key, purpose.encode() + b"\0" + material, hashlib.sha256).hexdigest()


def page_token(key: bytes, approval_id: str) -> str:
    """The first form's token: a view of this approval's page (anybody with the link has it)."""
    return _mac(key, "approval-page", approval_id.encode())


def decision_token(key: bytes, approval_id: str, approver: Approver, *, now: float) -> str:
    """The second form's token: ``approver`` may decide ``approval_id`` for a few minutes."""
    body = orjson.dumps([approval_id, list(approver.key), approver.name, int(now) + DECISION_TOKEN_SECONDS])
    encoded = base64.urlsafe_b64encode(body).decode().rstrip("=")
    return f"{encoded}.{_mac(key, 'approval-decision', body)}"


def read_decision_token(key: bytes, approval_id: str, token: str, *, now: float) -> Approver | None:
    """Who ``token`` lets decide ``approval_id`` now; None when it is forged, altered, for
    another approval, expired or malformed (never raises: a page says "out of date")."""
    if len(token) > _MAX_TOKEN or token.count(".") != 1:
        return None
    encoded, mac = token.split(".")
    try:
        body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError):
        return None
    if not hmac.compare_digest(_mac(key, "approval-decision", body), mac):
        return None
    try:
        signed_id, identity_key, name, expires = orjson.loads(body)
    except (orjson.JSONDecodeError, ValueError, TypeError):
        return None
    if signed_id != approval_id or not isinstance(expires, int) or now > expires:
        return None
    if not isinstance(name, str) or not isinstance(identity_key, list) or len(identity_key) != 3:
        return None
    source, issuer, subject = (str(part) for part in identity_key)
    return Approver((source, issuer, subject), name)
