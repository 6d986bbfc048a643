"""A real authorization server (oidc-provider) and MCP servers that require its tokens, on loopback:
what the credentials tests sign in to, exchange at and call.

``Browser`` follows an authorization URL like a person's browser: the provider's login page (as
a given user), its consent page, then the redirect to the client's callback, which it either
stops at (``stop_at``) or follows (Manifold's own callback page).
"""

from __future__ import annotations

import html
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import aiohttp
import anyio

from tests.fixtures.spawn import free_port, running_http_process

REPO = Path(__file__).resolve().parents[2]
AS_SCRIPT = REPO / "tests" / "npm" / "authorization_server.mjs"
SERVER_SCRIPT = REPO / "tests" / "fixtures" / "oauth_server.py"
CLIENT_SECRET = "manifold-client-secret-0123456789abcdef"
INTROSPECTION_SECRET = "manifold-introspection-secret-0123456789"
SCOPE = "mcp:tools"

_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S | re.I)
_INPUT = re.compile(r"<input([^>]*)>", re.I)
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')


@dataclass
class World:
    issuer: str
    servers: dict[str, str]  # name -> MCP URL of a server that requires the issuer's tokens
    manifold_resource: str  # the resource users' tokens to Manifold are for

    async def client_credentials(self, client_id: str, secret: str, resource: str) -> str:
        form = {"grant_type": "client_credentials", "resource": resource, "scope": SCOPE}
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{self.issuer}/token",
                data=form,
                headers={"Authorization": aiohttp.encode_basic_auth(client_id, secret)},
            ) as got,
        ):
            body = await got.json()
        assert got.status == 200, body
        token: str = body["access_token"]
        return token


def _client(client_id: str, redirect_uri: str) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "client_secret": CLIENT_SECRET,
        "grant_types": [
            "authorization_code",
            "refresh_token",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ],
        "redirect_uris": [redirect_uri],
        "response_types": ["code"],
        "scope": f"openid offline_access {SCOPE}",
    }


@asynccontextmanager
async def world(
    tmp_path: Path,
    *,
    redirect_uri: str,
    manifold_resource: str = "http://127.0.0.1:9/mcp",
    servers: tuple[str, ...] = ("guarded",),
    ttl: dict[str, int] | None = None,
    wrong_audience: tuple[str, ...] = (),
    resources: tuple[str, ...] = (),
) -> AsyncIterator[World]:
    """oidc-provider and one ``oauth_server.py`` per name in ``servers``; a server named in
    ``wrong_audience`` gets tokens minted for another audience (a hostile or broken provider);
    ``resources`` are more resources (URLs) the provider mints JWT access tokens for."""
    as_port = free_port()
    issuer = f"http://127.0.0.1:{as_port}"
    ports = {name: free_port() for name in servers}
    urls = {name: f"http://127.0.0.1:{port}/mcp" for name, port in ports.items()}
    known: dict[str, Any] = {
        urls[name]: {
            "scope": SCOPE,
            "format": "jwt",
            "ttl": (ttl or {}).get(name, 3600),
            **({"audience": "http://127.0.0.1:1/elsewhere"} if name in wrong_audience else {}),
        }
        for name in servers
    }
    known[manifold_resource] = {"scope": SCOPE, "format": "jwt"}
    known.update({url: {"scope": SCOPE, "format": "jwt", "ttl": 3600} for url in resources})
    config = {
        "resources": known,
        "scopes": [SCOPE],
        "clients": [
            _client("manifold", redirect_uri),
            _client("manifold-hostile-exchange", redirect_uri),
            _client("manifold-liar", redirect_uri),  # its tokens name another audience
            {  # users' clients, signing in to Manifold (client credentials stand in for them here)
                "client_id": "users-app",
                "client_secret": CLIENT_SECRET,
                "grant_types": ["client_credentials"],
                "redirect_uris": [],
                "response_types": [],
                "scope": SCOPE,
            },
            {
                "client_id": "manifold-introspection",
                "client_secret": INTROSPECTION_SECRET,
                "grant_types": [],
                "redirect_uris": [],
                "response_types": [],
            },
        ],
        "by_client": {"manifold-liar": {"audience": "http://127.0.0.1:1/elsewhere"}},
        "exchange": {
            "manifold": {"subject_audience": manifold_resource},
            "manifold-hostile-exchange": {
                "subject_audience": manifold_resource,
                "audience": "http://127.0.0.1:1/elsewhere",
            },
        },
    }
    path = tmp_path / f"as-{as_port}.json"
    path.write_text(json.dumps(config))
    async with running_http_process(["node", str(AS_SCRIPT), str(as_port), str(path)], as_port):
        started = [
            running_http_process(
                [
                    sys.executable,
                    str(SERVER_SCRIPT),
                    "--port",
                    str(port),
                    "--issuer",
                    issuer,
                    "--scope",
                    SCOPE,
                ],
                port,
            )
            for port in ports.values()
        ]
        async with _all(started):
            yield World(issuer, urls, manifold_resource)


@asynccontextmanager
async def _all(managers: list[Any]) -> AsyncIterator[None]:
    if not managers:
        yield
        return
    async with managers[0], _all(managers[1:]):
        yield


@dataclass
class Browser:
    """A person's browser, signed in at the provider as ``login``."""

    login: str
    manifold_key: str | None = None  # what it types into Manifold's sign-in start page
    landed: dict[str, str] = field(default_factory=dict)  # the callback's query, when stopped there
    page: tuple[int, str] = (0, "")  # the last page shown (status, text), when it was followed
    jar: aiohttp.CookieJar | None = None  # kept across visits, as a browser's

    def _session(self) -> aiohttp.ClientSession:
        if self.jar is None:
            self.jar = aiohttp.CookieJar(unsafe=True)
        return aiohttp.ClientSession(cookie_jar=self.jar)

    async def visit(self, url: str) -> tuple[int, str]:
        """A GET with this browser's cookies (e.g. the callback, after ``stop_at``)."""
        async with self._session() as http, http.get(url, allow_redirects=False) as got:
            return got.status, await got.text()

    async def authorize(self, url: str, *, stop_at: str | None = None) -> None:
        async with self._session() as http:
            method, data = "GET", None
            headers: dict[str, str] = {}
            with anyio.fail_after(20):
                for _ in range(16):
                    async with http.request(
                        method, url, data=data, headers=headers, allow_redirects=False
                    ) as got:
                        text = await got.text()
                        location = got.headers.get("location")
                    if location is not None:
                        url = urljoin(url, location)
                        if stop_at is not None and url.startswith(stop_at):
                            query = parse_qs(urlsplit(url).query)
                            self.landed = {name: values[0] for name, values in query.items()}
                            return
                        method, data, headers = "GET", None, {}
                        continue
                    form = _FORM.search(text)
                    if form is None or got.status != 200:
                        self.page = (got.status, text)  # not the provider's: where it ended
                        return
                    fields: dict[str, str] = {}
                    for attributes in _INPUT.findall(form.group(2)):
                        attribute = dict(_ATTRIBUTE.findall(attributes))
                        if "name" in attribute:
                            fields[attribute["name"]] = html.unescape(attribute.get("value", ""))
                    if "login" in fields:
                        fields.update(login=self.login, password="any")
                    if "credential" in fields and self.manifold_key is not None:
                        fields["credential"] = self.manifold_key
                    method, data, url = "POST", fields, urljoin(url, html.unescape(form.group(1)))
                    parts = urlsplit(url)
                    headers = {"Origin": f"{parts.scheme}://{parts.netloc}"}  # as a browser posts a form
        raise AssertionError(f"the authorization flow did not end (last: {url})")
