"""Manifold's OAuth callback, ``/oauth/callback``: where a user's browser lands after signing in to
a server's authorization server (the ``oauth`` credentials mode).

It completes the sign-in the ``state`` names (:meth:`proxy.credentials.on_behalf.OnBehalf.complete`:
single use, bound to the identity and server it was made for, ``iss`` checked, the code
exchanged with that sign-in's PKCE verifier) and shows a page saying it worked, or why not; the
call that asked for the sign-in is then retried. Nothing here is taken from the browser but the
query: no cookie is read or set. Served under the same Host check as ``/mcp``; the page loads
nothing and may not be framed.
"""

from __future__ import annotations

import html
import logging
from typing import Final

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from proxy.credentials.oauth_client import OAuthClientError
from proxy.credentials.on_behalf import CallbackRefused, OnBehalf
from proxy.inbound.http import OriginPolicy

__all__ = ["CALLBACK_PATH", "signin_routes"]

logger = logging.getLogger("proxy.inbound.signin_page")

CALLBACK_PATH: Final = "/oauth/callback"
_MAX_QUERY: Final = 8 * 1024
_HEADERS: Final = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",  # the page's URL holds a used code: tell nobody
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
}


def _page(title: str, text: str, status: int) -> Response:
    e = html.escape
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)} · Manifold</title>"
        "<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}"
        "</style></head><body><main>"
        f'<h1>{e(title)}</h1><p id="outcome">{e(text)}</p></main></body></html>'
    )
    return HTMLResponse(body, status_code=status, headers=_HEADERS)


def signin_routes(on_behalf: OnBehalf, origins: OriginPolicy) -> list[Route]:
    async def callback(request: Request) -> Response:
        headers = request.headers
        if not origins.host_ok(headers.get("host")) or not origins.origin_ok(headers.get("origin")):
            return Response("Forbidden: Origin or Host not allowed\n", status_code=403)
        if len(request.url.query) > _MAX_QUERY:
            return _page("Sign-in failed", "The answer is too long.", 414)
        query = dict(request.query_params.items())
        try:
            _, server_id = await on_behalf.complete(query)
        except CallbackRefused as exc:
            logger.info("a sign-in callback was refused: %s", exc)
            return _page("Sign-in failed", str(exc), 400)
        except OAuthClientError as exc:
            logger.warning("a sign-in callback could not be completed: %s", exc)
            return _page("Sign-in failed", "The authorization server could not be reached.", 502)
        return _page(
            "Signed in",
            f"Manifold can now reach {server_id} as you. Close this page and go back to your client: "
            "the call goes on.",
            200,
        )

    return [Route(CALLBACK_PATH, callback, methods=["GET"])]
