"""Which HTTP redirects a request to a server may follow: within the configured origin only.

The URL an operator configures for a server is the contract: the configured headers (API keys,
bearer tokens), the URL's own credentials, the session id and every message body are meant for
that origin and no other. A server (or whoever answers in its name) that redirects elsewhere is
refused, not followed:

- another origin (scheme, host or port differ): refused. Following without the configured
  headers would still hand the message itself (a tool's arguments, the session id) to a host
  nobody configured, and a server that moved is fixed by configuring its new URL;
- ``https`` → ``http``: refused, always (it is another origin too, named as the downgrade);
- a ``Location`` carrying credentials (``user:pass@``), or a scheme other than http(s): refused;
- a 301/302/303 answer to anything but GET/HEAD: refused, because it turns the request into a
  GET and drops its body (the MCP message); 307 and 308 keep method and body and are followed;
- within the origin: followed with every header, at most 10 requests in a row
  (:data:`proxy.outbound.over_http.h1.MAX_REDIRECTS`).

:func:`refusal` decides (pure); :func:`follow` enforces it for the HTTP client
(:mod:`proxy.outbound.over_http.h1`), once per hop, before it would follow: a refused hop is never sent.
The refusal is logged (warning, URLs redacted) and raised as :class:`RedirectRefused`, which the
transports turn into the request's :class:`~proxy.core.errors.ServerUnavailable` like any other
transport failure.
"""

from __future__ import annotations

import logging
from typing import Final

import yarl

from proxy.core.redaction import redact_url

__all__ = ["REDIRECTS", "RedirectRefused", "follow", "refusal", "same_origin"]

logger = logging.getLogger("proxy.outbound.over_http.redirects")

REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})  # the statuses that are followed
_KEEP_METHOD: Final = frozenset({307, 308})
_SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
_SCHEMES: Final = frozenset({"http", "https"})


class RedirectRefused(Exception):
    """A server redirected a request where Manifold will not follow; the message says why."""


def refusal(method: str, status: int, source: yarl.URL, location: str | None) -> str | None:
    """Why the redirect ``status`` → ``location`` of ``method`` ``source`` must not be followed,
    or None when it may be (within the origin, method and body kept). URLs in the reason are
    redacted."""
    if status not in REDIRECTS or location is None:
        return None  # not a redirect that would be followed
    shown = redact_url(location)
    try:
        given = yarl.URL(location)
        target = source.join(given)
        same = same_origin(target, source)
    except ValueError:
        return f"HTTP {status} to an unreadable Location {shown!r}"
    if target.scheme not in _SCHEMES:
        return f"HTTP {status} to {shown}: not an http(s) URL"
    if source.scheme == "https" and target.scheme == "http":
        return f"HTTP {status} from https to {shown}: a downgrade to plain http"
    if not same:
        return (
            f"HTTP {status} to {shown}, another origin than the configured {source.origin()}; "
            "redirects are followed within the configured origin only (configure the new URL)"
        )
    if given.user is not None or given.password is not None:
        return f"HTTP {status} to {shown}: a Location carrying credentials"
    if status not in _KEEP_METHOD and method.upper() not in _SAFE_METHODS:
        return (
            f"HTTP {status} to {shown} would turn the {method.upper()} into a GET and drop the "
            "message; only 307 and 308 keep it"
        )
    return None


def same_origin(one: yarl.URL, other: yarl.URL) -> bool:
    """Whether two URLs share RFC 6454's origin: scheme, host and port (a default port spelled
    out or not). Userinfo, path and query do not count."""
    return (one.scheme.lower(), (one.host or "").lower(), one.port) == (
        other.scheme.lower(),
        (other.host or "").lower(),
        other.port,
    )


def follow(server_id: str, method: str, status: int, source: yarl.URL, location: str) -> yarl.URL:
    """Where the redirect ``status`` → ``location`` of ``method`` ``source`` goes, if it may be
    followed (:func:`refusal`).

    Raises:
        RedirectRefused: it may not; the refusal is logged as ``server_id``'s first.
    """
    why = refusal(method, status, source, location)
    if why is not None:
        logger.warning(
            "server %r: %s %s: redirect refused: %s",
            server_id,
            method,
            redact_url(str(source)),
            why,
            extra={"server_id": server_id},
        )
        raise RedirectRefused(f"redirect refused: {why}")
    return source.join(yarl.URL(location))
