"""Console sign-ins across replicas, end to end: two ``manifold serve`` processes sharing a real
redis-server (the admin API's fixtures). An operator signs in on replica A; the cookie works on
replica B, whose forms take A's form token; signing out on B ends it on A. Redis holds neither
the credential nor the cookie. Plain HTTP: a browser adds nothing to what is tested here (the
console's browser tests are in test_admin_console.py)."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from tests.interaction.test_admin_api import ADMIN_KEY, redis, two_replicas
from tests.ratelimit.redis_server import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
__all__ = ["redis"]  # a fixture of the admin API's tests, used here too

COOKIE = "manifold_console"


def _token(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page[:500]
    return found[1]


async def _value(client: Redis, key: bytes) -> bytes:
    raw = await client.get(key)
    assert isinstance(raw, bytes)
    return raw


async def _sign_in(http: aiohttp.ClientSession, base: str) -> str:
    async with http.get(f"{base}/admin/signin") as shown:
        form = {"credential": ADMIN_KEY, "csrf": _token(await shown.text())}
    async with http.post(
        f"{base}/admin/signin", data=form, headers={"Origin": base}, allow_redirects=False
    ) as response:
        assert response.status == 303, await response.text()
        return response.cookies[COOKIE].value


async def test_a_sign_in_on_one_replica_holds_on_the_other_and_ends_on_both(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with two_replicas(tmp_path, redis) as (a, b):
        on_a, on_b = (m.url.removesuffix("/mcp") for m in (a, b))
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            cookie = await _sign_in(http, on_a)
        with_cookie = aiohttp.ClientSession(cookies={COOKIE: cookie})
        async with with_cookie as http:
            async with http.get(f"{on_b}/admin/", allow_redirects=False) as response:
                assert response.status == 200
                page = await response.text()
                assert "Signed in as root" in page
            async with http.get(f"{on_a}/admin/", allow_redirects=False) as response:
                assert response.status == 200
                assert _token(await response.text()) == _token(page)  # one sign-in, one form token

            stored = Redis.from_url(redis.url)
            try:
                keys: list[bytes] = [key async for key in stored.scan_iter("manifold:console:*")]
                values = [await _value(stored, k) for k in keys if await stored.type(k) == b"string"]
            finally:
                await stored.aclose()
            assert values  # kept in Redis, sealed
            everything = b"".join([*keys, *values])
            assert ADMIN_KEY.encode() not in everything
            assert cookie.encode() not in everything

            signout = {"csrf": _token(page)}
            async with http.post(
                f"{on_b}/admin/signout", data=signout, headers={"Origin": on_b}, allow_redirects=False
            ) as response:
                assert response.status == 303
            for base in (on_a, on_b):
                async with http.get(f"{base}/admin/", allow_redirects=False) as response:
                    assert response.status == 303  # to the sign-in page
                    assert response.headers["location"].endswith("/admin/signin")


async def test_a_cookie_a_replica_did_not_mint_signs_nobody_in_on_any(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with two_replicas(tmp_path, redis) as replicas:
        for manifold in replicas:
            base = manifold.url.removesuffix("/mcp")
            forged = aiohttp.ClientSession(cookies={COOKIE: "x" * 43})
            async with forged as http, http.get(f"{base}/admin/", allow_redirects=False) as response:
                assert response.status == 303
