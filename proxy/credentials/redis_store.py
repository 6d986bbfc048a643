"""Sealed credentials in Redis, shared by every replica (:mod:`proxy.credentials.store`).

One string per entry under ``<key_prefix><kind>:<server>:<sha256 of the holder>``: the holder's
key ``(source, issuer, subject)`` may hold any character, so it is hashed into the Redis key and
kept, with the sealed value, in the JSON string itself (``manifold credentials list`` reads it).
The sealed value is bound to its entry, so moving it to another key does not open it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import anyio
import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from proxy.config.credentials import CredentialStoreSettings
from proxy.core.redaction import redact_url
from proxy.credentials.sealing import Sealer, bound_to
from proxy.credentials.store import Stored, StoreError, check_value
from proxy.policy.model import IdentityKey

__all__ = ["RedisStore"]


class RedisStore:
    def __init__(self, url: str, sealer: Sealer, settings: CredentialStoreSettings) -> None:
        self._url = url
        self._client: Redis = Redis.from_url(
            url, socket_timeout=settings.timeout, socket_connect_timeout=settings.timeout
        )
        self._sealer = sealer
        self._settings = settings
        self._prefix = settings.key_prefix
        self._timeout = settings.timeout

    def _key(self, kind: str, server_id: str, holder: IdentityKey) -> str:
        digest = hashlib.sha256(orjson.dumps(list(holder))).hexdigest()
        return f"{self._prefix}{kind}:{server_id}:{digest}"

    async def _ask(self, what: str, call: Any) -> Any:
        try:
            with anyio.fail_after(self._timeout):
                return await call
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreError(
                f"cannot {what} the credential store at {redact_url(self._url)}: {type(exc).__name__}"
            ) from None

    async def get(self, kind: str, server_id: str, holder: IdentityKey) -> str | None:
        raw = await self._ask("read", self._client.get(self._key(kind, server_id, holder)))
        if raw is None:
            return None
        row = _row(raw)
        if row is None or tuple(row["holder"]) != holder:
            raise StoreError(f"a credential entry for server {server_id!r} is malformed")
        value: str = self._sealer.open(row["sealed"], bound_to(kind, server_id, holder))
        return value

    async def put(self, kind: str, server_id: str, holder: IdentityKey, value: str) -> None:
        check_value(value, holder, max_bytes=self._settings.max_secret_bytes)
        sealed = self._sealer.seal(value, bound_to(kind, server_id, holder))
        row = orjson.dumps({"kind": kind, "server": server_id, "holder": list(holder), "sealed": sealed})
        await self._ask("write", self._client.set(self._key(kind, server_id, holder), row))

    async def delete(self, kind: str, server_id: str, holder: IdentityKey) -> bool:
        removed = await self._ask("write", self._client.delete(self._key(kind, server_id, holder)))
        return bool(removed)

    async def entries(self) -> list[Stored]:
        async def scan() -> list[Stored]:
            found: list[Stored] = []
            async for key in self._client.scan_iter(match=f"{self._prefix}*", count=500):
                raw = await self._client.get(key)
                row = None if raw is None else _row(raw)
                if row is not None:
                    found.append(
                        Stored(
                            row["kind"], row["server"], (row["holder"][0], row["holder"][1], row["holder"][2])
                        )
                    )
                if len(found) >= self._settings.max_entries:
                    break
            return found

        try:
            return await scan()
        except (RedisError, OSError) as exc:
            raise StoreError(
                f"cannot read the credential store at {redact_url(self._url)}: {type(exc).__name__}"
            ) from None

    async def aclose(self) -> None:
        await self._client.aclose()


def _row(raw: bytes | str) -> dict[str, Any] | None:
    try:
        row = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    holder = row.get("holder") if isinstance(row, dict) else None
    if not (
        isinstance(holder, list)
        and len(holder) == 3
        and all(isinstance(part, str) for part in holder)
        and all(isinstance(row.get(f), str) for f in ("kind", "server", "sealed"))
    ):
        return None
    found: dict[str, Any] = row
    return found
