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
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from proxy.ratelimit.gcra import LimitCheck, LimitOutcome
from proxy.ratelimit.memory import MemoryBackend
from proxy.ratelimit.rules import (
    LimitMatch,
    LimitRule,
    Rate,
    RateField,
    applicable,
    limit_checks,
    parse_limits,
)

__all__ = [
    "HttpFloodLimit",
    "LimitBackend",
    "LimitCheck",
    "LimitMatch",
    "LimitOutcome",
    "LimitRule",
    "MemoryBackend",
    "Rate",
    "RateLimitSettings",
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

    async def aclose(self) -> None: ...


class HttpFloodLimit(BaseModel):
    """A per-address limit on HTTP requests, in process memory on each replica."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate: RateField
    burst: int = Field(default=1, ge=1, le=1_000_000)


class RateLimitSettings(BaseModel):
    """Where buckets live and what happens when that place cannot be reached."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["memory", "redis"] = "memory"
    # May carry a password: kept out of repr, and never echoed in an error.
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", repr=False)
    key_prefix: str = Field(default="manifold:rl:", min_length=1, max_length=200)
    failure_mode: Literal["fail_open", "fail_closed"] = "fail_open"
    timeout: float = Field(default=0.25, gt=0, le=10, allow_inf_nan=False)
    # Before any MCP parsing: requests per client address, answered 429 with Retry-After when
    # exceeded. None (the default) leaves it off; e.g. {rate: 50/second, burst: 100}.
    http: HttpFloodLimit | None = None

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str) -> str:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return url


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
