"""Manifold's own recent measurements, kept small for the admin API (:mod:`proxy.admin`): each
server's last tool calls (when, ok or not, how long) and the last refusals by a limit.

Long-term numbers are Prometheus's (:mod:`proxy.observe.metrics`); these answer "what is this
server doing right now" without a Prometheus. Each ring is a bounded ``deque``: recording one
call is one append (on the call path), and the summaries are computed only when asked.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

__all__ = ["CALLS_KEPT", "REFUSALS_KEPT", "CallStats", "RecentCalls", "RecentRefusals", "Refusal"]

CALLS_KEPT: Final = 1024  # per server: the last this many calls
REFUSALS_KEPT: Final = 256  # the last this many refusals by a limit
_MAX_SERVERS: Final = 10_000  # server ids are configured, so bounded anyway; "unknown" is one of them


@dataclass(frozen=True, slots=True)
class CallStats:
    """One server's calls over the last ``window`` seconds (of those the ring still holds)."""

    calls: int
    errors: int
    per_second: float
    error_rate: float  # errors / calls, 0 with no calls
    p50_ms: float | None
    p99_ms: float | None
    series: tuple[int, ...]  # calls per slice of the window, oldest first (for a small chart)


def _quantile(ordered: list[float], q: float) -> float:
    """The nearest-rank quantile of an ordered, non-empty list."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class RecentCalls:
    """The last :data:`CALLS_KEPT` tool calls of each server, on the monotonic clock."""

    def __init__(self, kept: int = CALLS_KEPT, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._kept = kept
        self._clock = clock
        self._rings: dict[str, deque[tuple[float, bool, float]]] = {}

    def record(self, server: str, ok: bool, seconds: float) -> None:
        ring = self._rings.get(server)
        if ring is None:
            if len(self._rings) >= _MAX_SERVERS:
                return
            ring = self._rings[server] = deque(maxlen=self._kept)
        ring.append((self._clock(), ok, seconds))

    def servers(self) -> Iterator[str]:
        return iter(list(self._rings))

    def stats(self, server: str, window: float = 60.0, slices: int = 30) -> CallStats:
        """``server``'s calls in the last ``window`` seconds, with ``slices`` counts for a chart."""
        now = self._clock()
        since = now - window
        recent = [entry for entry in self._rings.get(server, ()) if entry[0] >= since]
        errors = sum(1 for _, ok, _ in recent if not ok)
        ordered = sorted(seconds for _, _, seconds in recent)
        series = [0] * slices
        for at, _, _ in recent:
            series[min(slices - 1, int((at - since) / window * slices))] += 1
        return CallStats(
            calls=len(recent),
            errors=errors,
            per_second=len(recent) / window,
            error_rate=errors / len(recent) if recent else 0.0,
            p50_ms=_quantile(ordered, 0.5) * 1000 if ordered else None,
            p99_ms=_quantile(ordered, 0.99) * 1000 if ordered else None,
            series=tuple(series),
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    at: float  # wall clock, seconds since the epoch
    limit: str  # the limits.<name> (or rate-limit word) that refused


class RecentRefusals:
    """The last :data:`REFUSALS_KEPT` refusals by a limit, newest last."""

    def __init__(self, kept: int = REFUSALS_KEPT, *, clock: Callable[[], float] = time.time) -> None:
        self._ring: deque[Refusal] = deque(maxlen=kept)
        self._clock = clock

    def record(self, limit: str) -> None:
        self._ring.append(Refusal(self._clock(), limit))

    def __iter__(self) -> Iterator[Refusal]:
        return iter(list(self._ring))
