"""End to end: Manifold as an OAuth 2.1 resource server, against a real authorization server.

The authorization server is the npm package ``oidc-provider`` (a certified OpenID provider, pinned
in tests/npm), run on loopback with resource indicators, dynamic client registration,
introspection and revocation. The official Python SDK client signs in by itself, starting from
nothing but Manifold's URL: 401, Protected Resource Metadata, authorization server metadata,
registration, authorization code + PKCE with ``resource``, token, then MCP. The test plays the
user's browser: it follows the authorization URL and fills in the provider's login and consent
pages. Then the attacks: a token for another resource, an expired one, another issuer's, a
revoked opaque one, one without the required scope, and forged ones.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import aiohttp
import anyio
import httpx2
import jwt
import orjson
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from tests.fixtures.spawn import free_port, running_http_fixture, running_http_process
from tests.inbound.memory_server import INITIALIZE
from tests.interaction.harness import (
    MANIFOLD,
    REPO,
    RunningManifold,
    fixture_server,
    post,
    running_manifold,
    write_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AS_SCRIPT = REPO / "tests" / "npm" / "authorization_server.mjs"
INTROSPECTION_SECRET = "manifold-introspection-secret-0123456789"
SERVICE_SECRET = "service-client-secret-0123456789abcdef"
SCOPES = "mcp:tools mcp:admin"
REDIRECT_URI = "http://localhost:3030/callback"
SCRAPER_KEY = "mfd_prometheus-test-key-0123456789abcdefghij"  # an API key beside OAuth
POLICY = """\
version: 1
default: deny
rules:
  - id: tools-scope-echo
    effect: allow
    match: {roles: [mcp:tools], sources: [oauth], tools: ["alpha.echo"]}
  - id: admins-everything
    effect: allow
    match: {roles: [admin]}
"""


@dataclass
class Provider:
    issuer: str

    async def client_credentials(self, client_id: str, resource: str, scope: str | None = "mcp:tools") -> str:
        """An access token from the token endpoint (client credentials grant)."""
        form = {"grant_type": "client_credentials", "resource": resource}
        if scope is not None:
            form["scope"] = scope
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{self.issuer}/token", data=form, headers=_basic(client_id)) as got,
        ):
            body = await got.json()
        assert got.status == 200, body
        token: str = body["access_token"]
        return token

    async def revoke(self, client_id: str, token: str) -> None:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{self.issuer}/token/revocation",
                data={"token": token, "token_type_hint": "access_token"},
                headers=_basic(client_id),
            ) as got,
        ):
            assert got.status == 200, await got.text()


def _basic(client_id: str) -> dict[str, str]:
    return {"Authorization": aiohttp.encode_basic_auth(client_id, SERVICE_SECRET)}


def _service(client_id: str) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "client_secret": SERVICE_SECRET,
        "grant_types": ["client_credentials"],
        "redirect_uris": [],
        "response_types": [],
        "scope": SCOPES,
    }


@asynccontextmanager
async def authorization_server(tmp_path: Path, resources: list[str]) -> AsyncIterator[Provider]:
    """oidc-provider on a free loopback port, issuing tokens for ``resources``."""
    port = free_port()
    config = {
        "resources": {resource: {"scope": SCOPES, "format": "jwt"} for resource in resources},
        "scopes": SCOPES.split(),
        "by_client": {"svc-opaque": {"format": "opaque"}, "svc-short": {"ttl": 1}},
        "clients": [
            _service("svc"),
            _service("svc-opaque"),
            _service("svc-short"),
            {  # Manifold itself, at the introspection endpoint
                "client_id": "manifold",
                "client_secret": INTROSPECTION_SECRET,
                "grant_types": [],
                "redirect_uris": [],
                "response_types": [],
            },
        ],
    }
    path = tmp_path / f"as-{port}.json"
    path.write_text(json.dumps(config))
    async with running_http_process(["node", str(AS_SCRIPT), str(port), str(path)], port):
        yield Provider(f"http://127.0.0.1:{port}")


@asynccontextmanager
async def recording_proxy(target: str) -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A reverse proxy on loopback in front of ``target`` (an MCP server's URL) that records the
    headers of every request it forwards: what Manifold sends a server, as the server sees it."""
    seen: list[dict[str, str]] = []

    async def forward(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with (
            aiohttp.ClientSession() as http,
            http.request(request.method, target, headers=headers, data=await request.read()) as got,
        ):
            response = web.StreamResponse(
                status=got.status,
                headers={k: v for k, v in got.headers.items() if k.lower() in _PASSED_BACK},
            )
            await response.prepare(request)
            async for chunk in got.content.iter_any():
                await response.write(chunk)
            return response

    app = web.Application()
    app.router.add_route("*", "/mcp", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/mcp", seen
    finally:
        await runner.cleanup()


_PASSED_BACK = frozenset({"content-type", "mcp-session-id", "cache-control"})


def oauth_config(tmp_path: Path, port: int, issuer: str, **oauth: Any) -> dict[str, Any]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    server: dict[str, Any] = {
        "issuer": issuer,
        "leeway": 0,
        "introspection": {"client_id": "manifold", "client_secret": INTROSPECTION_SECRET},
    }
    return {
        "auth": {
            "api_keys": [
                {
                    "name": "prometheus",
                    "key": "sha256:" + hashlib.sha256(SCRAPER_KEY.encode()).hexdigest(),
                    "roles": ["observer"],
                }
            ],
            "oauth": {
                "resource": f"http://127.0.0.1:{port}/mcp",
                "authorization_servers": [server],
                "scopes_supported": ["mcp:tools"],
                "required_scopes": ["mcp:tools"],
                # Only mapped scopes give roles: mcp:tools is mapped to a role of its own name.
                "scope_roles": {"mcp:tools": ["mcp:tools"], "mcp:admin": ["admin"]},
                "introspection_cache": 0,
                **oauth,
            },
        },
        "policy": {"files": ["policy.yaml"], "audit": {"path": "audit.jsonl"}},
        "admin": {"roles": ["admin"]},  # mcp:admin maps to it
        "servers": {"alpha": fixture_server("alpha", tools=2, page_size=10)},
    }


@dataclass
class Setup:
    manifold: RunningManifold
    provider: Provider
    other_provider: Provider
    seen_by_server: list[dict[str, str]]  # the headers of each request Manifold sent "remote"

    @property
    def resource(self) -> str:
        return self.manifold.url


@pytest.fixture(scope="module")
async def setup(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Setup]:
    tmp_path = tmp_path_factory.mktemp("oauth")
    port = free_port()
    resources = [f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}/other"]
    async with (
        authorization_server(tmp_path, resources) as provider,
        authorization_server(tmp_path, resources) as other_provider,
        running_http_fixture("remote", transport="streamable-http", tools=2, json_response=True) as remote,
        recording_proxy(remote) as (proxied, seen),
    ):
        config = oauth_config(tmp_path, port, provider.issuer)
        config["servers"]["remote"] = {"url": proxied, "transport": "streamable-http", "era": "handshake"}
        async with running_manifold(tmp_path, config, port=port) as manifold:
            yield Setup(manifold, provider, other_provider, seen)


# ---- the user's browser, and the SDK client's storage ----------------------------------------


class _Memory:
    """The SDK client's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S | re.I)
_INPUT = re.compile(r"<input([^>]*)>", re.I)
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')


class Browser:
    """Follows an authorization URL like a person's browser would: redirects, the provider's login
    form (as ``login``), its consent form; stops at the client's redirect URI."""

    def __init__(self, login: str) -> None:
        self.login = login
        self.callback: dict[str, str] = {}

    async def authorize(self, url: str) -> None:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            method, data = "GET", None
            with anyio.fail_after(20):
                for _ in range(12):
                    async with http.request(method, url, data=data, allow_redirects=False) as got:
                        text = await got.text()
                        location = got.headers.get("location")
                    if location is not None:
                        url = urljoin(url, location)
                        if url.startswith(REDIRECT_URI):
                            query = parse_qs(urlsplit(url).query)
                            self.callback = {name: values[0] for name, values in query.items()}
                            return
                        method, data = "GET", None
                        continue
                    assert got.status == 200, (got.status, text[:500])
                    form = _FORM.search(text)
                    assert form is not None, text[:1000]
                    fields: dict[str, str] = {}
                    for attributes in _INPUT.findall(form.group(2)):
                        attribute = dict(_ATTRIBUTE.findall(attributes))
                        if "name" in attribute:
                            fields[attribute["name"]] = html.unescape(attribute.get("value", ""))
                    if "login" in fields:
                        fields.update(login=self.login, password="any")
                    method, data, url = "POST", fields, urljoin(url, html.unescape(form.group(1)))
        raise AssertionError(f"the authorization flow did not end at the redirect URI (last: {url})")

    async def code(self) -> AuthorizationCodeResult:
        assert "code" in self.callback, self.callback
        return AuthorizationCodeResult(
            code=self.callback["code"], state=self.callback.get("state"), iss=self.callback.get("iss")
        )


@asynccontextmanager
async def signed_in_client(url: str, login: str) -> AsyncIterator[Client]:
    """The SDK client with its own OAuth support, told nothing but ``url``."""
    browser = Browser(login)
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="manifold-test",
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=_Memory(),
        redirect_handler=browser.authorize,
        callback_handler=browser.code,
    )
    async with (
        httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def audit_records(manifold: RunningManifold, identity: str) -> list[dict[str, Any]]:
    path = manifold.log_path.parent / "audit.jsonl"
    with anyio.fail_after(10):
        while True:
            lines = path.read_bytes().splitlines() if path.exists() else []
            records = [r for r in map(orjson.loads, lines) if r["identity"] == identity]
            if records:
                return records
            await anyio.sleep(0.02)


async def initialize(url: str, token: str | None) -> tuple[int, dict[str, str], Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as http:
        return await post(http, url, INITIALIZE, headers)


def challenge_of(headers: dict[str, str]) -> dict[str, str]:
    """The parameters of a ``WWW-Authenticate: Bearer …`` header."""
    value = headers["WWW-Authenticate"]
    assert value.startswith("Bearer "), value
    return dict(re.findall(r'(\w+)="([^"]*)"', value))


async def sign_ins(manifold: RunningManifold) -> dict[tuple[str, str], float]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(manifold.url.replace("/mcp", "/metrics"), headers={"X-API-Key": SCRAPER_KEY}) as got,
    ):
        assert got.status == 200
        text = await got.text()
    found: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if match := re.match(r'manifold_sign_ins_total\{method="(\w+)",outcome="(\w+)"\} (\S+)', line):
            found[(match[1], match[2])] = float(match[3])
    return found


# ---- a real client signs in by itself ---------------------------------------------------------


async def test_the_sdk_client_signs_in_from_nothing_but_the_url_and_the_policy_sees_the_subject(
    setup: Setup,
) -> None:
    async with signed_in_client(setup.manifold.url, "alice") as client:
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["alpha.echo"]  # the mcp:tools rule, no more
        result = await client.call_tool("alpha.echo", {"said": "signed in"})
        assert not result.is_error, result
    [record] = await audit_records(setup.manifold, "alice")
    assert record["source"] == "oauth"
    # Keyed on (source, issuer, subject): another provider's "alice" is someone else.
    assert (record["issuer"], record["subject"]) == (setup.provider.issuer, "alice")
    assert record["roles"] == ["mcp:tools"]  # the granted scope, as a role
    assert record["effect"] == "allow", record
    assert (await sign_ins(setup.manifold)).get(("oauth", "ok"), 0) >= 1


async def test_the_protected_resource_metadata_names_this_resource_and_its_authorization_server(
    setup: Setup,
) -> None:
    status, headers, _ = await initialize(setup.manifold.url, None)
    assert status == 401
    challenge = challenge_of(headers)
    origin = setup.manifold.url.removesuffix("/mcp")
    assert challenge["resource_metadata"] == f"{origin}/.well-known/oauth-protected-resource/mcp"
    assert challenge["scope"] == "mcp:tools"
    async with aiohttp.ClientSession() as http:
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            async with http.get(origin + path) as got:
                assert got.status == 200, path
                document = await got.json()
            assert document["resource"] == setup.resource
            assert document["authorization_servers"] == [setup.provider.issuer]
            assert document["scopes_supported"] == ["mcp:tools"]
            assert document["bearer_methods_supported"] == ["header"]


# ---- what a hostile or mistaken client presents ------------------------------------------------


async def test_a_token_issued_for_another_resource_is_refused(setup: Setup) -> None:
    other = setup.resource.replace("/mcp", "/other")
    token = await setup.provider.client_credentials("svc", other)
    assert jwt.decode(token, options={"verify_signature": False})["aud"] == other
    status, headers, body = await initialize(setup.manifold.url, token)
    assert status == 401, body
    challenge = challenge_of(headers)
    assert challenge["error"] == "invalid_token"
    assert "not issued for this resource" in challenge["error_description"]
    assert "resource_metadata" in challenge


async def test_a_token_for_this_resource_works_and_an_expired_one_is_refused(setup: Setup) -> None:
    good = await setup.provider.client_credentials("svc", setup.resource)
    status, _, body = await initialize(setup.manifold.url, good)
    assert status == 200, body
    short = await setup.provider.client_credentials("svc-short", setup.resource)  # lives 1 s
    expires = jwt.decode(short, options={"verify_signature": False})["exp"]
    await anyio.sleep(max(0.0, expires - time.time()) + 1.1)
    status, headers, _ = await initialize(setup.manifold.url, short)
    assert status == 401
    assert challenge_of(headers)["error_description"] == "the token has expired"


async def test_a_token_from_an_issuer_not_configured_is_refused(setup: Setup) -> None:
    # Same audience, same shape, signed correctly, by an authorization server Manifold does not trust.
    token = await setup.other_provider.client_credentials("svc", setup.resource)
    status, headers, _ = await initialize(setup.manifold.url, token)
    assert status == 401
    assert "issuer" in challenge_of(headers)["error_description"]


async def test_a_forged_token_claiming_the_trusted_issuer_is_refused(setup: Setup) -> None:
    real = await setup.provider.client_credentials("svc", setup.resource)
    claims = jwt.decode(real, options={"verify_signature": False})
    header = jwt.get_unverified_header(real)
    attacker_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        {**claims, "sub": "admin", "scope": SCOPES}, attacker_key, algorithm="RS256", headers=header
    )
    status, headers, _ = await initialize(setup.manifold.url, forged)
    assert status == 401
    assert challenge_of(headers)["error"] == "invalid_token"
    # ... and one with no signature at all
    unsigned = jwt.encode({**claims, "scope": SCOPES}, "", algorithm="none", headers={"typ": "at+jwt"})
    status, _, _ = await initialize(setup.manifold.url, unsigned)
    assert status == 401


async def test_a_token_without_the_required_scope_gets_403_insufficient_scope(setup: Setup) -> None:
    token = await setup.provider.client_credentials("svc", setup.resource, scope="mcp:admin")
    status, headers, _ = await initialize(setup.manifold.url, token)
    assert status == 403
    challenge = challenge_of(headers)
    assert challenge["error"] == "insufficient_scope"
    assert challenge["scope"] == "mcp:tools"
    assert challenge["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp")


async def test_an_opaque_token_is_introspected_and_stops_working_once_revoked(setup: Setup) -> None:
    token = await setup.provider.client_credentials("svc-opaque", setup.resource)
    assert token.count(".") != 2  # opaque: nothing to verify locally
    status, _, body = await initialize(setup.manifold.url, token)
    assert status == 200, body
    await setup.provider.revoke("svc-opaque", token)
    status, headers, _ = await initialize(setup.manifold.url, token)
    assert status == 401
    assert "not active" in challenge_of(headers)["error_description"]
    counted = await sign_ins(setup.manifold)
    assert counted.get(("introspection", "ok"), 0) >= 1
    assert counted.get(("introspection", "inactive"), 0) >= 1


async def _admin_read(setup: Setup, token: str) -> tuple[int, str]:
    url = setup.manifold.url.replace("/mcp", "/admin/api/servers")
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, headers={"Authorization": f"Bearer {token}"}) as got,
    ):
        return got.status, await got.text()


async def test_an_oauth_token_with_the_admin_scope_reads_the_admin_api_until_revoked(setup: Setup) -> None:
    """Admin by OAuth access token: the scope mapped to the admin role opens the admin API; a
    token without it gets 403; an opaque admin token stops working once revoked there."""
    admin = await setup.provider.client_credentials("svc", setup.resource, scope=SCOPES)
    status, body = await _admin_read(setup, admin)
    assert status == 200, body
    assert "alpha" in body
    user = await setup.provider.client_credentials("svc", setup.resource, scope="mcp:tools")
    assert (await _admin_read(setup, user))[0] == 403
    elsewhere = await setup.other_provider.client_credentials("svc", setup.resource, scope=SCOPES)
    assert (await _admin_read(setup, elsewhere))[0] == 401  # an issuer not configured
    opaque = await setup.provider.client_credentials("svc-opaque", setup.resource, scope=SCOPES)
    assert opaque.count(".") != 2
    assert (await _admin_read(setup, opaque))[0] == 200
    await setup.provider.revoke("svc-opaque", opaque)
    assert (await _admin_read(setup, opaque))[0] == 401


async def test_a_made_up_opaque_token_is_refused(setup: Setup) -> None:
    status, headers, _ = await initialize(setup.manifold.url, "not-a-token-anyone-issued")
    assert status == 401
    assert challenge_of(headers)["error"] == "invalid_token"


async def test_a_client_token_is_never_passed_on_to_a_server(setup: Setup) -> None:
    # The spec forbids token passthrough: the server behind sees Manifold's own requests, with
    # the headers configured for it (none here), never the client's token.
    token = await setup.provider.client_credentials("svc", setup.resource, scope=SCOPES)  # admin: all
    before = len(setup.seen_by_server)
    async with aiohttp.ClientSession() as http:
        status, headers, body = await post(
            http, setup.manifold.url, INITIALIZE, {"Authorization": f"Bearer {token}"}
        )
        assert status == 200, body
        session = {"Authorization": f"Bearer {token}", "Mcp-Session-Id": headers["mcp-session-id"]}
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "remote.echo", "arguments": {}},
        }
        status, _, body = await post(http, setup.manifold.url, call, session)
    assert status == 200
    assert "result" in body, body
    forwarded = setup.seen_by_server[before:]
    assert forwarded, "the call reached the server"
    for request in forwarded:
        assert "Authorization" not in request, request
        assert all(token not in value for value in request.values()), request
    assert token not in setup.manifold.log()
    path = setup.manifold.log_path.parent / "audit.jsonl"
    assert not path.exists() or token not in path.read_text()


# ---- behind a reverse proxy ----------------------------------------------------------------


async def test_the_metadata_follows_a_configured_public_url_behind_a_proxy(tmp_path: Path) -> None:
    public = "https://gateway.example.com/team-a/mcp"
    port = free_port()
    config = oauth_config(tmp_path, port, "https://id.example.com/realms/acme", resource=public)
    config["servers"] = {}
    async with running_manifold(tmp_path, config, port=port) as manifold:
        status, headers, _ = await initialize(manifold.url, None)
        assert status == 401
        assert (
            challenge_of(headers)["resource_metadata"]
            == "https://gateway.example.com/.well-known/oauth-protected-resource/team-a/mcp"
        )
        origin = manifold.url.removesuffix("/mcp")
        async with aiohttp.ClientSession() as http:
            # What the proxy forwards: the path as the public URL has it, or as Manifold serves /mcp.
            for path in ("/team-a/mcp", "/mcp", ""):
                async with http.get(f"{origin}/.well-known/oauth-protected-resource{path}") as got:
                    assert got.status == 200, path
                    assert (await got.json())["resource"] == public


# ---- manifold check explains a broken OAuth config ------------------------------------------


async def test_check_online_says_what_the_authorization_server_publishes_and_what_is_wrong(
    setup: Setup, tmp_path: Path
) -> None:
    port = free_port()
    good = oauth_config(tmp_path, port, setup.provider.issuer)
    config = write_config(tmp_path / "good.yaml", good)
    checked = await anyio.run_process([*MANIFOLD, "check", "--online", "--config", str(config)], check=False)
    assert checked.returncode == 0, checked.stderr
    assert f"jwks_uri {setup.provider.issuer}/jwks" in checked.stdout.decode()
    # The most common mistake with a real identity provider: the issuer one character off.
    bad = oauth_config(tmp_path, port, setup.provider.issuer + "/")
    config = write_config(tmp_path / "bad.yaml", bad)
    checked = await anyio.run_process([*MANIFOLD, "check", "--online", "--config", str(config)], check=False)
    assert checked.returncode == 2
    assert "no metadata document whose issuer is exactly" in checked.stderr.decode()
