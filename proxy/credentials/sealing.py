"""Sealing stored credentials: AES-256-GCM, each entry bound to whose it is.

The associated data is the entry's kind, server and holder, so a sealed value copied to another
identity's entry (or another server's) does not open: whoever can write the store still cannot
hand bob alice's token without the key. A value sealed under another key does not open either
(:class:`Unsealable`). Pure but for the random nonce.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Final

import orjson

from proxy.config.credentials import KEY_BYTES

__all__ = ["Sealer", "Unsealable", "bound_to", "new_key"]

_NONCE: Final = 12


class Unsealable(Exception):
    """A sealed value that does not open with the key: another key sealed it, or it was moved
    to another entry, or altered."""


def new_key() -> str:
    """A fresh key, as ``credentials.key`` takes it (urlsafe base64 of 32 random bytes)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def bound_to(kind: str, server_id: str, holder: tuple[str, str, str]) -> bytes:
    """The associated data of one entry: what it is, for which server, whose."""
    return orjson.dumps([kind, server_id, *holder])


class Sealer:
    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a credential key is {KEY_BYTES} bytes")
        # cryptography loads with the first store opened, not with every Manifold.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)

    def seal(self, value: str, bound: bytes) -> str:
        nonce = os.urandom(_NONCE)
        return base64.urlsafe_b64encode(nonce + self._aead.encrypt(nonce, value.encode(), bound)).decode()

    def open(self, sealed: str, bound: bytes) -> str:
        """The value sealed in ``sealed``.

        Raises:
            Unsealable: it does not open with this key for this entry.
        """
        from cryptography.exceptions import InvalidTag

        try:
            raw = base64.urlsafe_b64decode(sealed.encode("ascii"))
            if len(raw) <= _NONCE:
                raise Unsealable("too short")
            return self._aead.decrypt(raw[:_NONCE], raw[_NONCE:], bound).decode()
        except (InvalidTag, binascii.Error, ValueError, UnicodeError) as exc:
            raise Unsealable(type(exc).__name__) from None
