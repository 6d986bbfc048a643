"""Manifold's sign-in pages for the ``oauth`` credentials mode: ``/oauth/start``, the link a user
is given, and ``/oauth/callback``, where their browser lands after signing in to a server's
authorization server.

The start page binds the browser to the user who asked. GET shows a form; POST takes the
user's Manifold credential (an API key or token, as sent to ``/mcp``; checked once, not kept),
which must authenticate as the identity the sign-in was made for
(:meth:`proxy.credentials.on_behalf.OnBehalf.start`). Then the browser gets a cookie bound to the
``state`` (HttpOnly, SameSite=Lax, Secure when the callback is https, scoped to these pages) and
is sent on to the authorization server. The POST must come from this page (``Origin`` present
and allowed, ``Sec-Fetch-Site`` not cross-site): another site cannot make a visitor's browser
start somebody else's sign-in. Starts are rate-limited per address (a credential is checked).

The callback requires that cookie, then completes the sign-in the ``state`` names
(:meth:`~proxy.credentials.on_behalf.OnBehalf.complete`: single use, bound to the identity and
server it was made for, ``iss`` checked, the code exchanged with that sign-in's PKCE verifier)
and shows a page saying it worked, or why not; the call that asked for the sign-in is then
retried. Served under the same Host check as ``/mcp``; the pages load nothing and may not be
framed.
"""

from __future__ import annotations

import html
import logging
from typing import Final
from urllib.parse import parse_qs, urlsplit

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from proxy.auth.authenticator import Authenticated, Authenticator
from proxy.credentials.oauth_client import OAuthClientError
from proxy.credentials.on_behalf import CallbackRefused, OnBehalf
from proxy.credentials.store import StoreError
from proxy.inbound.pages import PAGE_HEADERS, CredentialFlood, address_of
from proxy.inbound.pages import refused as refused_here
from proxy.inbound.streamable_http import OriginPolicy

__all__ = ["CALLBACK_PATH", "START_PATH", "signin_routes"]

logger = logging.getLogger("proxy.inbound.signin_page")

CALLBACK_PATH: Final = "/oauth/callback"
START_PATH: Final = "/oauth/start"
_MAX_QUERY: Final = 8 * 1024
_MAX_FORM: Final = 16 * 1024
# Each start checks a credential: one every 2 s per address after a burst of 30 (as the approval page).
_START_INTERVAL: Final = 2.0
_START_BURST: Final = 30
# What keeping or reading a sign-in may raise besides a refusal: answered with a page, never a 500.
_STORE_FAILED: Final = (StoreError, RedisError, OSError, ValueError)
_UNAVAILABLE: Final = "Manifold cannot keep your sign-in right now. Try again in a moment from your client."


def _page(title: str, text: str, status: int, form: str = "") -> Response:
    e = html.escape
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)} · Manifold</title>"
        "<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}"
        "</style></head><body><main>"
        f'<h1>{e(title)}</h1><p id="outcome">{e(text)}</p>{form}</main></body></html>'
    )
    headers = dict(PAGE_HEADERS)
    if not form:
        headers["referrer-policy"] = "no-referrer"
    return HTMLResponse(body, status_code=status, headers=headers)


def _start_form(state: str) -> str:
    e = html.escape
    return (
        '<form method="post" action="start">'
        f'<input type="hidden" name="state" value="{e(state)}">'
        '<label for="credential">Your Manifold API key or token</label> '
        '<input id="credential" name="credential" type="password" autocomplete="off" required>'
        ' <button type="submit">Continue</button></form>'
    )


def signin_routes(on_behalf: OnBehalf, auth: Authenticator, origins: OriginPolicy) -> list[Route]:
    callback_parts = urlsplit(on_behalf.callback_url)
    secure = callback_parts.scheme == "https"
    cookie_path = callback_parts.path.rsplit("/", 1)[0] + "/" if callback_parts.path else "/"
    flood_guard = CredentialFlood(_START_INTERVAL, _START_BURST)

    def flooded(request: Request) -> Response | None:
        return flood_guard.refusal([f"signin-start:{address_of(request)}"])

    def refused(request: Request, *, post: bool) -> Response | None:
        return refused_here(request, origins, post=post, what="a sign-in must be started from its page")

    async def show_start(request: Request) -> Response:
        if (refusal := refused(request, post=False)) is not None:
            return refusal
        state = request.query_params.get("state", "")
        if not state or len(state) > 256:
            return _page("Sign-in failed", "This sign-in link is incomplete.", 400)
        return _page(
            "Sign in to a server",
            "Manifold asks you to sign in to a server it reaches for you. First say who you are: "
            "the credential your client uses with Manifold. It is checked once and not kept.",
            200,
            _start_form(state),
        )

    async def start(request: Request) -> Response:
        if (refusal := refused(request, post=True)) is not None:
            return refusal
        if (refusal := flooded(request)) is not None:
            return refusal
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM:
                return Response("Request body too large\n", status_code=413)
        try:
            form = {k: v[0] for k, v in parse_qs(body.decode(), max_num_fields=4).items()}
        except (UnicodeDecodeError, ValueError):
            form = {}
        state = form.get("state", "")
        verdict = await auth.authenticate({"authorization": f"Bearer {form.get('credential', '').strip()}"})
        if not isinstance(verdict, Authenticated):
            return _page("Sign-in failed", f"Your credential was not accepted: {verdict.message}.", 401)
        try:
            authorize = await on_behalf.start(state, verdict.identity)
        except CallbackRefused as exc:
            logger.info("a sign-in start was refused: %s", exc)
            return _page("Sign-in failed", str(exc), 403)
        except _STORE_FAILED as exc:
            logger.error("a sign-in could not be read: %s: %s", type(exc).__name__, exc)
            return _page("Sign-in failed", _UNAVAILABLE, 503)
        name, value = on_behalf.cookie(state)
        response = RedirectResponse(authorize, status_code=303, headers={"cache-control": "no-store"})
        response.set_cookie(
            name,
            value,
            max_age=max(1, int(on_behalf.signin_ttl)),
            path=cookie_path,
            secure=secure,
            httponly=True,
            samesite="lax",
        )
        return response

    async def callback(request: Request) -> Response:
        if (refusal := refused(request, post=False)) is not None:
            return refusal
        if len(request.url.query) > _MAX_QUERY:
            return _page("Sign-in failed", "The answer is too long.", 414)
        query = dict(request.query_params.items())
        try:
            _, server_id = await on_behalf.complete(query, request.cookies)
        except CallbackRefused as exc:
            logger.info("a sign-in callback was refused: %s", exc)
            return _page("Sign-in failed", str(exc), 400)
        except OAuthClientError as exc:
            logger.warning("a sign-in callback could not be completed: %s", exc)
            return _page("Sign-in failed", "The authorization server could not be reached.", 502)
        except _STORE_FAILED as exc:
            logger.error("a sign-in callback could not be kept: %s: %s", type(exc).__name__, exc)
            return _page("Sign-in failed", _UNAVAILABLE, 503)
        response = _page(
            "Signed in",
            f"Manifold can now reach {server_id} as you. Close this page and go back to your client: "
            "the call goes on.",
            200,
        )
        name, _ = on_behalf.cookie(query.get("state", ""))
        response.delete_cookie(name, path=cookie_path, secure=secure, httponly=True, samesite="lax")
        return response

    return [
        Route(START_PATH, show_start, methods=["GET"]),
        Route(START_PATH, start, methods=["POST"]),
        Route(CALLBACK_PATH, callback, methods=["GET"]),
    ]
