"""API keys: making them, storing them hashed, and finding the identity a presented key proves.

Keys are random (``mfd_`` and 43 characters of base64url: 256 bits), not passwords, so a single
SHA-256 is the right way to store them, as GitHub and Stripe do with their tokens: a slow hash
defends low-entropy secrets against guessing, and nobody can guess 256 bits, while every request
would pay for the slowness. The ``mfd_`` prefix lets secret scanners recognise a leaked key.

Looking a key up is one SHA-256 of the presented key and one dict lookup by digest, with no
``hmac.compare_digest``, on purpose. Constant-time comparison matters when the compared value is
the secret, because a timing leak then reveals it byte by byte. Here the dict compares digests:
the most its timing can leak is how a stored *digest* begins, and knowing part of a SHA-256
output does not help find an input that produces it. Comparing every stored digest in constant
time would make each request cost O(number of keys) and protect nothing more.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from typing import Final

from proxy.config.auth import ApiKey
from proxy.core.errors import ConfigError
from proxy.policy.model import Identity

__all__ = ["KEY_PREFIX", "MIN_ENV_KEY_LENGTH", "ApiKeyTable", "digest", "generate_api_key", "stored_form"]

KEY_PREFIX: Final = "mfd_"
# A key read from the environment is chosen by a person; this keeps out "password" and friends.
MIN_ENV_KEY_LENGTH: Final = 20


def digest(credential: str) -> bytes:
    """The SHA-256 of a presented credential: the API key lookup key and the token cache key."""
    return hashlib.sha256(credential.encode()).digest()


def stored_form(key: str) -> str:
    """How ``key`` is written in the config: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def generate_api_key() -> tuple[str, str]:
    """A new random API key and its stored form, for ``manifold keygen``.

    Give the key to the client once; put only the stored form in the config.
    """
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, stored_form(key)


class ApiKeyTable:
    """The configured keys, by digest, each with the identity it proves."""

    def __init__(self, identities: Mapping[bytes, Identity]) -> None:
        self._identities = dict(identities)

    @classmethod
    def from_settings(cls, api_keys: Iterable[ApiKey], environ: Mapping[str, str]) -> ApiKeyTable:
        """Resolve ``env:`` keys from ``environ`` and index every key by its digest.

        Raises:
            ConfigError: an ``env:`` variable is unset, too short, or holds the same key as
                another entry; the message names the entry, never the key.
        """
        identities: dict[bytes, Identity] = {}
        owners: dict[bytes, int] = {}
        problems: list[str] = []
        for index, api_key in enumerate(api_keys):
            where = f"auth.api_keys[{index}].key"
            kind, _, rest = api_key.key.partition(":")
            if kind == "sha256":
                key_digest = bytes.fromhex(rest)
            else:
                value = environ.get(rest)
                if value is None:
                    problems.append(f"{where}: environment variable {rest!r} is not set")
                    continue
                if len(value.strip()) < MIN_ENV_KEY_LENGTH:
                    problems.append(
                        f"{where}: the key in {rest!r} is shorter than {MIN_ENV_KEY_LENGTH} characters "
                        "(`manifold keygen` makes a random one)"
                    )
                    continue
                key_digest = digest(value.strip())
            if key_digest in owners:
                problems.append(f"{where}: the same key as auth.api_keys[{owners[key_digest]}].key")
                continue
            owners[key_digest] = index
            # Keyed ("api_key", "", name): names are unique among keys (AuthSettings checks it).
            identities[key_digest] = Identity(api_key.name, frozenset(api_key.roles), "api_key")
        if problems:
            raise ConfigError("\n".join(problems))
        return cls(identities)

    def __len__(self) -> int:
        return len(self._identities)

    def lookup(self, key_digest: bytes) -> Identity | None:
        """The identity whose key has this digest (see :func:`digest`), if any."""
        return self._identities.get(key_digest)
