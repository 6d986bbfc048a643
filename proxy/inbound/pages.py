"""What every HTML page Manifold serves shares (the approval page, the sign-in pages).

Security headers, the Origin and Host check a page's requests pass (as ``/mcp``'s, plus a
same-origin form post and the page's own public origin), and a flood guard for pages that
check a credential: each check costs a hash or a round trip to an identity provider, so they
are bounded per key (an address, an approval) and answered 429 with ``Retry-After`` past it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from proxy.inbound.streamable_http import OriginPolicy
from proxy.ratelimit import LimitCheck, MemoryBackend

__all__ = ["PAGE_HEADERS", "CredentialFlood", "address_of", "own_origin", "read_form", "refused"]

PAGE_HEADERS: Final = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    # Not no-referrer: under it a browser posts a form with "Origin: null", which is refused.
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
}


def address_of(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


def own_origin(request: Request, public: str = "") -> bool:
    """A POST's Origin is the page's own: the Host asked (same scheme), or ``public`` (the
    origin the page's links name). Another origin ``/mcp`` would accept is another page."""
    origin = (request.headers.get("origin") or "").rstrip("/").lower()
    host = (request.headers.get("host") or "").lower()
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    if public and origin == public:
        return True
    return bool(host) and parts.netloc == host and parts.scheme == request.url.scheme


async def read_form(request: Request, *, max_bytes: int, max_fields: int) -> dict[str, str] | None:
    """A urlencoded form body, first value per name: None past ``max_bytes`` (answer 413);
    an undecodable body or one with more than ``max_fields`` fields reads as empty."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            return None
    try:
        return {k: v[0] for k, v in parse_qs(body.decode(), max_num_fields=max_fields).items()}
    except (UnicodeDecodeError, ValueError):
        return {}


def _same_origin(origin: str, host: str) -> bool:
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def refused(
    request: Request, origins: OriginPolicy, *, post: bool, what: str, public: str = ""
) -> Response | None:
    """403 unless the request's Host and Origin may reach a page, as for ``/mcp``; besides those,
    ``public`` (an origin such as ``https://gw.example.com`` the page's links name) and an Origin
    naming the very Host asked (a same-origin form post). A POST must carry an Origin and not be
    cross-site: ``what`` says where it must come from."""
    headers = request.headers
    origin, host = headers.get("origin"), headers.get("host")
    linked = urlsplit(public).netloc if public else ""
    host_ok = origins.host_ok(host) or (bool(linked) and host is not None and host.lower() == linked)
    origin_ok = (
        origins.origin_ok(origin)
        or (bool(public) and origin is not None and origin.rstrip("/").lower() == public)
        or (origin is not None and host is not None and _same_origin(origin, host))
    )
    if not origin_ok or not host_ok:
        return Response("Forbidden: Origin or Host not allowed\n", status_code=403)
    if post and (origin is None or headers.get("sec-fetch-site") == "cross-site"):
        return Response(f"Forbidden: {what}\n", status_code=403)
    return None


class CredentialFlood:
    """One bucket per key (GCRA in memory): ``interval`` seconds a check after a ``burst``."""

    def __init__(self, interval: float, burst: int) -> None:
        self._interval, self._burst = interval, burst
        self._buckets = MemoryBackend()

    def refusal(self, keys: Iterable[str]) -> Response | None:
        """None while every key has room (spending one of each), else the 429 to answer."""
        checks = [LimitCheck(key, self._interval, self._burst, "http") for key in keys]
        outcome = self._buckets.hit_now(checks)
        if outcome.allowed:
            return None
        wait = str(max(1, math.ceil(outcome.retry_after)))
        return Response(
            f"Too Many Requests: try again in {wait} s\n", status_code=429, headers={"retry-after": wait}
        )
