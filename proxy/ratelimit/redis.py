"""The shared limit store: buckets in Redis, so every Manifold replica spends from one budget.

One call is one round trip: a Lua script reads every bucket of the call, decides with the same
arithmetic as :func:`proxy.policy.gcra.evaluate` (operation for operation, so the answers are
bit-identical), and writes all of them or none. Redis runs a script atomically, so concurrent
replicas never interleave inside a call.

* Time is Redis' own (``TIME`` inside the script), so replicas with skewed clocks still agree.
  It is stored as seconds since ``EPOCH`` (not 1970) to keep more float precision.
* A bucket key is ``key_prefix`` + the rule's bucket key; it is written with ``PX`` set to the
  moment the bucket is full again, so idle buckets disappear by themselves.
* All keys of a call go to one script, so on Redis Cluster the prefix needs a hash tag
  (``{manifold:rl}:``) to keep them in one slot.

Failures (refused, reset, timed out, any Redis error) never raise out of :meth:`RedisBackend.hit`:
they are counted (``errors``, and the ``on_backend_error`` hook), logged at most once a minute, and
answered as ``failure_mode`` says. Every call is bounded by ``timeout`` in total. redis-py
reconnects on the next call, so recovery needs nothing from us.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import anyio
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from proxy.policy.gcra import LimitCheck, LimitOutcome

if TYPE_CHECKING:
    from proxy.config.ratelimit import RateLimitSettings

__all__ = ["EPOCH", "FAIL_CLOSED_RETRY_AFTER", "LUA", "RedisBackend"]

logger = logging.getLogger("proxy.ratelimit.redis")

EPOCH = 1_700_000_000  # Unix seconds; server time is stored relative to it
FAIL_CLOSED_RETRY_AFTER = 1.0  # what a client is told to wait when fail_closed denies a call
LOG_INTERVAL = 60.0  # at most one failure line per this many seconds

LUA = f"""
-- KEYS[i]: bucket keys. ARGV[1]: now in seconds, or '' for the server clock.
-- ARGV[2i], ARGV[2i+1]: interval (seconds) and burst of KEYS[i].
-- Returns {{allowed 1|0, index of the denying key (0 if allowed), retry_after, remaining, reset_after}}.
local SLACK = 1e-6
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = (tonumber(t[1]) - {EPOCH}) + tonumber(t[2]) / 1000000
else
  now = tonumber(ARGV[1])
end
local stored = redis.call('MGET', unpack(KEYS))
local pending, order = {{}}, {{}}
local denied, retry_after, remaining, reset_after = 0, 0.0, nil, 0.0
for i = 1, #KEYS do
  local interval, burst = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local tat = pending[KEYS[i]]
  if tat == nil then tat = tonumber(stored[i]) end
  local base = now
  if tat ~= nil and tat >= now then base = tat end
  local new_tat = base + interval
  local capacity = burst * interval
  local allow_at = new_tat - capacity
  if allow_at - now > SLACK then
    if denied == 0 or allow_at - now > retry_after then
      denied, retry_after = i, allow_at - now
    end
  else
    if pending[KEYS[i]] == nil then order[#order + 1] = KEYS[i] end
    pending[KEYS[i]] = new_tat
    local left = math.max(0, math.floor((capacity - (new_tat - now) + SLACK) / interval))
    if remaining == nil or left < remaining then remaining = left end
    if new_tat - now > reset_after then reset_after = new_tat - now end
  end
end
if denied > 0 then
  reset_after = 0.0
  for i = 1, #KEYS do
    local tat = tonumber(stored[i])
    if tat ~= nil and tat - now > reset_after then reset_after = tat - now end
  end
  return {{0, denied, string.format('%.17g', retry_after), 0, string.format('%.17g', reset_after)}}
end
for _, key in ipairs(order) do
  local tat = pending[key]
  redis.call('SET', key, string.format('%.17g', tat), 'PX', math.ceil((tat - now) * 1000))
end
return {{1, 0, '0', remaining, string.format('%.17g', reset_after)}}
"""


class RedisBackend:
    """A :class:`~proxy.ratelimit.LimitBackend` keeping buckets in Redis.

    ``now`` given to :meth:`hit` replaces the server clock (tests only: do not mix both on the
    same keys). The hook ``on_backend_error`` must not raise.
    """

    def __init__(
        self,
        client: Redis,
        *,
        key_prefix: str = "manifold:rl:",
        failure_mode: Literal["fail_open", "fail_closed"] = "fail_open",
        timeout: float = 0.25,
        on_backend_error: Callable[[BaseException], None] | None = None,
        owns_client: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._script = client.register_script(LUA)
        self._prefix = key_prefix
        self._fail_open = failure_mode == "fail_open"
        self._timeout = timeout
        self._hook = on_backend_error
        self._owns_client = owns_client
        self._clock = clock  # for spacing log lines only
        self.errors = 0  # failed calls since start, for metrics
        self._unreported = 0  # failed calls not yet in a log line
        self._last_report: float | None = None
        self._down = False

    @classmethod
    def from_settings(
        cls, settings: RateLimitSettings, *, on_backend_error: Callable[[BaseException], None] | None = None
    ) -> RedisBackend:
        """A backend with its own client for ``settings.redis_url``; :meth:`aclose` closes it.

        The client connects lazily, waits at most ``timeout`` to connect and to read, and
        retries once at once (a pooled connection may be stale after Redis restarted).
        """
        client = Redis.from_url(
            settings.redis_url,
            socket_timeout=settings.timeout,
            socket_connect_timeout=settings.timeout,
            retry=Retry(NoBackoff(), 1),
        )
        return cls(
            client,
            key_prefix=settings.key_prefix,
            failure_mode=settings.failure_mode,
            timeout=settings.timeout,
            on_backend_error=on_backend_error,
            owns_client=True,
        )

    async def hit(self, checks: Sequence[LimitCheck], now: float | None = None) -> LimitOutcome:
        """Spend one request from every bucket in ``checks`` if all have one; else spend nothing.

        Raises:
            ValueError: a check has a non-positive interval or a burst below 1 (Redis is not asked).
        """
        if not checks:
            return LimitOutcome(allowed=True)
        keys: list[str] = []
        args: list[str | int] = ["" if now is None else repr(float(now))]
        for limit in checks:
            if not limit.interval > 0 or limit.burst < 1:
                raise ValueError(f"need interval > 0 and burst >= 1 (got {limit})")
            keys.append(self._prefix + limit.key)
            args += [repr(float(limit.interval)), limit.burst]
        try:
            with anyio.fail_after(self._timeout):
                reply = await self._script(keys=keys, args=args)
            allowed, index, retry_after, remaining, reset_after = reply
            outcome = LimitOutcome(
                allowed=allowed == 1,
                denied_by=checks[index - 1] if index else None,
                retry_after=float(retry_after),
                remaining=int(remaining),
                reset_after=float(reset_after),
            )
        except (RedisError, OSError, TimeoutError, ValueError, TypeError) as exc:
            # OSError and TimeoutError: raw socket trouble and our own deadline; ValueError and
            # TypeError: a reply of the wrong shape (e.g. a foreign script under our SHA).
            return self._failed(exc)
        if self._down:
            self._down = False
            logger.info("Redis rate-limit store is reachable again (%d failed calls in all)", self.errors)
        return outcome

    async def buckets(self, limit: int = 1000) -> list[tuple[str, float]]:
        """Up to ``limit`` live buckets: (bucket key, seconds until it is full again), for the
        admin API. A bucket's key expires when it is full again, so its PTTL is that time.

        Raises:
            ConnectionError: Redis could not be asked (bounded by ``timeout``).
        """
        pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in self._prefix) + "*"
        keys: list[bytes] = []
        try:
            with anyio.fail_after(self._timeout * 4):
                async for key in self._client.scan_iter(match=pattern, count=200):
                    keys.append(key)
                    if len(keys) >= limit:
                        break
                async with self._client.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.pttl(key)
                    ttls = await pipe.execute()
        except (RedisError, OSError, TimeoutError) as exc:
            raise ConnectionError(f"Redis: {type(exc).__name__}") from None
        skip = len(self._prefix)
        return [(key.decode()[skip:], ttl / 1000) for key, ttl in zip(keys, ttls, strict=True) if ttl > 0]

    async def aclose(self) -> None:
        """Close the client if this backend created it."""
        if self._owns_client:
            await self._client.aclose()

    def _failed(self, exc: BaseException) -> LimitOutcome:
        self.errors += 1
        self._unreported += 1
        self._down = True
        if self._hook is not None:
            self._hook(exc)
        now = self._clock()
        if self._last_report is None or now - self._last_report >= LOG_INTERVAL:
            logger.error(
                "Redis rate-limit store failed %d time(s) since the last report (%s: %s); calls are %s",
                self._unreported,
                type(exc).__name__,
                exc,
                "allowed (fail_open)" if self._fail_open else "denied (fail_closed)",
            )
            self._last_report, self._unreported = now, 0
        if self._fail_open:
            return LimitOutcome(allowed=True, degraded=True)
        return LimitOutcome(False, None, FAIL_CLOSED_RETRY_AFTER, 0, 0.0, degraded=True)
