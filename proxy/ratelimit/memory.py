"""The in-process limit store: one bounded map from bucket key to TAT, for a single replica.

Each replica counts on its own, so N replicas with this backend admit up to N times a limit; use
the Redis backend to share one budget. The map is a ``cachetools.TLRUCache``:

* an entry expires exactly when its bucket is full again (at its TAT), because from then on a
  missing entry and the stored one give the same answers, so idle buckets cost nothing;
* at most ``maxsize`` entries live at once; past that the least recently used bucket is dropped,
  which makes that bucket full again (permissive, never stricter than configured).

The clock is injected (``time.monotonic`` by default); ``now`` given to :meth:`MemoryBackend.hit`
must be on the same clock. No await happens between reading and writing the buckets, so a call on
the event loop is atomic without a lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from cachetools import TLRUCache

from proxy.policy.gcra import LimitCheck, LimitOutcome, evaluate

__all__ = ["DEFAULT_MAXSIZE", "MemoryBackend"]

DEFAULT_MAXSIZE = 100_000  # about 30 MB of buckets at most (measured: ~300 bytes each)


def _expires_at_tat(_key: str, tat: float, _now: float) -> float:
    return tat


class MemoryBackend:
    """A :class:`~proxy.ratelimit.LimitBackend` keeping buckets in this process."""

    def __init__(
        self, *, maxsize: int = DEFAULT_MAXSIZE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1 (got {maxsize})")
        self._clock = clock
        self._tats: TLRUCache[str, float] = TLRUCache(maxsize, ttu=_expires_at_tat, timer=clock)

    def __len__(self) -> int:
        """Buckets stored, counting ones that expired but were not yet swept out."""
        return len(self._tats)

    @property
    def maxsize(self) -> float:
        return self._tats.maxsize

    def tat(self, key: str) -> float | None:
        """The stored TAT of a bucket (``None``: fresh, or expired)."""
        return self._tats.get(key)

    async def buckets(self, limit: int = 1000) -> list[tuple[str, float]]:
        """Up to ``limit`` live buckets: (bucket key, seconds until it is full again), for the
        admin API."""
        now = self._clock()
        found: list[tuple[str, float]] = []
        for key in list(self._tats)[:limit]:
            tat = self._tats.get(key)
            if tat is not None and tat > now:
                found.append((key, tat - now))
        return found

    def hit_now(self, checks: Sequence[LimitCheck], now: float | None = None) -> LimitOutcome:
        """:meth:`hit` without the coroutine, for callers that are not async."""
        if now is None:
            now = self._clock()
        tats = self._tats
        outcome, commit = evaluate(checks, {check.key: tats.get(check.key) for check in checks}, now)
        for key, tat in commit.items():
            tats[key] = tat
        return outcome

    async def hit(self, checks: Sequence[LimitCheck], now: float | None = None) -> LimitOutcome:
        """Spend one request from every bucket in ``checks`` if all have one; else spend nothing.

        Raises:
            ValueError: a check has a non-positive interval or a burst below 1.
        """
        return self.hit_now(checks, now)

    async def aclose(self) -> None:
        """Nothing to release; here so every backend closes the same way."""
