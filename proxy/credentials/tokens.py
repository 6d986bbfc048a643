"""Tokens Manifold holds for a user at a server, sealed at rest, in memory or in Redis.

A :class:`TokenSet` is what an authorization server granted one identity for one server (the
``oauth`` mode's access and refresh tokens, or an ``exchange`` mode's exchanged token). It is
kept under ``(identity key, server id)`` in a :class:`Vault` (bytes by name, with a time to
live: :class:`MemoryVault` for one process, :class:`RedisVault` for replicas), always sealed
with AES-GCM under the configured key (:class:`Sealer`). The associated data of each seal is the
name it is kept under, so a sealed token copied to another identity's or server's slot (a
hostile Redis user, a restored backup) does not open there: it reads as no token.

The same vault keeps the pending sign-ins (:mod:`proxy.credentials.signin`), taken once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol

from cachetools import TLRUCache
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from redis.asyncio import Redis

from proxy.core.errors import ConfigError

__all__ = [
    "MemoryVault",
    "RedisVault",
    "Sealer",
    "TokenSet",
    "TokenStore",
    "Vault",
    "sealer_from_key",
    "slot",
]

_NONCE: Final = 12
_KEEP_REFRESHABLE: Final = 90 * 24 * 3600.0  # how long a token set with a refresh token is kept
_TAKE: Final = "local v = redis.call('GET', KEYS[1]); if v then redis.call('DEL', KEYS[1]) end; return v"


@dataclass(frozen=True, slots=True)
class TokenSet:
    """An access token for one server, on behalf of one identity; ``expires_at`` in seconds since
    the epoch (``None``: the server did not say)."""

    access_token: str
    expires_at: float | None = None
    refresh_token: str | None = None
    scope: str | None = None
    issuer: str | None = None  # the authorization server that granted it
    client_id: str | None = None  # Manifold's OAuth client it was granted to (revoked with it)

    def expired(self, now: float, *, margin: float = 30.0) -> bool:
        """Whether it is past (or within ``margin`` seconds of) its expiry."""
        return self.expires_at is not None and now >= self.expires_at - margin

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> TokenSet:
        data: Any = json.loads(raw)
        return cls(
            **{
                k: data.get(k)
                for k in ("access_token", "expires_at", "refresh_token", "scope", "issuer", "client_id")
            }
        )

    def __repr__(self) -> str:  # never the tokens themselves, in a log or a traceback
        return f"TokenSet(expires_at={self.expires_at!r}, refreshable={self.refresh_token is not None})"


class Sealer:
    """AES-256-GCM with a random nonce; the associated data binds a sealed value to its name."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ConfigError("the credentials key must be 32 bytes (base64 of 32 random bytes)")
        self._aead = AESGCM(key)

    def seal(self, plain: bytes, bound_to: str) -> bytes:
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, plain, bound_to.encode())

    def open(self, sealed: bytes, bound_to: str) -> bytes | None:
        """The plain value, or None if it was not sealed by this key for this name."""
        if len(sealed) <= _NONCE:
            return None
        try:
            return self._aead.decrypt(sealed[:_NONCE], sealed[_NONCE:], bound_to.encode())
        except InvalidTag:
            return None


def sealer_from_key(encoded: str) -> Sealer:
    """A :class:`Sealer` from the configured key: base64 (standard or URL-safe) of 32 bytes.

    Raises:
        ConfigError: not base64, or not 32 bytes.
    """
    text = encoded.strip()
    try:
        key = base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_") + "=" * (-len(text) % 4))
    except ValueError:
        raise ConfigError("the credentials key is not base64") from None
    return Sealer(key)


class Vault(Protocol):
    """Bytes by name, each with a time to live."""

    async def get(self, name: str) -> bytes | None: ...

    async def put(self, name: str, value: bytes, ttl: float) -> None: ...

    async def take(self, name: str) -> bytes | None:
        """Get and delete, atomically: of two takers, one gets it."""
        ...

    async def delete(self, name: str) -> None: ...

    async def names(self, prefix: str) -> Sequence[str]: ...


def _until(_name: str, item: tuple[bytes, float], _now: float) -> float:
    return item[1]


class MemoryVault:
    """The vault in this process: at most ``size`` values (the soonest to expire go first when
    full), each dropped when its time is up, read or not."""

    def __init__(self, *, size: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        self._items: TLRUCache[str, tuple[bytes, float]] = TLRUCache(maxsize=size, ttu=_until, timer=clock)
        self._clock = clock

    def __len__(self) -> int:
        self._items.expire()
        return len(self._items)

    def _live(self, name: str) -> bytes | None:
        item = self._items.get(name)
        return item[0] if item is not None else None

    async def get(self, name: str) -> bytes | None:
        return self._live(name)

    async def put(self, name: str, value: bytes, ttl: float) -> None:
        self._items.expire()  # the expired go on every write, not only when read
        self._items[name] = (value, self._clock() + ttl)

    async def take(self, name: str) -> bytes | None:
        value = self._live(name)
        self._items.pop(name, None)
        return value

    async def delete(self, name: str) -> None:
        self._items.pop(name, None)

    async def names(self, prefix: str) -> Sequence[str]:
        self._items.expire()
        return [name for name in list(self._items) if name.startswith(prefix)]


class RedisVault:
    """The vault in Redis (``<prefix>cred:<name>``), shared by every replica."""

    def __init__(self, client: Redis, *, key_prefix: str) -> None:
        self._redis = client
        self._prefix = f"{key_prefix}cred:"
        self._take = client.register_script(_TAKE)

    async def get(self, name: str) -> bytes | None:
        value = await self._redis.get(self._prefix + name)
        return _bytes(value)

    async def put(self, name: str, value: bytes, ttl: float) -> None:
        await self._redis.set(self._prefix + name, value, px=max(1, math.ceil(ttl * 1000)))

    async def take(self, name: str) -> bytes | None:
        return _bytes(await self._take(keys=[self._prefix + name]))

    async def delete(self, name: str) -> None:
        await self._redis.delete(self._prefix + name)

    async def names(self, prefix: str) -> Sequence[str]:
        found = [key async for key in self._redis.scan_iter(match=self._prefix + prefix + "*")]
        return [(k.decode() if isinstance(k, bytes) else str(k))[len(self._prefix) :] for k in found]

    async def aclose(self) -> None:
        await self._redis.aclose()


def _bytes(value: object) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)  # type: ignore[call-overload]


def slot(identity_key: Sequence[str], server_id: str) -> str:
    """The name a token set is kept under: a digest of the identity key (its parts may hold any
    character, and a name in Redis should not show who), then the server id."""
    digest = hashlib.sha256(json.dumps(list(identity_key)).encode()).hexdigest()[:32]
    return f"token:{server_id}:{digest}"


class TokenStore(Protocol):
    """Token sets by (identity key, server id)."""

    async def get(self, identity_key: Sequence[str], server_id: str) -> TokenSet | None: ...

    async def put(self, identity_key: Sequence[str], server_id: str, tokens: TokenSet) -> None: ...

    async def revoke(self, identity_key: Sequence[str], server_id: str) -> TokenSet | None:
        """Forget the identity's tokens for the server; what was kept (to revoke at its issuer)."""
        ...


class Pending:
    """Short-lived values by a secret name (a sign-in's ``state``), sealed, each taken once."""

    def __init__(self, vault: Vault, sealer: Sealer) -> None:
        self.vault = vault
        self.sealer = sealer

    @staticmethod
    def _name(secret: str) -> str:
        return "state:" + hashlib.sha256(secret.encode()).hexdigest()

    async def put(self, secret: str, value: bytes, ttl: float) -> None:
        name = self._name(secret)
        await self.vault.put(name, self.sealer.seal(value, name), ttl)

    async def get(self, secret: str) -> bytes | None:
        """The value, left in place (the sign-in's start page reads it; the callback takes it)."""
        name = self._name(secret)
        sealed = await self.vault.get(name)
        return self.sealer.open(sealed, name) if sealed is not None else None

    async def take(self, secret: str) -> bytes | None:
        """The value, once: a second take (a replay, on any replica) finds nothing."""
        name = self._name(secret)
        sealed = await self.vault.take(name)
        return self.sealer.open(sealed, name) if sealed is not None else None


class VaultTokens:
    """Token sets by (identity key, server id), sealed in a vault."""

    def __init__(self, vault: Vault, sealer: Sealer, *, clock: Callable[[], float] = time.time) -> None:
        self.vault = vault
        self.sealer = sealer
        self._clock = clock

    async def get(self, identity_key: Sequence[str], server_id: str) -> TokenSet | None:
        name = slot(identity_key, server_id)
        sealed = await self.vault.get(name)
        if sealed is None:
            return None
        plain = self.sealer.open(sealed, name)
        return TokenSet.decode(plain) if plain is not None else None

    async def put(self, identity_key: Sequence[str], server_id: str, tokens: TokenSet) -> None:
        name = slot(identity_key, server_id)
        if tokens.refresh_token is not None or tokens.expires_at is None:
            ttl = _KEEP_REFRESHABLE
        else:
            ttl = max(1.0, tokens.expires_at - self._clock())
        await self.vault.put(name, self.sealer.seal(tokens.encode(), name), ttl)

    async def revoke(self, identity_key: Sequence[str], server_id: str) -> TokenSet | None:
        """Forget the identity's tokens for the server; what was kept (to revoke at its issuer)."""
        name = slot(identity_key, server_id)
        sealed = await self.vault.take(name)
        plain = self.sealer.open(sealed, name) if sealed is not None else None
        return TokenSet.decode(plain) if plain is not None else None
