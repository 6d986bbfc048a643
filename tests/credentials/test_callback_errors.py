"""The sign-in callback when the store or the authorization server fails: a page that says so
(never a 500), and the call that waits for the sign-in released at once."""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette

from proxy.auth.authenticator import Authenticator
from proxy.core.errors import ServerUnavailable
from proxy.credentials.oauth_client import AuthServer, Registered
from proxy.credentials.on_behalf import CallbackRefused, OAuthServer, OnBehalf
from proxy.credentials.store import StoreError
from proxy.credentials.token_modes import OAuthSource
from proxy.credentials.tokens import MemoryVault, Pending, Sealer, TokenSet
from proxy.inbound.signin_page import signin_routes
from proxy.inbound.streamable_http import OriginPolicy
from proxy.policy.model import Identity

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset(), "api_key")


class _Endpoint:
    async def discover(self, server_url: str, issuer: str | None = None) -> tuple[str, AuthServer]:
        return server_url, AuthServer("https://as.example", "https://as.example/a", "https://as.example/t")

    async def token(
        self, server: AuthServer, client: Registered, form: Mapping[str, str], now: float
    ) -> tuple[TokenSet, dict[str, Any]]:
        return TokenSet("access-token-0123", None, None), {}


class _BrokenStore:
    async def get(self, identity_key: Sequence[str], server_id: str) -> TokenSet | None:
        return None

    async def put(self, identity_key: Sequence[str], server_id: str, tokens: TokenSet) -> None:
        raise StoreError("the credential store file cannot be written: disk full")

    async def revoke(self, identity_key: Sequence[str], server_id: str) -> TokenSet | None:
        return None


async def _get(
    app: Starlette, path: str, query: str, cookie: str, *, method: str = "GET", body: bytes = b""
) -> tuple[int, str]:
    headers = [(b"host", b"127.0.0.1:1"), (b"cookie", cookie.encode())]
    if method == "POST":
        headers += [
            (b"origin", b"http://127.0.0.1:1"),
            (b"content-type", b"application/x-www-form-urlencoded"),
        ]
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": headers,
        "scheme": "http",
        "server": ("127.0.0.1", 1),
        "client": ("127.0.0.1", 5),
        "root_path": "",
        "http_version": "1.1",
    }
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body.decode()


async def test_a_store_failing_at_the_callback_shows_a_page_and_releases_the_waiting_call() -> None:
    flow = OnBehalf(
        {"s": OAuthServer("s", "http://127.0.0.1:9/mcp", client_id="m")},
        _BrokenStore(),
        Pending(MemoryVault(), Sealer(os.urandom(32))),
        callback_url="http://127.0.0.1:1/oauth/callback",
        http=_Endpoint(),  # type: ignore[arg-type]
    )
    app = Starlette(
        routes=signin_routes(flow, Authenticator.__new__(Authenticator), OriginPolicy("127.0.0.1", [], []))
    )
    started = await flow.begin(ALICE, "s")
    name, value = flow.cookie(started.state)
    waited: list[bool] = []

    async def waiting_call() -> None:
        waited.append(await flow.wait(ALICE, "s", 30.0, started.state))

    with anyio.fail_after(5):  # released at once, not after the 30 s
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting_call)
            await anyio.wait_all_tasks_blocked()
            status, page = await _get(
                app, "/oauth/callback", f"code=c&state={started.state}", f"{name}={value}"
            )
    assert status == 503
    assert "cannot keep your sign-in right now" in page
    assert waited == [False]


async def test_a_refresh_granting_a_token_for_another_server_is_answered_as_unavailable() -> None:
    class _Lying:
        async def access_token(self, identity: Identity, server_id: str) -> str | None:
            raise CallbackRefused("the authorization server granted a token for ['x'], not for s")

    with pytest.raises(ServerUnavailable, match="another server"):
        await OAuthSource(_Lying()).credentials(ALICE, "s")  # type: ignore[arg-type]


async def test_guessing_credentials_at_the_start_page_is_rate_limited() -> None:
    flow = OnBehalf(
        {"s": OAuthServer("s", "http://127.0.0.1:9/mcp", client_id="m")},
        _BrokenStore(),
        Pending(MemoryVault(), Sealer(os.urandom(32))),
        callback_url="http://127.0.0.1:1/oauth/callback",
        http=_Endpoint(),  # type: ignore[arg-type]
    )

    class _Refusing:
        async def authenticate(self, headers: Mapping[str, str]) -> Any:
            class _No:
                message = "unknown API key"

            return _No()

    routes = signin_routes(flow, _Refusing(), OriginPolicy("127.0.0.1", [], []))  # type: ignore[arg-type]
    app = Starlette(routes=routes)
    statuses = []
    for n in range(40):
        form = f"state=s&credential=guess{n}".encode()
        statuses.append((await _get(app, "/oauth/start", "", "", method="POST", body=form))[0])
    assert statuses[:30] == [401] * 30
    assert set(statuses[30:]) == {429}
