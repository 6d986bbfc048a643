"""The in-process limit store: one bounded map from bucket key to TAT, for a single replica.

Each replica counts on its own, so N replicas with this backend admit up to N times a limit; use
the Redis backend to share one budget. The map is an ``OrderedDict`` in least-recently-used order
with a heap of expiry times beside it:

* an entry expires exactly when its bucket is full again (at its TAT), because from then on a
  missing entry and the stored one give the same answers, so idle buckets cost nothing: every
  check first drops the entries whose TAT has passed (the heap's head, amortised O(log n));
* at most ``maxsize`` entries live at once; past that the least recently used bucket is dropped,
  which makes that bucket full again (permissive, never stricter than configured).

A check is on every limited call's path: this costs about a third of what ``cachetools``'
``TLRUCache`` did here (``benchmarks/bench_ratelimit.py``: ~18 → ~6 µs per one-limit check).
The clock is injected (``time.monotonic`` by default); ``now`` given to :meth:`MemoryBackend.hit`
must be on the same clock. No await happens between reading and writing the buckets, so a call on
the event loop is atomic without a lock.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from proxy.policy.gcra import LimitCheck, LimitOutcome, evaluate

__all__ = ["DEFAULT_MAXSIZE", "MemoryBackend"]

DEFAULT_MAXSIZE = 100_000  # about 30 MB of buckets at most (measured: ~300 bytes each)


class MemoryBackend:
    """A :class:`~proxy.ratelimit.LimitBackend` keeping buckets in this process."""

    def __init__(
        self, *, maxsize: int = DEFAULT_MAXSIZE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1 (got {maxsize})")
        self._clock = clock
        self._maxsize = maxsize
        self._tats: OrderedDict[str, float] = OrderedDict()  # least recently used first
        # (TAT, key) for every TAT stored; one rewritten or dropped since is skipped when popped.
        self._expiry: list[tuple[float, str]] = []

    def __len__(self) -> int:
        """Buckets stored (expired ones are dropped by the next check)."""
        return len(self._tats)

    @property
    def maxsize(self) -> float:
        return self._maxsize

    def tat(self, key: str) -> float | None:
        """The stored TAT of a bucket (``None``: fresh, or expired)."""
        tat = self._tats.get(key)
        return None if tat is None or tat <= self._clock() else tat

    async def buckets(self, limit: int = 1000) -> list[tuple[str, float]]:
        """Up to ``limit`` live buckets: (bucket key, seconds until it is full again), for the
        admin API."""
        now = self._clock()
        found: list[tuple[str, float]] = []
        for key, tat in list(self._tats.items())[:limit]:
            if tat > now:
                found.append((key, tat - now))
        return found

    def hit_now(self, checks: Sequence[LimitCheck], now: float | None = None) -> LimitOutcome:
        """:meth:`hit` without the coroutine, for callers that are not async."""
        if now is None:
            now = self._clock()
        tats, expiry = self._tats, self._expiry
        while expiry and expiry[0][0] <= now:
            tat, key = heapq.heappop(expiry)
            if tats.get(key) == tat:
                del tats[key]
        for check in checks:  # a read counts as a use, as in an LRU cache
            if check.key in tats:
                tats.move_to_end(check.key)
        outcome, commit = evaluate(checks, tats, now)
        for key, tat in commit.items():
            tats[key] = tat
            tats.move_to_end(key)
            heapq.heappush(expiry, (tat, key))
        while len(tats) > self._maxsize:
            tats.popitem(last=False)
        if len(expiry) > 2 * len(tats) + 1024:  # mostly entries rewritten since: start afresh
            self._expiry = [(tat, key) for key, tat in tats.items()]
            heapq.heapify(self._expiry)
        return outcome

    async def hit(self, checks: Sequence[LimitCheck], now: float | None = None) -> LimitOutcome:
        """Spend one request from every bucket in ``checks`` if all have one; else spend nothing.

        Raises:
            ValueError: a check has a non-positive interval or a burst below 1.
        """
        return self.hit_now(checks, now)

    async def aclose(self) -> None:
        """Nothing to release; here so every backend closes the same way."""
