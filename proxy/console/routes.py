"""The console's HTTP side: ``/admin/`` and its pages, sign-in and sign-out, and the forms.

Who may use it: a credential the API takes (an API key, a JWT or an OAuth access token, pasted
on the sign-in page) whose identity holds one of the admin roles. Signing in keeps it in this
process, or sealed in Redis for every replica (:mod:`proxy.console.signins`,
:mod:`proxy.console.shared_signins`), under a fresh id; the browser holds only that id, in a
cookie that is ``HttpOnly``, ``SameSite=Strict``, scoped to ``/admin/`` and ``Secure`` unless the
page is served on loopback. Each request authenticates the kept credential again.

Every POST (each one changes something) must come from the console itself: its ``Origin`` is the
page's own (another loopback port is another site) and ``Sec-Fetch-Site``, when sent, is
``same-origin``; besides, every form but sign-in carries the sign-in's CSRF token. A page is
answered with :data:`~proxy.console.markup.CONSOLE_HEADERS` (no script, no framing). Sign-ins are
rate-limited per address (each checks a credential).

What a page shows and does is the :class:`~proxy.console.backend.Backend`'s; the pages render it
(:mod:`proxy.console.pages_servers`, :mod:`proxy.console.pages_access`,
:mod:`proxy.console.pages_people`).
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from proxy.auth.authenticator import Authenticated, Authenticator
from proxy.console import pages_access, pages_people, pages_servers
from proxy.console.backend import Backend, Refused
from proxy.console.markup import CONSOLE_HEADERS, STYLESHEET, Html, page
from proxy.console.shared_signins import Unavailable
from proxy.console.shown import Act, Build, Shown
from proxy.console.signins import COOKIE, SIGNIN_COOKIE, SignIn, SignIns, SignInStore, csrf_ok
from proxy.core.identity import Identity
from proxy.inbound.pages import CredentialFlood, address_of, own_origin, read_form
from proxy.inbound.pages import refused as refused_here
from proxy.inbound.streamable_http import OriginPolicy

__all__ = ["PREFIX", "Viewer", "console_routes"]

logger = logging.getLogger("proxy.console")

PREFIX: Final = "/admin"
_MAX_FORM: Final = 256 * 1024  # a pasted config for the reload plan
_MAX_FIELDS: Final = 16
_LOOPBACK: Final = frozenset({"127.0.0.1", "::1", "[::1]", "localhost"})
_MAX_COOKIES: Final = 64
_SIGNIN_INTERVAL: Final = 2.0  # each sign-in checks a credential: one per 2 s after a burst
_SIGNIN_BURST: Final = 20
_SIGN_IN_FIRST: Final = page(
    "Sign in first",
    [Html('<p>You are not signed in, or your sign-in ended: <a href="/admin/signin">sign in</a>.</p>')],
)
_NOT_ADMIN: Final = "This credential does not hold an admin role: it cannot use the console."


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking at a page: their identity, their form token, where they are."""

    identity: Identity
    csrf: str
    address: str


Limit = tuple[float, int]  # (seconds a request, burst)
Handler = Callable[[Request, Viewer, dict[str, str]], Awaitable[Response]]


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=CONSOLE_HEADERS)


async def _bounded(request: Request, made: Awaitable[Shown]) -> Shown:
    """The console's fault boundary: a read or act the service refuses, or one that fails,
    becomes a page saying so (the failure's details only in the log)."""
    try:
        return await made
    except Refused as exc:
        return Shown("Not now", [Html("<p>Try again in a moment.</p>")], "", ("bad", exc.message), exc.status)
    except Exception:  # the boundary: anything else is ours, logged once with where it happened
        logger.exception("console page %s %s failed", request.method, request.url.path)
        notice = ("bad", "This page could not be made: the log says why.")
        return Shown("Something went wrong", [Html("<p>Try again in a moment.</p>")], "", notice, 500)


def _redirect(page: str) -> RedirectResponse:
    """303 to a console page, with the pages' headers (no framing, no caching)."""
    return RedirectResponse(f"{PREFIX}/{page}", status_code=303, headers=CONSOLE_HEADERS)


def _signin_page(request: Request, message: str = "", status: int = 200) -> HTMLResponse:
    """The sign-in form, with a fresh form token that a cookie of its own also holds (the form
    must come back with both: a page elsewhere cannot sign this browser in as someone else)."""
    token = secrets.token_urlsafe(24)
    body = [
        Html(
            '<form method="post" action="/admin/signin">'
            f'<input type="hidden" name="csrf" value="{token}">'
            '<label for="credential">Your API key or token (an admin\'s)</label>'
            '<input id="credential" name="credential" type="password" autocomplete="off" required '
            'aria-describedby="credential-help" size="60">'
            '<p id="credential-help">The credential you use with the admin API. It is kept on the '
            "server for this sign-in only; your browser holds a random id.</p>"
            '<button type="submit" class="primary" id="signin">Sign in</button></form>'
        )
    ]
    notice = ("bad", message) if message else None
    response = _html(page("Sign in", body, notice=notice), status)
    response.set_cookie(
        SIGNIN_COOKIE,
        token,
        max_age=3600,
        path=f"{PREFIX}/signin",
        secure=_secure(request),
        httponly=True,
        samesite="strict",
    )
    return response


def _cookies(request: Request, cookie: str = COOKIE) -> list[str]:
    """Every value the request's Cookie headers give ``cookie``, most specific path first.

    Not ``request.cookies``, which keeps one value per name (the last): a cookie planted for
    ``/`` by another page of this host (ports do not separate cookies) would hide the console's
    own, and sign the operator out."""
    found = []
    for name, value in request.headers.items():
        if name != "cookie":
            continue
        for part in value.split(";")[:_MAX_COOKIES]:
            key, _, held = part.strip().partition("=")
            if key == cookie and held:
                found.append(held.strip('"'))
    return found[:_MAX_COOKIES]


def _secure(request: Request) -> bool:
    host = (request.url.hostname or "").lower()
    return request.url.scheme == "https" or host not in _LOOPBACK


def console_routes(
    backend: Backend,
    auth: Authenticator,
    origins: OriginPolicy,
    admin_roles: Collection[str],
    *,
    grafana_url: str | None = None,
    requests: Limit = (0.05, 40),
    writes: Limit = (2.0, 10),
    clock: Callable[[], float] = time.time,
    sign_ins: SignInStore | None = None,
) -> list[Route]:
    """The console's routes under :data:`PREFIX`. ``requests``: each address's pages, and
    ``writes``: each admin's forms, as ``(seconds a request, burst)`` (``admin.requests`` and
    ``admin.writes``, as the API's)."""
    signed: SignInStore = sign_ins if sign_ins is not None else SignIns()
    flood = CredentialFlood(_SIGNIN_INTERVAL, _SIGNIN_BURST)
    paced, acted = CredentialFlood(*requests), CredentialFlood(*writes)
    roles = frozenset(admin_roles)

    def is_admin(identity: Identity) -> bool:
        return identity.authenticated and not identity.roles.isdisjoint(roles)

    def post_refused(request: Request) -> Response | None:
        what = "a console form must be sent from the console"
        if (refusal := refused_here(request, origins, post=True, what=what)) is not None:
            return refusal
        if not own_origin(request) or request.headers.get("sec-fetch-site") not in (None, "same-origin"):
            return Response(f"Forbidden: {what}\n", status_code=403)
        return None

    async def viewer(request: Request) -> tuple[Viewer | None, SignIn | None]:
        now = clock()
        sign_in_id, record = "", None
        for value in _cookies(request):
            if (record := await signed.get(value, now=now)) is not None:
                sign_in_id = value
                break
        if record is None:
            return None, None
        verdict = await auth.authenticate(
            {"authorization": f"Bearer {record.credential}"}, address_of(request)
        )
        if not isinstance(verdict, Authenticated) or not is_admin(verdict.identity):
            await signed.end(sign_in_id)  # revoked, expired or no longer an admin
            return None, None
        return Viewer(verdict.identity, record.csrf, address_of(request)), record

    def read(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if (refusal := refused_here(request, origins, post=False, what="")) is not None:
                return refusal
            if (refusal := paced.refusal([f"console:{address_of(request)}"])) is not None:
                return refusal
            who, _ = await viewer(request)
            if who is None:
                return _redirect("signin")
            query = {k: v[:512] for k, v in list(request.query_params.items())[:_MAX_FIELDS]}
            return await handler(request, who, query)

        return endpoint

    def act(handler: Handler, *, limited: bool = True) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if (refusal := post_refused(request)) is not None:
                return refusal
            if (refusal := paced.refusal([f"console:{address_of(request)}"])) is not None:
                return refusal
            who, record = await viewer(request)
            if who is None or record is None:
                return _html(_SIGN_IN_FIRST, 403)  # the same body whatever was asked
            form = await read_form(request, max_bytes=_MAX_FORM, max_fields=_MAX_FIELDS)
            if form is None:
                return Response("Request body too large\n", status_code=413)
            if not csrf_ok(record, form.get("csrf", "")):
                body = [Html("<p>Open the page again and repeat what you did.</p>")]
                notice = ("bad", "This form is out of date or was not sent from the console.")
                return _html(page("Refused", body, who=who.identity.name, csrf=who.csrf, notice=notice), 403)
            writer = "console-write:" + "\0".join(who.identity.key)
            if limited and (refusal := acted.refusal([writer])) is not None:
                return refusal
            return await handler(request, who, form)

        return endpoint

    async def show_signin(request: Request) -> Response:
        if (refusal := refused_here(request, origins, post=False, what="")) is not None:
            return refusal
        return _signin_page(request)

    async def sign_in(request: Request) -> Response:
        if (refusal := post_refused(request)) is not None:
            return refusal
        if (refusal := flood.refusal([f"console-signin:{address_of(request)}"])) is not None:
            return refusal
        form = await read_form(request, max_bytes=16 * 1024, max_fields=4)
        if form is None:
            return Response("Request body too large\n", status_code=413)
        sent = form.get("csrf", "").encode()
        if not any(hmac.compare_digest(sent, held.encode()) for held in _cookies(request, SIGNIN_COOKIE)):
            return _signin_page(request, "This form is out of date or was not sent from the console.", 403)
        credential = form.get("credential", "").strip()
        verdict = await auth.authenticate({"authorization": f"Bearer {credential}"}, address_of(request))
        if not isinstance(verdict, Authenticated) or not verdict.identity.authenticated:
            message = verdict.message if not isinstance(verdict, Authenticated) else "no credential given"
            return _signin_page(request, f"Your credential was not accepted: {message}.", 401)
        if not is_admin(verdict.identity):
            return _signin_page(request, _NOT_ADMIN, 403)
        for held in _cookies(request):  # whatever the browser held before is gone
            await signed.end(held)
        try:
            sign_in_id, _ = await signed.start(credential, now=clock())
        except Unavailable:
            return _signin_page(request, "Sign-ins are kept in Redis, which cannot be reached now.", 503)
        response = _redirect("")
        response.set_cookie(
            COOKIE, sign_in_id, path=f"{PREFIX}/", secure=_secure(request), httponly=True, samesite="strict"
        )
        response.delete_cookie(
            SIGNIN_COOKIE, path=f"{PREFIX}/signin", secure=_secure(request), httponly=True, samesite="strict"
        )
        return response

    async def sign_out(request: Request, who: Viewer, form: dict[str, str]) -> Response:
        for held in _cookies(request):
            await signed.end(held)
        response = _redirect("signin")
        response.delete_cookie(
            COOKIE, path=f"{PREFIX}/", secure=_secure(request), httponly=True, samesite="strict"
        )
        return response

    async def stylesheet(request: Request) -> Response:
        headers = {**CONSOLE_HEADERS, "cache-control": "max-age=300"}
        return Response(STYLESHEET, media_type="text/css", headers=headers)

    def render(who: Viewer, shown: Shown) -> Response:
        body = page(
            shown.title,
            shown.body,
            current=shown.current,
            who=who.identity.name,
            csrf=who.csrf,
            notice=shown.notice,
        )
        return _html(body, shown.status)

    def reading(build: Build) -> Handler:
        async def handler(request: Request, who: Viewer, query: dict[str, str]) -> Response:
            made = build(backend, who.csrf, query | dict(request.path_params))
            return render(who, await _bounded(request, made))

        return handler

    def acting(build: Act) -> Handler:
        async def handler(request: Request, who: Viewer, form: dict[str, str]) -> Response:
            fields = form | dict(request.path_params)
            made = build(backend, who.csrf, fields, who.identity, who.address)
            return render(who, await _bounded(request, made))

        return handler

    reads: dict[str, Build] = {
        "/": pages_servers.overview_page(grafana_url),
        "/servers/{server_id:path}": pages_servers.server_page,
        "/catalog": pages_access.catalog_page,
        "/policy": pages_access.policy_page,
        "/sessions": pages_people.sessions_page,
        "/approvals": pages_people.approvals_page,
        "/credentials": pages_people.credentials_page,
        "/audit": pages_people.audit_page,
        "/reload": pages_servers.reload_page,
    }
    acts: dict[str, Act] = {
        "/servers/{server_id:path}/restart": pages_servers.restart,
        "/servers/{server_id:path}/drain": pages_servers.drain,
        "/tools/off": pages_access.tool_off,
        "/tools/on": pages_access.tool_on,
        "/sessions/end": pages_people.end_session,
        "/credentials/revoke": pages_people.revoke,
        "/reload": pages_servers.reload_act,
    }
    return [
        Route(f"{PREFIX}/console.css", stylesheet, methods=["GET"]),
        Route(f"{PREFIX}/signin", show_signin, methods=["GET"]),
        Route(f"{PREFIX}/signin", sign_in, methods=["POST"]),
        Route(f"{PREFIX}/signout", act(sign_out, limited=False), methods=["POST"]),
        *(Route(PREFIX + path, read(reading(build)), methods=["GET"]) for path, build in reads.items()),
        *(Route(PREFIX + path, act(acting(build)), methods=["POST"]) for path, build in acts.items()),
    ]
