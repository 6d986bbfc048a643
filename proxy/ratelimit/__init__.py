"""Rate limits per identity, server and tool: rules, the GCRA arithmetic, and where buckets live.

::

    rules.py    LimitRule, parse_limits, applicable, limit_checks      pure: which buckets a call spends
    gcra.py     check, evaluate, LimitCheck, LimitOutcome              pure: does the call conform
    memory.py   MemoryBackend                                          buckets in this process
    redis.py    RedisBackend                                           buckets shared through Redis

A call is checked against every limit that applies to it and must pass all of them; a denied call
spends nothing anywhere. Backends never raise to say no: :meth:`LimitBackend.hit` answers with a
:class:`LimitOutcome`, and a Redis failure becomes an outcome chosen by ``failure_mode``. The exact
semantics for operators are in ``policies/RATELIMITS.md``.

May import: config, policy (pinned in tests/test_architecture.py).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from proxy.config.ratelimit import RateLimitSettings
from proxy.policy.gcra import LimitCheck, LimitOutcome
from proxy.policy.limits import (
    LimitMatch,
    LimitRule,
    Rate,
    applicable,
    limit_checks,
    parse_limits,
)
from proxy.ratelimit.memory import MemoryBackend

__all__ = [
    "LimitBackend",
    "LimitCheck",
    "LimitMatch",
    "LimitOutcome",
    "LimitRule",
    "MemoryBackend",
    "Rate",
    "applicable",
    "denial_message",
    "limit_checks",
    "make_backend",
    "open_backend",
    "parse_limits",
    "retry_meta",
]


class LimitBackend(Protocol):
    """Where buckets live. ``hit`` spends one request from every bucket of a call, or none."""

    async def hit(self, checks: Sequence[LimitCheck], now: float | None = None) -> LimitOutcome: ...

    async def buckets(self, limit: int = 1000) -> list[tuple[str, float]]:
        """Up to ``limit`` live buckets: (bucket key, seconds until it is full again)."""
        ...

    async def aclose(self) -> None: ...


def make_backend(
    settings: RateLimitSettings, *, on_backend_error: Callable[[BaseException], None] | None = None
) -> LimitBackend:
    """The backend ``settings`` ask for; the caller closes it with ``aclose``. No I/O here."""
    if settings.backend == "redis":
        from proxy.ratelimit.redis import RedisBackend  # the redis client is imported only if used

        return RedisBackend.from_settings(settings, on_backend_error=on_backend_error)
    return MemoryBackend()


@asynccontextmanager
async def open_backend(
    settings: RateLimitSettings, *, on_backend_error: Callable[[BaseException], None] | None = None
) -> AsyncIterator[LimitBackend]:
    """The backend ``settings`` ask for, closed on exit.

    ``on_backend_error`` is called once per failed Redis call (for a metrics counter); the memory
    backend never fails. Connecting to Redis is lazy: an unreachable Redis is reported by the
    first calls, as ``failure_mode`` says, not here.
    """
    backend = make_backend(settings, on_backend_error=on_backend_error)
    try:
        yield backend
    finally:
        await backend.aclose()


def denial_message(rule: LimitRule | None, retry_after: float) -> str:
    """What a client reads when a limit (``None``: an unreachable limit store) denies a call.

    The wait is rounded up to a tenth of a second, so waiting as told is enough.
    """
    wait = f"retry in {_round_up(retry_after, 1):.1f} s" if math.isfinite(retry_after) else "do not retry"
    if rule is None:
        return f"Rate limiting is unavailable right now; {wait}."
    return f"Rate limit {rule.id!r} exceeded ({rule.rate}, burst {rule.burst}); {wait}."


def retry_meta(retry_after: float) -> dict[str, float]:
    """For a denied tool result's ``_meta``: the wait in seconds, rounded up to the millisecond.

    Empty when no wait helps (a request larger than its burst).
    """
    return {"retryAfterSeconds": _round_up(retry_after, 3)} if math.isfinite(retry_after) else {}


def _round_up(seconds: float, digits: int) -> float:
    # Up, so a client waiting exactly the advertised time is not denied again. The allowance keeps
    # float noise (2.3000000000000003) from adding a digit; it is far below gcra.SLACK.
    scale = 10.0**digits
    return math.ceil(max(seconds, 0.0) * scale - 1e-9) / scale
