"""An OpenAPI server reached as each user (``credentials.mode: oauth`` and ``exchange``): a real
``manifold serve``, the FastAPI app of ours checking the authorization server's JWT access tokens
for itself (tests/fixtures/rest_api.py ``--issuer``), a real authorization server (oidc-provider,
with a token-exchange grant) and the official SDK client in both eras. The test plays each user's
browser through the provider's login and consent, as tests/interaction/test_credentials_oauth.py
does for MCP servers."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import anyio
import pytest

from proxy.credentials.sealing import new_key
from tests.credentials.world import CLIENT_SECRET, INTROSPECTION_SECRET, World, world
from tests.fixtures.spawn import free_port, running_http_process
from tests.interaction.harness import REPO, RunningManifold, running_manifold
from tests.interaction.test_credentials_oauth import KEYS, MODES, Person, V, client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

API = REPO / "tests" / "fixtures" / "rest_api.py"


@dataclass
class Served:
    manifold: RunningManifold
    world: World
    api: str


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("openapi-oauth")
    port, api_port = free_port(), free_port()
    resource, api = f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{api_port}"
    async with world(
        tmp,
        redirect_uri=f"http://127.0.0.1:{port}/oauth/callback",
        manifold_resource=resource,
        servers=(),
        resources=(api,),
    ) as running:
        command = [
            sys.executable,
            str(API),
            "--port",
            str(api_port),
            "--issuer",
            running.issuer,
            "--audience",
            api,
        ]
        async with running_http_process(command, api_port):
            async with aiohttp.ClientSession() as http, http.get(f"{api}/openapi.json") as answer:
                (tmp / "pets.json").write_bytes(await answer.read())
            openapi = {"document": str(tmp / "pets.json"), "include": {"tags": ["auth", "pets"]}}
            config: dict[str, Any] = {
                "auth": {
                    "api_keys": [
                        {
                            "name": name,
                            "key": f"sha256:{hashlib.sha256(key.encode()).hexdigest()}",
                            "roles": [],
                        }
                        for name, key in KEYS.items()
                    ],
                    "oauth": {
                        "resource": resource,
                        "authorization_servers": [
                            {
                                "issuer": running.issuer,
                                "introspection": {
                                    "client_id": "manifold-introspection",
                                    "client_secret": INTROSPECTION_SECRET,
                                },
                            }
                        ],
                        "scopes_supported": ["mcp:tools"],
                    },
                },
                "credentials": {"store": "file", "path": str(tmp / "credentials.json"), "key": new_key()},
                "servers": {
                    "pets": {
                        "url": api,
                        "openapi": openapi,
                        "credentials": {
                            "mode": "oauth",
                            "issuer": running.issuer,
                            "client_id": "manifold",
                            "client_secret": CLIENT_SECRET,
                            "scopes": ["offline_access", "mcp:tools"],
                        },
                    },
                    "swapped": {
                        "url": api,
                        "openapi": openapi,
                        "credentials": {
                            "mode": "exchange",
                            "client_id": "manifold",
                            "client_secret": CLIENT_SECRET,
                        },
                    },
                },
            }
            async with running_manifold(tmp, config, port=port) as manifold:
                yield Served(manifold, running, api)


async def _call(session: Any, tool: str, arguments: dict[str, Any]) -> Any:
    with anyio.fail_after(60):
        return await session.call_tool(tool, arguments)


@pytest.mark.parametrize("mode", MODES)
async def test_each_user_signs_in_and_the_api_sees_each_of_them(served: Served, mode: str) -> None:
    first, second = ("alice", "bob") if mode != "legacy" else ("carol", "dave")
    one, two = Person(first), Person(second)
    async with (
        client(served.manifold.url, first, mode, one) as a,
        client(served.manifold.url, second, mode, two) as b,
    ):
        seen_a = await _call(a, "pets.whoami", {})
        seen_b = await _call(b, "pets.whoami", {})
        assert not seen_a.is_error, seen_a.content
        assert seen_a.structured_content == {"user": first, "client_id": "manifold"}
        assert seen_b.structured_content == {"user": second, "client_id": "manifold"}
        [asked] = one.asked
        assert asked.mode == "url"
        created = await _call(b, "pets.createPet", {"body": {"name": f"{second}-pet"}})
        assert not created.is_error, created.content
        assert created.structured_content["owner"] == second  # the API acted as that user
        assert (await _call(a, "pets.whoami", {})).structured_content["user"] == first
        assert len(one.asked) == 1  # signed in once
    # Without Manifold, the API refuses a call with no token: the identity came from the sign-in.
    async with aiohttp.ClientSession() as http, http.get(f"{served.api}/whoami") as answer:
        assert answer.status == 401


@pytest.mark.parametrize("mode", MODES)
async def test_exchange_reaches_the_api_as_the_caller_and_never_with_its_token(
    served: Served, mode: str
) -> None:
    inbound = await served.world.client_credentials("users-app", CLIENT_SECRET, served.manifold.url)
    async with client(served.manifold.url, "users-app", mode, bearer=inbound) as session:
        seen = await _call(session, "swapped.whoami", {})
    assert not seen.is_error, seen.content
    # The caller as the authorization server knows it, in a token Manifold got by exchange for
    # this API (the caller's own token names Manifold as its audience: the API would refuse it).
    assert seen.structured_content == {"user": "users-app", "client_id": "manifold"}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{served.api}/whoami", headers={"Authorization": f"Bearer {inbound}"}) as answer,
    ):
        assert answer.status == 401


async def test_an_api_key_caller_has_nothing_to_exchange(served: Served) -> None:
    async with client(served.manifold.url, "alice", V) as session:
        with pytest.raises(Exception) as refused:  # noqa: PT011 (the SDK's MCPError)
            await _call(session, "swapped.whoami", {})
    assert "exchanged" in str(refused.value)
