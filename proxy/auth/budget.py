"""How many introspection requests unknown opaque tokens may cost: per client address and in total.

Every distinct opaque token Manifold has not seen costs one request to the authorization server
(RFC 7662), so a client sending made-up tokens would otherwise make Manifold a load generator
against the identity provider. Two token buckets bound that: one per client address
(``per_client`` requests a minute, refilled evenly, the whole minute's worth available at once)
and one for everyone (``total`` a second, likewise). A token already answered (the introspection
cache, refusals included) costs nothing and spends nothing.

Pure: a clock is passed in; the per-address buckets are bounded (least recently used first out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from cachetools import LRUCache

__all__ = ["ADDRESSES_AT_MOST", "Budget", "Spent"]

ADDRESSES_AT_MOST: Final = 10_000  # client addresses whose bucket is remembered


class Spent(StrEnum):
    """What a request for one introspection got."""

    OK = "ok"
    CLIENT = "client"  # this client address has spent its share: its own doing (429)
    TOTAL = "total"  # everyone together has: not this client's fault (503)


@dataclass(slots=True)
class _Bucket:
    level: float  # requests available now
    at: float  # when level was computed

    def take(self, now: float, capacity: float, per_second: float) -> bool:
        self.level = min(capacity, self.level + (now - self.at) * per_second)
        self.at = now
        if self.level < 1.0:
            return False
        self.level -= 1.0
        return True


class Budget:
    """Introspections allowed: ``per_client`` a minute per address, ``total`` a second overall."""

    def __init__(self, *, per_client: int, total: int, clock: Callable[[], float]) -> None:
        self._per_client = float(per_client)
        self._total = float(total)
        self._clock = clock
        self._everyone = _Bucket(self._total, clock())
        self._clients: LRUCache[str, _Bucket] = LRUCache(maxsize=ADDRESSES_AT_MOST)

    def spend(self, client: str | None) -> Spent:
        """Spend one introspection for ``client`` (its address; None: unknown, the total only)."""
        now = self._clock()
        bucket = None
        if client is not None:
            bucket = self._clients.get(client)
            if bucket is None:
                bucket = self._clients[client] = _Bucket(self._per_client, now)
            # Refilled (and checked) before the total is spent, but spent only when both allow.
            bucket.level = min(self._per_client, bucket.level + (now - bucket.at) * self._per_client / 60.0)
            bucket.at = now
            if bucket.level < 1.0:
                return Spent.CLIENT
        if not self._everyone.take(now, self._total, self._total):
            return Spent.TOTAL
        if bucket is not None:
            bucket.level -= 1.0
        return Spent.OK
