"""Admin by JWT, end to end: ``manifold serve`` trusting an issuer whose keys a real JWKS server
on loopback serves. A token whose roles claim holds the admin role reads the admin API and signs
in to the console; a valid token without it gets 403 on every route (the same body); an expired
token, one signed by a key the issuer does not publish and a forged unsigned one get 401.
(Admin by OAuth access token: tests/interaction/test_oauth.py.)"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest

from tests.auth.keys import (
    AUDIENCE,
    ISSUER,
    JwksServer,
    claims,
    forge,
    jwks,
    public_jwk,
    rsa_key,
    serving,
    sign,
)
from tests.interaction.harness import RunningManifold, fixture_server, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

READS = ["/servers", "/sessions", "/approvals", "/credentials", "/audit", "/policy"]


@dataclass
class Served:
    manifold: RunningManifold
    jwks: JwksServer

    @property
    def base(self) -> str:
        return self.manifold.url.removesuffix("/mcp")


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("admin-jwt")
    keys = JwksServer(jwks(public_jwk(rsa_key("issuer"), "k1")))
    async with serving(keys) as url:
        config = {
            "auth": {"jwt": [{"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": url, "leeway": 0}]},
            "admin": {"roles": ["admin"]},
            "servers": {"alpha": fixture_server("alpha", tools=2)},
        }
        async with running_manifold(tmp, config) as manifold:
            yield Served(manifold, keys)


def token(roles: list[str], *, lifetime: float = 600, key: str = "issuer", sub: str = "alice") -> str:
    return sign(claims(lifetime, roles=roles, sub=sub), rsa_key(key), "RS256", kid="k1")


async def status(served: Served, path: str, bearer: str) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {bearer}"}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{served.base}/admin/api{path}", headers=headers) as got,
    ):
        return got.status, await got.text()


async def test_a_jwt_with_the_admin_role_reads_the_admin_api(served: Served) -> None:
    admin = token(["admin"])
    for path in READS:
        code, body = await status(served, path, admin)
        assert code == 200, (path, body)
    _, servers = await status(served, "/servers", admin)
    assert "alpha" in servers


async def test_a_jwt_without_the_admin_role_gets_the_same_403_everywhere(served: Served) -> None:
    user = token(["dev", "Admin", "admin "], sub="bob")  # near misses are not the role
    bodies = set()
    for path in READS:
        code, body = await status(served, path, user)
        assert code == 403, (path, body)
        bodies.add(body)
    assert len(bodies) == 1


async def test_expired_foreign_and_forged_jwts_are_refused(served: Served) -> None:
    now = int(time.time())
    refused = {
        "expired": token(["admin"], lifetime=-60),
        "signed by another key": token(["admin"], key="attacker"),
        "unsigned": forge(
            {"sub": "mallory", "iss": ISSUER, "aud": AUDIENCE, "exp": now + 600, "roles": ["admin"]},
            {"alg": "none", "typ": "JWT", "kid": "k1"},
            None,
        ),
    }
    for what, bearer in refused.items():
        code, body = await status(served, "/servers", bearer)
        assert code == 401, (what, body)
        assert "alpha" not in body


async def test_a_jwt_admin_signs_in_to_the_console(served: Served) -> None:
    base = served.base
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        for bearer, expected in ((token(["dev"], sub="bob"), 403), (token(["admin"]), 303)):
            async with http.get(f"{base}/admin/signin") as shown:
                found = re.search(r'name="csrf" value="([^"]+)"', await shown.text())
            assert found is not None
            form = {"credential": bearer, "csrf": found[1]}
            async with http.post(
                f"{base}/admin/signin", data=form, headers={"Origin": base}, allow_redirects=False
            ) as response:
                assert response.status == expected, await response.text()
        async with http.get(f"{base}/admin/", allow_redirects=False) as response:
            assert response.status == 200
            assert "Signed in as alice" in await response.text()
