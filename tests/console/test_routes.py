"""The console's routes in memory (a real authenticator with API keys, the fake backend): who
may sign in, the cookie it gets, fixation, CSRF and cross-origin posts, every page escaping
what it shows. End to end in headless Chromium: tests/interaction/test_admin_console.py."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette

from proxy.auth.authenticator import Authenticator, FailureReason, Rejected
from proxy.config.auth import AuthSettings
from proxy.console.routes import console_routes
from proxy.console.signins import COOKIE
from proxy.inbound.streamable_http import OriginPolicy
from tests.auth.keys import AUDIENCE, ISSUER, SECRET, claims, sign
from tests.console.fake_backend import FakeBackend

pytestmark = pytest.mark.anyio

ADMIN_KEY = "mfd_admin-console-key-0123456789abcdefghijkl"
STAFF_KEY = "mfd_staff-console-key-0123456789abcdefghijkl"
ORIGIN = "http://127.0.0.1:8080"
READS = [
    "/admin/",
    "/admin/servers/fx",
    "/admin/catalog?roles=staff",
    "/admin/policy?explain=fx.a",
    "/admin/sessions",
    "/admin/approvals",
    "/admin/credentials",
    "/admin/audit?identity=x",
    "/admin/reload",
]
ACTS = [
    "/admin/servers/fx/restart",
    "/admin/servers/fx/drain",
    "/admin/tools/off",
    "/admin/tools/on",
    "/admin/sessions/end",
    "/admin/credentials/revoke",
    "/admin/reload",
    "/admin/signout",
]


def _stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def _app(
    backend: FakeBackend,
    *,
    hosts: tuple[str, ...] = (),
    writes: tuple[float, int] = (1.0, 100),
    requests: tuple[float, int] = (0.05, 40),
) -> Starlette:
    settings = AuthSettings.model_validate(
        {
            "api_keys": [
                {"name": "ann", "key": _stored(ADMIN_KEY), "roles": ["admin"]},
                {"name": "bob", "key": _stored(STAFF_KEY), "roles": ["staff"]},
            ],
            "jwt": [{"issuer": ISSUER, "audience": AUDIENCE, "secret": SECRET, "roles_claim": "roles"}],
        }
    )
    auth = Authenticator.from_settings(settings, {})
    origins = OriginPolicy("127.0.0.1", [], hosts)
    grafana = "https://grafana.example/d/m"
    return Starlette(
        routes=console_routes(
            backend, auth, origins, ["admin"], grafana_url=grafana, writes=writes, requests=requests
        )
    )


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
async def http(backend: FakeBackend) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=_app(backend))
    async with httpx2.AsyncClient(transport=transport, base_url=ORIGIN) as client:
        yield client


async def _sign_in(http: httpx2.AsyncClient, key: str = ADMIN_KEY, **headers: str) -> httpx2.Response:
    """The sign-in form as a browser fills it: its page first (the form token and its cookie)."""
    token = _csrf((await http.get("/admin/signin")).text)
    form = {"credential": key, "csrf": token}
    return await http.post("/admin/signin", data=form, headers={"origin": ORIGIN, **headers})


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found[1]


async def _post(http: httpx2.AsyncClient, path: str, form: dict[str, Any], **headers: str) -> httpx2.Response:
    return await http.post(path, data=form, headers={"origin": ORIGIN, **headers})


async def test_without_a_sign_in_every_page_sends_to_the_sign_in_page(http: httpx2.AsyncClient) -> None:
    for path in READS:
        response = await http.get(path)
        assert response.status_code == 303, path
        assert response.headers["location"] == "/admin/signin"
        assert response.headers["x-frame-options"] == "DENY"
    page = await http.get("/admin/signin")
    assert page.status_code == 200
    assert 'for="credential"' in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


async def test_an_admin_signs_in_with_a_strict_http_only_cookie_on_loopback(http: httpx2.AsyncClient) -> None:
    response = await _sign_in(http)
    assert response.status_code == 303
    assert response.headers["location"] == "/admin/"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/admin/" in cookie
    assert "Secure" not in cookie  # plain http on loopback: a Secure cookie would never come back
    assert ADMIN_KEY not in cookie
    overview = await http.get("/admin/")
    assert overview.status_code == 200
    assert "Signed in as ann" in overview.text
    assert overview.headers["x-frame-options"] == "DENY"
    assert overview.headers["x-content-type-options"] == "nosniff"
    assert 'href="https://grafana.example/d/m"' in overview.text


async def test_off_loopback_the_cookie_is_secure(backend: FakeBackend) -> None:
    transport = httpx2.ASGITransport(app=_app(backend, hosts=("gw.example.com",)))
    async with httpx2.AsyncClient(transport=transport, base_url="http://gw.example.com") as http:
        shown = await http.get("/admin/signin")
        assert "Secure" in shown.headers["set-cookie"]  # the form's own token too
        # A Secure cookie is not sent back over http: as a browser behind TLS would, send it.
        http.cookies.set("manifold_console_signin", shown.cookies["manifold_console_signin"])
        response = await http.post(
            "/admin/signin",
            data={"credential": ADMIN_KEY, "csrf": _csrf(shown.text)},
            headers={"origin": "http://gw.example.com"},
        )
    assert response.status_code == 303
    assert "Secure" in response.headers["set-cookie"]


async def test_a_non_admin_or_a_bad_credential_gets_no_sign_in(http: httpx2.AsyncClient) -> None:
    staff = await _sign_in(http, STAFF_KEY)
    assert staff.status_code == 403
    assert "does not hold an admin role" in staff.text
    bad = await _sign_in(http, "mfd_not-a-key")
    assert bad.status_code == 401
    empty = await _sign_in(http, "")
    assert empty.status_code == 401
    for response in (staff, bad, empty):
        assert COOKIE not in response.cookies  # a new sign-in form's token only
    assert (await http.get("/admin/")).status_code == 303


async def test_a_sign_in_from_another_origin_or_cross_site_is_refused(http: httpx2.AsyncClient) -> None:
    token = _csrf((await http.get("/admin/signin")).text)  # even with the form's token and cookie
    for headers in (
        {"origin": "http://127.0.0.1:9999"},  # another loopback port is another site
        {"origin": "http://evil.example"},
        {"origin": ORIGIN, "sec-fetch-site": "same-site"},
        {"origin": ORIGIN, "sec-fetch-site": "cross-site"},
    ):
        form = {"credential": ADMIN_KEY, "csrf": token}
        response = await http.post("/admin/signin", data=form, headers=headers)
        assert response.status_code == 403, headers
        assert "set-cookie" not in response.headers
    no_origin = await http.post("/admin/signin", data={"credential": ADMIN_KEY})
    assert no_origin.status_code == 403


async def test_a_cookie_planted_before_sign_in_is_not_adopted(http: httpx2.AsyncClient) -> None:
    http.cookies.set(COOKIE, "planted-by-an-attacker", domain="127.0.0.1", path="/admin/")
    assert (await http.get("/admin/")).status_code == 303  # an id not minted here is nobody
    response = await _sign_in(http)
    minted = response.cookies[COOKIE]
    assert minted != "planted-by-an-attacker"
    async with httpx2.AsyncClient(transport=http._transport, base_url=ORIGIN) as attacker:
        attacker.cookies.set(COOKIE, "planted-by-an-attacker", domain="127.0.0.1", path="/admin/")
        assert (await attacker.get("/admin/")).status_code == 303


async def test_signing_in_again_drops_the_previous_id(http: httpx2.AsyncClient) -> None:
    first = (await _sign_in(http)).cookies[COOKIE]
    second = (await _sign_in(http)).cookies[COOKIE]
    assert first != second
    async with httpx2.AsyncClient(transport=http._transport, base_url=ORIGIN) as old:
        old.cookies.set(COOKIE, first, domain="127.0.0.1", path="/admin/")
        assert (await old.get("/admin/")).status_code == 303


async def test_every_form_without_the_csrf_token_changes_nothing(
    http: httpx2.AsyncClient, backend: FakeBackend
) -> None:
    await _sign_in(http)
    for path in ACTS:
        for form in ({}, {"csrf": "forged"}):
            response = await _post(http, path, {**form, "session": "abc", "tool": "fx.a", "minutes": "5"})
            assert response.status_code == 403, path
            assert "out of date or was not sent from the console" in response.text
    assert backend.acts == []
    assert (await http.get("/admin/")).status_code == 200  # sign-out was refused too


async def test_a_form_with_the_token_from_another_origin_is_refused(
    http: httpx2.AsyncClient, backend: FakeBackend
) -> None:
    await _sign_in(http)
    token = _csrf((await http.get("/admin/sessions")).text)
    for headers in ({"origin": "http://127.0.0.1:9999"}, {"origin": ORIGIN, "sec-fetch-site": "cross-site"}):
        response = await http.post(
            "/admin/sessions/end", data={"csrf": token, "session": "abc"}, headers=headers
        )
        assert response.status_code == 403
    assert backend.acts == []


async def test_actions_reach_the_backend_as_the_signed_in_admin(
    http: httpx2.AsyncClient, backend: FakeBackend
) -> None:
    await _sign_in(http)
    token = _csrf((await http.get("/admin/")).text)
    ended = await _post(http, "/admin/sessions/end", {"csrf": token, "session": "abc123def456"})
    assert ended.status_code == 200
    assert "Replicas that acted: r1" in ended.text
    off = await _post(
        http,
        "/admin/tools/off",
        {"csrf": token, "tool": "fx.add", "role": "staff", "minutes": "2", "reason": "flaky"},
    )
    assert off.status_code == 200
    bad_minutes = await _post(http, "/admin/tools/off", {"csrf": token, "tool": "fx.add", "minutes": "-1"})
    assert bad_minutes.status_code == 400
    on = await _post(http, "/admin/tools/on", {"csrf": token, "tool": "fx.add", "role": ""})
    assert on.status_code == 200
    holder = {"source": "api_key", "issuer": "", "subject": "bob"}
    revoked = await _post(
        http, "/admin/credentials/revoke", {"csrf": token, "server": "fx", "kind": "oauth", **holder}
    )
    assert revoked.status_code == 200
    restarted = await _post(http, "/admin/servers/fx/restart", {"csrf": token})
    assert restarted.status_code == 200
    drained = await _post(http, "/admin/servers/fx/drain", {"csrf": token, "on": "1"})
    assert drained.status_code == 200
    undrained = await _post(http, "/admin/servers/fx/drain", {"csrf": token, "on": "0"})
    assert undrained.status_code == 200
    plan = await _post(http, "/admin/reload", {"csrf": token, "step": "plan", "config": "servers: {}"})
    assert plan.status_code == 200
    assert "The config is valid" in plan.text
    invalid = await _post(http, "/admin/reload", {"csrf": token, "step": "plan", "config": "bad"})
    assert invalid.status_code == 422
    assert 'id="problems"' in invalid.text
    applied = await _post(http, "/admin/reload", {"csrf": token, "step": "apply", "config": ""})
    assert applied.status_code == 200
    assert backend.acts == [
        ("end", "abc123def456", "ann", "127.0.0.1"),
        ("off", "fx.add", "staff", 2.0, "flaky", "ann"),
        ("on", "fx.add", None, "ann"),
        ("revoke", "fx", "oauth", holder, "ann", "127.0.0.1"),
        ("restart", "fx", "ann", "127.0.0.1"),
        ("drain", "fx", True, "ann"),
        ("drain", "fx", False, "ann"),
        ("plan", "servers: {}"),
        ("plan", "bad"),
        ("apply", None, "ann"),
    ]


async def test_sign_out_ends_the_sign_in(http: httpx2.AsyncClient) -> None:
    minted = (await _sign_in(http)).cookies[COOKIE]
    token = _csrf((await http.get("/admin/")).text)
    out = await _post(http, "/admin/signout", {"csrf": token})
    assert out.status_code == 303
    assert out.headers["location"] == "/admin/signin"
    async with httpx2.AsyncClient(transport=http._transport, base_url=ORIGIN) as replay:
        replay.cookies.set(COOKIE, minted, domain="127.0.0.1", path="/admin/")
        assert (await replay.get("/admin/")).status_code == 303


async def test_every_page_shows_hostile_values_as_text_and_no_javascript_link(
    http: httpx2.AsyncClient,
) -> None:
    await _sign_in(http)
    for path in [
        *READS,
        "/admin/servers/bad%3Cscript%3Ealert(%22x%22)%3C%2Fscript%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E",
    ]:
        response = await http.get(path)
        assert response.status_code == 200, path
        page = response.text
        assert "<script" not in page.lower(), path
        assert "<img" not in page.lower(), path
        assert 'href="javascript:' not in page.lower(), path
        assert "&lt;script&gt;" in page or path in ("/admin/", "/admin/servers/fx"), path


async def test_the_failing_servers_reason_and_stderr_are_on_its_page(http: httpx2.AsyncClient) -> None:
    await _sign_in(http)
    overview = (await http.get("/admin/")).text
    assert "2 servers, 1 failing" in overview
    assert "per-user:&lt;script&gt;" in overview  # a bucket near its limit, its key escaped
    assert "2023-11-14 22:13:20 UTC" in overview  # the last refusal by a limit
    assert 'href="/admin/servers/bad%3Cscript%3E' in overview
    detail = await http.get(
        "/admin/servers/bad%3Cscript%3Ealert(%22x%22)%3C%2Fscript%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"
    )
    assert 'id="reason">exited with 1: &lt;script&gt;' in detail.text
    assert "line &lt;script&gt;" in detail.text
    assert (await http.get("/admin/servers/nope")).status_code == 404


async def test_the_catalog_is_shown_as_the_roles_asked(
    http: httpx2.AsyncClient, backend: FakeBackend
) -> None:
    await _sign_in(http)
    staff = (await http.get("/admin/catalog", params={"roles": "staff, ops", "identity": "carol"})).text
    assert "fx.&lt;script&gt;" in staff
    nobody = (await http.get("/admin/catalog", params={"roles": "guest"})).text
    assert "sees no tools" in nobody
    assert ("catalog", ["staff", "ops"], "carol") in backend.acts


async def test_sign_ins_are_rate_limited_per_address(http: httpx2.AsyncClient) -> None:
    statuses = [(await _sign_in(http, "mfd_wrong")).status_code for _ in range(25)]
    assert statuses[:20] == [401] * 20
    assert statuses[-1] == 429


async def test_a_huge_form_is_refused(http: httpx2.AsyncClient) -> None:
    await _sign_in(http)
    token = _csrf((await http.get("/admin/")).text)
    response = await _post(http, "/admin/reload", {"csrf": token, "config": "x" * 300_000})
    assert response.status_code == 413


async def test_a_cookie_of_the_same_name_planted_for_another_path_does_not_sign_the_admin_out(
    backend: FakeBackend,
) -> None:
    """Ports do not separate cookies: another page on this host can set ``manifold_console``
    for ``/``, and the browser then sends both values. The console's own still counts."""
    transport = httpx2.ASGITransport(app=_app(backend))
    async with httpx2.AsyncClient(transport=transport, base_url=ORIGIN) as http:
        minted = (await _sign_in(http)).cookies[COOKIE]
    async with httpx2.AsyncClient(transport=transport, base_url=ORIGIN) as browser:
        for header in (
            f"{COOKIE}={minted}; {COOKIE}=planted",
            f"{COOKIE}=planted; other=1; {COOKIE}={minted}",
        ):
            response = await browser.get("/admin/", headers={"cookie": header})
            assert response.status_code == 200, header
        only_planted = await browser.get("/admin/", headers={"cookie": f"{COOKIE}=planted"})
        assert only_planted.status_code == 303


async def test_an_admins_forms_and_an_addresss_pages_are_rate_limited(backend: FakeBackend) -> None:
    transport = httpx2.ASGITransport(app=_app(backend, writes=(60.0, 2), requests=(60.0, 6)))
    async with httpx2.AsyncClient(transport=transport, base_url=ORIGIN) as http:
        await _sign_in(http)
        token = _csrf((await http.get("/admin/sessions")).text)
        ends = [
            (await _post(http, "/admin/sessions/end", {"csrf": token, "session": f"s{i}"})).status_code
            for i in range(3)
        ]
        assert ends == [200, 200, 429]
        assert [a[1] for a in backend.acts] == ["s0", "s1"]
        pages = [(await http.get("/admin/")).status_code for _ in range(3)]
        assert pages[-1] == 429
        out = await _post(http, "/admin/signout", {"csrf": token})
        assert out.status_code in (303, 429)  # never the writes' bucket: only the address's pages


async def test_every_page_is_navigable_and_labelled(http: httpx2.AsyncClient) -> None:
    """Accessibility the markup can show: a language, one heading, a skip link, every field
    labelled, every button named, tables with captions and column headers."""
    await _sign_in(http)
    for path in READS:
        page = (await http.get(path)).text
        assert '<html lang="en">' in page, path
        assert page.count("<h1>") == 1, path
        assert 'href="#main"' in page, path
        labelled = set(re.findall(r'<label for="([^"]+)"', page))
        fields = re.findall(r"<(?:input|select|textarea)\b([^>]*)>", page)
        for attributes in fields:
            if 'type="hidden"' in attributes:
                continue
            found = re.search(r'id="([^"]+)"', attributes)
            assert found is not None, (path, attributes)
            assert found[1] in labelled, (path, attributes)
        for button in re.findall(r"<button\b[^>]*>([^<]*)</button>", page):
            assert button.strip(), path
        assert page.count("<table>") == page.count("<caption>"), path
        assert page.count("<table>") <= page.count('<th scope="col">'), path


async def test_an_approval_whose_link_is_not_http_links_to_its_page_here(http: httpx2.AsyncClient) -> None:
    await _sign_in(http)
    page = (await http.get("/admin/approvals")).text
    assert 'href="/approvals/ap1"' in page  # its link was javascript:
    assert 'href="/approvals/ap2%3Cscript%3E' in page  # no link given: the id, quoted
    assert 'href="javascript:' not in page


async def test_a_read_the_service_refuses_or_that_fails_is_a_page_saying_so(
    http: httpx2.AsyncClient, backend: FakeBackend, caplog: pytest.LogCaptureFixture
) -> None:
    await _sign_in(http)
    backend.broken = "credentials"
    refused = await http.get("/admin/credentials")
    assert refused.status_code == 503
    assert "the store is unreachable &lt;script&gt;" in refused.text
    assert refused.headers["x-frame-options"] == "DENY"
    backend.broken = "crash"
    failed = await http.get("/admin/credentials")
    assert failed.status_code == 500
    assert "the log says why" in failed.text
    assert "a bug" not in failed.text  # details only in the log
    assert "a bug" in caplog.text
    backend.broken = "buckets"  # the overview still shows, saying why the buckets are not listed
    overview = await http.get("/admin/")
    assert overview.status_code == 200
    assert 'id="buckets-problem">the store could not be asked &lt;script&gt;' in overview.text
    assert "2 servers, 1 failing" in overview.text
    backend.broken = ""
    assert (await http.get("/admin/credentials")).status_code == 200


async def test_a_jwt_holding_the_admin_role_signs_in_and_one_without_it_does_not(
    http: httpx2.AsyncClient,
) -> None:
    staff = await _sign_in(http, sign(claims(sub="dana", roles=["staff"])))
    assert staff.status_code == 403
    expired = await _sign_in(http, sign(claims(lifetime=-120, sub="erin", roles=["admin"])))
    assert expired.status_code == 401
    admin = await _sign_in(http, sign(claims(sub="erin", roles=["admin"])))
    assert admin.status_code == 303
    assert "Signed in as erin" in (await http.get("/admin/")).text


async def test_a_sign_in_ends_once_its_credential_is_no_longer_accepted(
    backend: FakeBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key removed by a reload, a token past its expiry: the console asks again every request."""
    app = _app(backend)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=ORIGIN) as http:
        await _sign_in(http)
        assert (await http.get("/admin/")).status_code == 200

        async def no_more(self: Authenticator, headers: Any, client: str | None = None) -> Rejected:
            return Rejected(FailureReason.INVALID, "unknown API key")

        monkeypatch.setattr(Authenticator, "authenticate", no_more)
        assert (await http.get("/admin/")).status_code == 303
        monkeypatch.undo()
        assert (await http.get("/admin/")).status_code == 303  # ended, not merely refused once


async def test_a_sign_in_form_without_its_token_and_cookie_signs_nobody_in(http: httpx2.AsyncClient) -> None:
    """Login CSRF: a page elsewhere posting its own credential into this browser's console."""
    shown = await http.get("/admin/signin")
    token = _csrf(shown.text)
    http.cookies.clear()
    without_cookie = await http.post(
        "/admin/signin", data={"credential": ADMIN_KEY, "csrf": token}, headers={"origin": ORIGIN}
    )
    assert without_cookie.status_code == 403
    await http.get("/admin/signin")  # a cookie again, for another token
    for form in ({"credential": ADMIN_KEY}, {"credential": ADMIN_KEY, "csrf": token + "x"}):
        refused = await http.post("/admin/signin", data=form, headers={"origin": ORIGIN})
        assert refused.status_code == 403
        assert "out of date" in refused.text
        assert COOKIE + "=" not in refused.headers.get("set-cookie", "").replace(COOKIE + "_signin=", "")
    assert (await http.get("/admin/")).status_code == 303
    assert (await _sign_in(http)).status_code == 303  # the form as served works
