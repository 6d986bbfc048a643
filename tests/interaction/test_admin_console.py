"""The web console at ``/admin/``, end to end: a real ``manifold serve`` with ``admin:``, real
servers (the SDK fixture server; an SDK server whose every string is an XSS attempt, once
serving and once failing at start), the official SDK client as the operator's users, and the
operator in headless Chromium (driven over the DevTools protocol, as the approval page's tests).

The operator signs in, sees the failing server's reason and stderr, views the catalog as a
role, switches a tool off and sees a client's call refused, ends a client's session, revokes a
held credential and applies a reload plan. Written as the attacks too: script in every string a
server sends (no script runs: an alert hook in the page says so), a form posted from another
local origin, a non-admin credential, a planted cookie (fixation), framing (clickjacking).
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from proxy.credentials.sealing import new_key
from tests.fixtures.spawn import free_port
from tests.fixtures.xss_server import JS_URL, SCRIPT
from tests.interaction.browser import Browser, chromium, headless
from tests.interaction.harness import REPO, RunningManifold, fixture_server, running_manifold, write_config
from tests.interaction.test_admin_api import ADMIN_KEY, config_without_redis, redis, sdk_client, two_replicas
from tests.interaction.test_approvals import ATTACK, attacker_page, waiting_call
from tests.interaction.test_approvals import KEYS as APPROVAL_KEYS
from tests.interaction.test_credentials import keep
from tests.ratelimit.redis_server import RedisServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(chromium() is None, reason="chromium is not installed (make system-deps)"),
]
__all__ = ["redis"]  # a fixture of the admin API's tests, used here too

KEYS = {
    "ann": ("mfd_ann-console-admin-key-0123456789abcdefghij", ["admin"]),
    "bob": ("mfd_bob-console-staff-key-0123456789abcdefghij", ["staff"]),
    "carol": ("mfd_carol-console-staff-key-0123456789abcdefgh", ["staff"]),
}
POLICY = """\
version: 1
default: allow
rules:
  - id: guests-not-fx
    effect: deny
    description: guests do not get the fixture tools
    match: {roles: [guest], tools: ["fx.*"]}
  - id: adds-need-a-manager
    effect: confirm
    match: {tools: ["fx.add"]}
    confirm: {approver: {role: finance-managers}, timeout: 60}
"""
HELD_SECRET = "carol-own-secret-0123456789"
XSS_SERVER = str(REPO / "tests" / "fixtures" / "xss_server.py")
ALERT_HOOK = """
window.__alerts = [];
for (const name of ["alert", "confirm", "prompt"]) {
  window[name] = (...args) => { window.__alerts.push(name + ":" + args.join(" ")); };
}
"""


def _stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def _config(tmp: Path) -> dict[str, Any]:
    return {
        "auth": {
            "api_keys": [
                {"name": n, "key": _stored(k), "roles": r}
                for n, (k, r) in {**KEYS, **{n: APPROVAL_KEYS[n] for n in ("alice", "mona")}}.items()
            ]
        },
        "admin": {"roles": ["admin"], "grafana_url": "https://grafana.example/d/manifold"},
        "credentials": {"store": "file", "path": str(tmp / "credentials.json"), "key": new_key()},
        "policy": {
            "files": [str(tmp / "policy.yaml")],
            "pins": {"mode": "off"},
            "audit": {"path": str(tmp / "audit.jsonl")},
        },
        "servers": {
            "fx": fixture_server("fx", tools=2),
            "xss": {"command": sys.executable, "args": [XSS_SERVER]},
            "broken": {"command": sys.executable, "args": [XSS_SERVER, "--fail"]},
            "own": {**fixture_server("own", tools=1), "credentials": {"mode": "secret", "env": "TOKEN"}},
        },
    }


@dataclass
class Console:
    manifold: RunningManifold
    tmp: Path
    config: dict[str, Any]

    @property
    def base(self) -> str:
        return self.manifold.url.removesuffix("/mcp")


@pytest.fixture(scope="module")
async def console(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Console]:
    tmp = tmp_path_factory.mktemp("console")
    (tmp / "policy.yaml").write_text(POLICY)
    config = _config(tmp)
    config_path = write_config(tmp / "for-cli.yaml", config)
    await keep(config_path, "own", "carol", HELD_SECRET)
    async with running_manifold(tmp, config) as running:
        yield Console(running, tmp, config)


@asynccontextmanager
async def signed_in(console: Console, tmp: Path, who: str = "ann") -> AsyncIterator[Browser]:
    """Chromium with the alert hook on every document, signed in to the console as ``who``."""
    async with headless(tmp / "profile") as browser:
        await browser.send("Page.addScriptToEvaluateOnNewDocument", source=ALERT_HOOK)
        await browser.open(f"{console.base}/admin/")
        assert (await browser.evaluate("location.pathname")) == "/admin/signin"
        await browser.type_into("#credential", KEYS[who][0])
        await browser.click_and_wait("#signin")
        yield browser


async def _text(browser: Browser) -> str:
    shown: str = await browser.evaluate("document.body.innerText")
    return shown


async def _no_script_ran(browser: Browser) -> None:
    assert await browser.evaluate("window.__alerts") == []
    dangerous = "script, iframe, object, embed, [onerror], [onload], [onclick], a[href^='javascript:' i]"
    assert await browser.evaluate(f"document.querySelectorAll({dangerous!r}).length") == 0


@asynccontextmanager
async def client_as(console: Console, who: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {KEYS[who][0]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(console.manifold.url, http_client=http), mode="legacy") as client,
    ):
        yield client


def _said(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_an_admin_signs_in_and_sees_the_failing_servers_reason(
    console: Console, tmp_path: Path
) -> None:
    async with signed_in(console, tmp_path) as browser:
        assert (await browser.evaluate("location.pathname")) == "/admin/"
        shown = await _text(browser)
        assert "Signed in as ann" in shown
        assert "1 failing" in shown or "failing" in shown
        cookies = (await browser.send("Network.getCookies"))["cookies"]
        ours = [c for c in cookies if c["name"] == "manifold_console"]
        assert len(ours) == 1
        assert ours[0]["httpOnly"] is True
        assert ours[0]["sameSite"] == "Strict"
        assert ours[0]["path"] == "/admin/"
        assert KEYS["ann"][0] not in ours[0]["value"]
        assert 'href="https://grafana.example/d/manifold"' in await browser.evaluate(
            "document.body.innerHTML"
        )
        await browser.click_and_wait("a[href='/admin/servers/broken']")
        with anyio.fail_after(20):  # between attempts (backoff) it says why the last one failed
            while not (reason := await browser.evaluate("document.getElementById('reason')?.textContent")):
                await anyio.sleep(0.2)  # a restart's backoff has no event seen from outside
                await browser.open(f"{console.base}/admin/servers/broken")
        assert "exit" in reason or "closed" in reason, reason
        stderr = await browser.evaluate("document.querySelector('pre').textContent")
        assert SCRIPT in stderr  # shown as text, exactly as the server wrote it
        assert JS_URL in stderr
        await _no_script_ran(browser)


async def test_every_page_shows_what_a_hostile_server_sent_as_text_and_runs_none_of_it(
    console: Console, tmp_path: Path
) -> None:
    pages = [
        "/admin/",
        "/admin/servers/xss",
        "/admin/servers/broken",
        "/admin/catalog?roles=staff&identity=carol",
        "/admin/policy?explain=xss.t" + SCRIPT,
        "/admin/sessions",
        "/admin/approvals",
        "/admin/credentials",
        "/admin/audit",
        "/admin/reload",
    ]
    async with signed_in(console, tmp_path) as browser:
        await browser.open(f"{console.base}/admin/catalog?roles=staff")
        catalog = await _text(browser)
        assert f"xss.t{SCRIPT}" in catalog  # the tool's name, as text
        assert f"{SCRIPT} {JS_URL}" in catalog  # its description
        secrets = [HELD_SECRET, *(key for key, _ in KEYS.values()), console.config["credentials"]["key"]]
        for path in pages:
            await browser.open(console.base + path.replace(" ", "%20").replace("#", "%23"))
            await _no_script_ran(browser)
            shown = await browser.evaluate("document.documentElement.outerHTML")
            assert [s for s in secrets if s in shown] == [], path
        # The hook is live: a page that does run a script is seen.
        await browser.evaluate("alert('the hook works')")
        assert await browser.evaluate("window.__alerts") == ["alert:the hook works"]


async def test_the_catalog_is_viewed_as_a_role(console: Console, tmp_path: Path) -> None:
    async with signed_in(console, tmp_path) as browser:
        await browser.open(f"{console.base}/admin/catalog")
        await browser.type_into("#roles", "staff")
        await browser.click_and_wait("#view-as")
        staff = await _text(browser)
        assert "fx.echo" in staff
        await browser.open(f"{console.base}/admin/catalog")
        await browser.type_into("#roles", "guest")
        await browser.click_and_wait("#view-as")
        guest = await _text(browser)
        assert "fx.echo" not in guest
        assert f"xss.t{SCRIPT}" in guest


async def test_a_tool_switched_off_in_the_console_is_refused_to_a_client_at_once(
    console: Console, tmp_path: Path
) -> None:
    async with client_as(console, "carol") as client, signed_in(console, tmp_path) as browser:
        before = await client.call_tool("fx.echo", {"x": 1})
        assert not before.is_error
        await browser.open(f"{console.base}/admin/policy")
        await browser.type_into("#off-tool", "fx.echo")
        await browser.type_into("#off-reason", "misbehaving")
        await browser.click_and_wait("#switch-off")
        assert "switched off" in await browser.evaluate("document.getElementById('notice').textContent")
        with anyio.fail_after(1):
            refused = await client.call_tool("fx.echo", {"x": 2})
        assert refused.is_error
        assert "switched off" in _said(refused)
        explained = f"{console.base}/admin/policy?explain=fx.echo&roles=staff&identity=carol"
        await browser.open(explained)
        assert "Switched off by an overlay" in await _text(browser)
        await browser.click_and_wait("button[aria-label='Switch fx.echo on']")
        again = await client.call_tool("fx.echo", {"x": 3})
        assert not again.is_error


async def test_an_admin_drains_and_undrains_a_server(console: Console, tmp_path: Path) -> None:
    async with signed_in(console, tmp_path) as browser:
        await browser.open(f"{console.base}/admin/servers/fx")
        await browser.click_and_wait("form[action$='/drain'] button")
        assert "Drained fx" in await browser.evaluate("document.getElementById('notice').textContent")
        assert "drained: no new calls" in await _text(browser)
        await browser.click_and_wait("form[action$='/drain'] button")
        assert "Undrained fx" in await browser.evaluate("document.getElementById('notice').textContent")
        assert "drained: no new calls" not in await _text(browser)
        await browser.open(f"{console.base}/admin/audit")
        await browser.type_into("#audit-identity", "ann")
        await browser.type_into("#audit-tool", "fx")
        await browser.type_into("#audit-since", "10m")
        await browser.click_and_wait("#filter")
        audited = await _text(browser)
        assert "undrain fx" in audited  # newest first, from this browser's address
        assert "drain fx" in audited.split("undrain fx", 1)[1]
        assert "127.0.0.1" in audited


async def test_the_approvals_page_links_each_waiting_call_to_its_approval_page(
    console: Console, tmp_path: Path
) -> None:
    async with (
        waiting_call(console.manifold, "alice", "legacy") as (caller, outcome),
        signed_in(console, tmp_path) as browser,
    ):
        await browser.open(f"{console.base}/admin/approvals")
        listed = await _text(browser)
        assert "fx.add" in listed
        assert "pending" in listed
        link = await browser.evaluate("document.querySelector('main table a').href")
        assert link == caller.url
        await browser.click_and_wait("main table a")  # the existing approval page, as it is
        await browser.type_into("#credential", APPROVAL_KEYS["mona"][0])
        await browser.click_and_wait("button.identify")
        await browser.click_and_wait("button.approve")
        await browser.open(f"{console.base}/admin/approvals")
        assert "approved" in await _text(browser)
    assert not outcome["result"].is_error


async def test_an_admin_ends_a_clients_session(console: Console, tmp_path: Path) -> None:
    async with client_as(console, "bob") as client, signed_in(console, tmp_path) as browser:
        await client.call_tool("fx.echo", {})
        await browser.open(f"{console.base}/admin/sessions")
        label = await browser.evaluate(
            "[...document.querySelectorAll('button[aria-label^=\"End session\"]')]"
            ".map(b => b.getAttribute('aria-label')).find(l => l.includes('bob'))"
        )
        assert label, await _text(browser)
        await browser.click_and_wait(f"button[aria-label={label!r}]")
        assert "Ended session" in await browser.evaluate("document.getElementById('notice').textContent")
        with pytest.raises(MCPError):
            await client.call_tool("fx.echo", {})


async def test_an_admin_revokes_a_held_credential(console: Console, tmp_path: Path) -> None:
    async with signed_in(console, tmp_path) as browser:
        await browser.open(f"{console.base}/admin/credentials")
        assert "carol" in await _text(browser)
        await browser.click_and_wait("button[aria-label^='Revoke']")
        assert "Revoked" in await browser.evaluate("document.getElementById('notice').textContent")
        assert "No credential is held" in await _text(browser)


async def test_an_admin_validates_and_applies_a_reload_plan(console: Console, tmp_path: Path) -> None:
    import yaml

    grown = {
        **console.config,
        "servers": {**console.config["servers"], "fx2": fixture_server("fx2", tools=1)},
    }
    async with signed_in(console, tmp_path) as browser:
        await browser.open(f"{console.base}/admin/reload")
        await browser.type_into("#config", "servers: {bad: {}}")
        await browser.click_and_wait("#plan")
        assert await browser.evaluate("document.getElementById('problems') !== null")
        await browser.evaluate("document.getElementById('config').value = ''")
        await browser.type_into("#config", yaml.safe_dump(grown))
        await browser.click_and_wait("#plan")
        plan = await _text(browser)
        assert "server added" in plan
        assert "fx2" in plan
        await browser.click_and_wait("#apply")
        assert "applied" in await browser.evaluate("document.getElementById('notice').textContent")
        with anyio.fail_after(20):
            while "fx2" not in await _text(browser):
                await anyio.sleep(0.2)  # the new server connects in the background: nothing to wait on
                await browser.open(f"{console.base}/admin/")


FRAME = """<!doctype html><html><body>
<iframe id="f" src="{url}" width="600" height="400"></iframe>
</body></html>"""


async def test_a_form_posted_from_another_local_origin_changes_nothing(
    console: Console, tmp_path: Path
) -> None:
    """The browser is signed in (and a SameSite cookie goes along: another loopback port is the
    same site); the other page even carries the right CSRF token. Refused: not the console's origin."""
    async with signed_in(console, tmp_path) as browser:
        await browser.open(f"{console.base}/admin/policy")
        token = await browser.evaluate("document.querySelector('input[name=csrf]').value")
        fields = (
            f'<input type="hidden" name="csrf" value="{token}">'
            '<input type="hidden" name="tool" value="fx.add">'
            '<input type="hidden" name="minutes" value="60">'
        )
        pages = {"/off": ATTACK.format(url=f"{console.base}/admin/tools/off", fields=fields)}
        async with attacker_page(pages) as evil:
            await browser.open(evil + "/off")
            with anyio.fail_after(10):
                while "/admin/" not in (await browser.evaluate("location.href")):  # noqa: ASYNC110
                    await anyio.sleep(0.05)  # the auto-submit's navigation: no event to wait on here
                while not (shown := await browser.evaluate("document.body && document.body.innerText")):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            assert "Forbidden" in shown
        await browser.open(f"{console.base}/admin/policy")
        assert "No tool is switched off" in await _text(browser)


async def test_the_console_cannot_be_framed(console: Console, tmp_path: Path) -> None:
    async with aiohttp.ClientSession() as http:
        for path in ("/admin/signin", "/admin/"):
            async with http.get(console.base + path, allow_redirects=False) as response:
                assert response.headers["x-frame-options"] == "DENY"
                assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    async with (
        signed_in(console, tmp_path) as browser,
        attacker_page({"/frame": FRAME.format(url=f"{console.base}/admin/")}) as evil,
    ):
        await browser.open(evil + "/frame")
        tree = await browser.send("Page.getFrameTree")
        children = tree["frameTree"].get("childFrames", [])
        assert len(children) == 1
        framed = children[0]["frame"]
        assert not framed["url"].startswith(console.base), framed  # blocked: an error page instead


async def test_a_non_admin_credential_gets_no_console(console: Console) -> None:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        origin = {"Origin": console.base}
        async with http.get(f"{console.base}/admin/signin") as shown:
            token = re.search(r'name="csrf" value="([^"]+)"', await shown.text())
        assert token is not None
        form = {"credential": KEYS["bob"][0], "csrf": token[1]}
        async with http.post(f"{console.base}/admin/signin", data=form, headers=origin) as response:
            assert response.status == 403
            assert "manifold_console" not in response.cookies
            assert "does not hold an admin role" in await response.text()
        posts = ["/admin/tools/off", "/admin/sessions/end", "/admin/credentials/revoke", "/admin/reload"]
        bodies = set()
        for path in posts:
            async with http.post(console.base + path, data={"tool": "fx.add"}, headers=origin) as response:
                assert response.status == 403
                bodies.add(await response.text())
        assert len(bodies) == 1  # identical: nothing said about what the route would have done


async def test_a_cookie_planted_before_sign_in_is_replaced(console: Console, tmp_path: Path) -> None:
    async with headless(tmp_path / "profile") as browser:
        await browser.send("Network.enable")
        planted = {
            "name": "manifold_console",
            "value": "planted-by-someone-else",
            "url": console.base + "/admin/",
            "path": "/admin/",  # where the console's own goes: the same cookie, to be replaced
        }
        await browser.send("Network.setCookie", **planted)
        await browser.open(f"{console.base}/admin/")
        assert (await browser.evaluate("location.pathname")) == "/admin/signin"
        await browser.type_into("#credential", KEYS["ann"][0])
        await browser.click_and_wait("#signin")
        assert "Signed in as ann" in await _text(browser)
        cookies = (await browser.send("Network.getCookies"))["cookies"]
        values = [c["value"] for c in cookies if c["name"] == "manifold_console"]
        assert len(values) == 1
        assert values[0] != "planted-by-someone-else"
    fixed = aiohttp.ClientSession(cookies={"manifold_console": "planted-by-someone-else"})
    async with fixed as http, http.get(f"{console.base}/admin/", allow_redirects=False) as response:
        assert response.status == 303


async def test_a_tool_switched_off_in_the_console_is_refused_on_both_replicas_within_a_second(
    tmp_path: Path, redis: RedisServer
) -> None:
    """Two replicas sharing Redis (the admin API's own fixtures): the console of one switches
    ``alpha.echo`` off; a client of each is refused within a second."""
    async with (
        two_replicas(tmp_path, redis) as (a, b),
        sdk_client(a) as on_a,
        sdk_client(b) as on_b,
        headless(tmp_path / "profile") as browser,
    ):
        for client in (on_a, on_b):
            assert not (await client.call_tool("alpha.echo", {})).is_error
        base = a.url.removesuffix("/mcp")
        await browser.open(f"{base}/admin/signin")
        await browser.type_into("#credential", ADMIN_KEY)
        await browser.click_and_wait("#signin")
        await browser.open(f"{base}/admin/policy")
        await browser.type_into("#off-tool", "alpha.echo")
        await browser.click_and_wait("#switch-off")
        assert "switched off" in await browser.evaluate("document.getElementById('notice').textContent")
        with anyio.fail_after(1):
            for client in (on_a, on_b):
                while not (result := await client.call_tool("alpha.echo", {})).is_error:  # noqa: ASYNC110
                    await anyio.sleep(0.05)  # the other replica hears of it over Redis pub/sub
                assert "switched off" in _said(result)


async def test_with_the_admin_listener_the_console_is_there_and_not_beside_mcp(tmp_path: Path) -> None:
    port = free_port()
    setup = {**config_without_redis(), "admin": {"listen": {"host": "127.0.0.1", "port": port}}}
    async with (
        running_manifold(tmp_path, setup) as manifold,
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
    ):
        beside_mcp = manifold.url.replace("/mcp", "/admin/")
        async with http.get(beside_mcp, allow_redirects=False) as response:
            assert response.status == 404
        own = f"http://127.0.0.1:{port}"
        async with http.get(f"{own}/admin/", allow_redirects=False) as response:
            assert response.status == 303
        async with http.get(f"{own}/admin/signin") as shown:
            token = re.search(r'name="csrf" value="([^"]+)"', await shown.text())
        assert token is not None
        form = {"credential": ADMIN_KEY, "csrf": token[1]}
        async with http.post(f"{own}/admin/signin", data=form, headers={"Origin": own}) as response:
            assert response.status == 200  # followed to the overview
            assert "Signed in as root" in await response.text()
        async with http.get(f"{own}/admin/", headers={"Host": "evil.example"}) as response:
            assert response.status == 403  # a rebinding page's name, refused as on /mcp
