"""Opaque access tokens, asked about at the authorization server (RFC 7662 token introspection).

Manifold authenticates itself to the endpoint (``client_secret_basic``) and believes an answer
for ``introspection_cache`` seconds at most, never past the token's ``exp``: a revoked token
stops working within that time. A refusal is remembered too (10 s), so a token asked about
again costs nothing, and a token not asked about before spends one of the client address's
introspections and one of everyone's (:mod:`proxy.auth.budget`). At most ``_CONCURRENCY``
introspections run at once, and a token that cannot get a turn within ``_QUEUE_SECONDS`` is
not checked (the caller is told to come back: 503): a flood of made-up tokens costs the
identity provider at most that many requests at a time, and real users wait a bounded time
behind it, not a queue as long as the flood.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from ssl import SSLContext
from typing import Any, Final
from urllib.parse import quote, urlencode

import aiohttp
import anyio
import orjson
from cachetools import TLRUCache

from proxy.auth.budget import Budget, Spent

__all__ = [
    "Introspected",
    "IntrospectionError",
    "IntrospectionThrottled",
    "Introspector",
    "Post",
    "post_form",
]

_CONCURRENCY: Final = 8
_QUEUE_SECONDS: Final = 2.0  # longest wait for a turn at the endpoint
_REFUSAL_SECONDS: Final = 10.0
_MAX_BYTES: Final = 256 * 1024

# (url, form body, headers) -> (status, body): aiohttp in production, a fake in unit tests.
Post = Callable[[str, bytes, dict[str, str]], Awaitable[tuple[int, bytes]]]


class IntrospectionError(Exception):
    """The endpoint could not be asked, or answered nonsense (the token is neither good nor bad)."""


class IntrospectionThrottled(IntrospectionError):
    """Not asked: the client's address (``spent`` CLIENT) or everyone (TOTAL) spent the budget."""

    def __init__(self, spent: Spent) -> None:
        whose = "this client address" if spent is Spent.CLIENT else "all clients together"
        super().__init__(f"{whose} sent too many unknown tokens to check just now")
        self.spent = spent


@dataclass(frozen=True, slots=True)
class Introspected:
    """The endpoint's answer: ``claims`` when active, None when not."""

    claims: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class _Entry:
    answer: Introspected
    until: float


async def post_form(
    url: str, body: bytes, headers: dict[str, str], *, timeout: float = 10.0, ssl: SSLContext | None = None
) -> tuple[int, bytes]:
    """POST a form with aiohttp (``ssl``: the CAs to trust, default the system's).

    Raises:
        IntrospectionError: no answer in time, a connection error, an answer over 256 KiB.
    """
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.post(url, data=body, headers=headers, allow_redirects=False, ssl=ssl or True) as response,
        ):
            data = await response.content.read(_MAX_BYTES + 1)
            if len(data) > _MAX_BYTES:
                raise IntrospectionError(f"{url}: answer larger than {_MAX_BYTES} bytes")
            return response.status, data
    except TimeoutError:
        raise IntrospectionError(f"{url}: no answer in {timeout:g} s") from None
    except aiohttp.ClientError as exc:
        raise IntrospectionError(f"{url}: {type(exc).__name__}: {exc}") from None


class Introspector:
    """Asks one authorization server's introspection endpoint about tokens, and remembers."""

    def __init__(
        self,
        client_id: str,
        client_secret: str,
        *,
        cache_seconds: float,
        cache_size: int = 10_000,
        post: Post | None = None,
        budget: Budget | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # RFC 6749 §2.3.1: the id and secret are form-urlencoded before they are joined.
        pair = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}".encode()
        self._headers = {
            "authorization": "Basic " + base64.b64encode(pair).decode(),
            "content-type": "application/x-www-form-urlencoded",
            "accept": "application/json",
        }
        self._cache_seconds = cache_seconds
        self._post = post if post is not None else post_form
        self._clock = clock
        self._cache: TLRUCache[bytes, _Entry] = TLRUCache(
            maxsize=cache_size, ttu=lambda _k, v, _n: v.until, timer=clock
        )
        self._limiter = anyio.CapacityLimiter(_CONCURRENCY)
        self._budget = budget

    async def introspect(
        self, endpoint: str, token: str, key: bytes, client: str | None = None
    ) -> Introspected:
        """What ``endpoint`` says of ``token`` (``key``: its digest, for the cache; ``client``:
        the caller's address, whose share of the budget a question not cached spends).

        Raises:
            IntrospectionThrottled: not cached, and the budget is spent (nothing is asked).
            IntrospectionError: unreachable, a non-200 status, or not an RFC 7662 answer.
        """
        cached = self._cache.get(key)
        if cached is not None:
            return cached.answer
        if self._budget is not None and (spent := self._budget.spend(client)) is not Spent.OK:
            raise IntrospectionThrottled(spent)
        acquired = False
        with anyio.move_on_after(_QUEUE_SECONDS):
            await self._limiter.acquire()
            acquired = True
        if not acquired:
            raise IntrospectionError(f"{endpoint}: {_CONCURRENCY} introspections under way and more waiting")
        try:
            cached = self._cache.get(key)  # another request may have asked while we queued
            if cached is not None:
                return cached.answer
            body = urlencode({"token": token, "token_type_hint": "access_token"}).encode()
            status, data = await self._post(endpoint, body, self._headers)
            if status != 200:
                raise IntrospectionError(f"{endpoint}: HTTP {status}")
            try:
                claims = orjson.loads(data)
            except orjson.JSONDecodeError:
                raise IntrospectionError(f"{endpoint}: the answer is not JSON") from None
            if not isinstance(claims, dict) or not isinstance(claims.get("active"), bool):
                raise IntrospectionError(f"{endpoint}: the answer has no boolean 'active' (RFC 7662 §2.2)")
            now = self._clock()
            if claims["active"]:
                answer = Introspected(claims)
                until = now + self._cache_seconds
                exp = claims.get("exp")
                if isinstance(exp, int | float) and not isinstance(exp, bool):
                    until = min(until, float(exp))
            else:
                answer = Introspected(None)
                until = now + _REFUSAL_SECONDS
            if until > now:
                self._cache[key] = _Entry(answer, until)
            return answer
        finally:
            self._limiter.release()
