"""Console sign-ins kept in Redis, so a sign-in on one replica holds on every other.

Used when the admin API shares its state through Redis (``admin.redis_url``) and the replicas
share ``sessions.secret``, from which the keys below are derived. Each sign-in is one Redis
string under ``manifold:console:signin:<HMAC of its id>``:

* Sealed: the value (credential, form token, start time) is AES-256-GCM sealed and bound to
  its own key, so whoever reads Redis learns no credential and no cookie (the key is an HMAC
  of the id, not the id), and a value moved to another key does not open.
* Expiring: Redis ends the record after ``idle`` seconds unused (each use sets the expiry
  again, never past the start plus ``lifetime``).
* Bounded: the sorted set ``manifold:console:signins`` lists the records by start; past
  ``limit`` the oldest go first, and entries past ``lifetime`` are dropped at each sign-in.

A Redis failure signs nobody in (a read answers None; a sign-in raises :class:`Unavailable`,
which the sign-in page shows) and never ends Manifold.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import TYPE_CHECKING, Final

import anyio
import orjson

from proxy.admin.replicas import redis_failures
from proxy.console.signins import MAX_ID, MAX_SIGNINS, SignIn, new_id
from proxy.core.keys import derive_key
from proxy.credentials.sealing import Sealer, Unsealable

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["INDEX", "PREFIX", "SharedSignIns", "Unavailable"]

logger = logging.getLogger("proxy.console.shared_signins")

PREFIX: Final = "manifold:console:signin:"
INDEX: Final = "manifold:console:signins"
_TIMEOUT: Final = 2.0  # seconds one Redis round trip may take


class Unavailable(Exception):
    """Redis could not be reached: nobody can sign in now (the message names the failure)."""


class SharedSignIns:
    """The console's sign-ins in Redis, sealed with keys derived from ``secret``."""

    def __init__(
        self,
        client: Redis,
        secret: bytes,
        *,
        idle: float = 1800.0,
        lifetime: float = 12 * 3600.0,
        limit: int = MAX_SIGNINS,
    ) -> None:
        self._client = client
        self._naming = derive_key(secret, "console-sign-in-name")
        self._sealer = Sealer(derive_key(secret, "console-sign-in-seal"))
        self._idle, self._lifetime, self._limit = idle, lifetime, limit

    def _key(self, sign_in_id: str) -> str:
        return PREFIX + hmac.new(self._naming, sign_in_id.encode(), hashlib.sha256).hexdigest()

    async def start(self, credential: str, *, now: float) -> tuple[str, SignIn]:
        """A new sign-in for ``credential``, kept in Redis.

        Raises:
            Unavailable: Redis could not be reached; nobody was signed in.
        """
        sign_in_id = new_id()
        record = SignIn(credential, new_id(), now, now)
        key = self._key(sign_in_id)
        sealed = self._sealer.seal(
            orjson.dumps({"credential": credential, "csrf": record.csrf, "started": now}).decode(),
            key.encode(),
        )
        try:
            with anyio.fail_after(_TIMEOUT):
                async with self._client.pipeline(transaction=True) as pipe:
                    pipe.set(key, sealed, px=_millis(self._idle))
                    pipe.zadd(INDEX, {key: now})
                    pipe.zremrangebyscore(INDEX, "-inf", now - self._lifetime)
                    pipe.zcard(INDEX)
                    *_, count = await pipe.execute()
                if int(count) > self._limit:
                    oldest: list[tuple[bytes, float]] = await self._client.zpopmin(  # type: ignore[assignment]
                        INDEX, int(count) - self._limit
                    )
                    if gone := [member for member, _ in oldest]:
                        await self._client.delete(*gone)
        except redis_failures() as exc:
            logger.error("console sign-in: Redis failed (%s)", type(exc).__name__)
            raise Unavailable(type(exc).__name__) from None
        return sign_in_id, record

    async def get(self, sign_in_id: str | None, *, now: float) -> SignIn | None:
        """The live sign-in ``sign_in_id`` names (its expiry set again), or None."""
        if not sign_in_id or len(sign_in_id) > MAX_ID:
            return None
        key = self._key(sign_in_id)
        try:
            with anyio.fail_after(_TIMEOUT):
                sealed = await self._client.get(key)
                if sealed is None:
                    return None
                record = self._opened(key, sealed, now)
                left = self._lifetime - (now - record.started) if record is not None else 0.0
                if record is None or left <= 0:
                    await self._forget(key)
                    return None
                await self._client.pexpire(key, _millis(min(self._idle, left)))
        except redis_failures() as exc:
            logger.error(
                "console sign-in: Redis failed (%s); signed out until it answers", type(exc).__name__
            )
            return None
        return record

    async def end(self, sign_in_id: str | None) -> None:
        """Sign out everywhere (nothing when unknown or when Redis fails: the record expires)."""
        if not sign_in_id or len(sign_in_id) > MAX_ID:
            return
        try:
            with anyio.fail_after(_TIMEOUT):
                await self._forget(self._key(sign_in_id))
        except redis_failures() as exc:
            logger.error(
                "console sign-out: Redis failed (%s); the sign-in expires by itself", type(exc).__name__
            )

    async def _forget(self, key: str) -> None:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.zrem(INDEX, key)
            await pipe.execute()

    def _opened(self, key: str, sealed: bytes | str, now: float) -> SignIn | None:
        """The record sealed under ``key``, or None when it does not open or is not ours."""
        try:
            text = sealed.decode("ascii") if isinstance(sealed, bytes) else sealed
            value = orjson.loads(self._sealer.open(text, key.encode()))
        except (Unsealable, UnicodeError, orjson.JSONDecodeError):
            logger.warning("console sign-in: a stored record does not open (another key, or altered)")
            return None
        if not isinstance(value, dict):
            return None
        credential, csrf, started = value.get("credential"), value.get("csrf"), value.get("started")
        if (
            not isinstance(credential, str)
            or not isinstance(csrf, str)
            or not isinstance(started, float | int)
        ):
            return None
        return SignIn(credential, csrf, float(started), now)


def _millis(seconds: float) -> int:
    return max(1, int(seconds * 1000))
