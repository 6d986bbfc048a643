"""An authorization server's metadata (RFC 8414 / OpenID Connect Discovery), and its keys.

The well-known URLs are tried in the order the MCP authorization spec gives (path insertion for
RFC 8414, then OpenID Connect with insertion, then with appending); the first document whose
``issuer`` is *identical* to the configured issuer is used, any other is refused (RFC 8414
§3.3: a document served for another issuer is how a mix-up attack starts).

:class:`DiscoveredKeys` is a :class:`~proxy.auth.jwks.KeySource`: it finds the ``jwks_uri`` in
the metadata and then behaves as a :class:`~proxy.auth.jwks.JwksUrl`. An identity provider that
is down at start does not keep Manifold down: discovery is retried in the background, and its
tokens are refused until it succeeds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import anyio.abc

from proxy.auth.jwks import Fetch, JwksError, JwksUrl, SigningKey, fetch_url
from proxy.config.oauth import OAuthSettings, check_https_url

__all__ = ["DiscoveredKeys", "ServerMetadata", "check_servers", "metadata_urls", "parse_metadata"]

logger = logging.getLogger("proxy.auth.discovery")

_RETRY_AT_MOST: Final = 60.0  # seconds between discovery attempts while it fails


def metadata_urls(issuer: str) -> list[str]:
    """Where the metadata of ``issuer`` may be, in the order to try them."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    if not path:
        return [
            f"{origin}/.well-known/oauth-authorization-server",
            f"{origin}/.well-known/openid-configuration",
        ]
    return [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}/.well-known/openid-configuration{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    """What Manifold needs from an authorization server's metadata."""

    issuer: str
    jwks_uri: str | None
    introspection_endpoint: str | None


def parse_metadata(data: bytes, issuer: str, origin: str) -> ServerMetadata:
    """The metadata document ``data`` fetched from ``origin``, if it is ``issuer``'s.

    Raises:
        JwksError: not JSON, not an object, or its ``issuer`` is not exactly ``issuer``.
    """
    try:
        document: Any = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise JwksError(f"{origin}: not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise JwksError(f"{origin}: not a metadata document (not an object)")
    if document.get("issuer") != issuer:
        raise JwksError(
            f"{origin}: the document's issuer {document.get('issuer')!r} is not {issuer!r} "
            "(RFC 8414 §3.3: not used)"
        )

    def url(name: str) -> str | None:
        value = document.get(name)
        if not isinstance(value, str):
            return None
        try:
            # Keys or tokens over plain HTTP could be swapped or read by anyone on the path.
            return check_https_url(value, what=name)
        except ValueError as exc:
            logger.warning("%s: %s: not used", origin, exc)
            return None

    return ServerMetadata(issuer, url("jwks_uri"), url("introspection_endpoint"))


class DiscoveredKeys:
    """An authorization server's metadata and signing keys, found from its issuer."""

    def __init__(
        self,
        issuer: str,
        *,
        metadata_url: str | None = None,
        fetch: Fetch | None = None,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self._urls = [metadata_url] if metadata_url is not None else metadata_urls(issuer)
        self._fetch = fetch if fetch is not None else lambda u: fetch_url(u, timeout=timeout)
        self._timeout = timeout
        self._clock = clock
        self.metadata: ServerMetadata | None = None
        self.tried = tuple(self._urls)
        self._keys: JwksUrl | None = None
        self._lock = anyio.Lock()
        self._last_try: float | None = None

    async def discover(self) -> ServerMetadata | None:
        """Fetch the metadata now (each URL in turn); None, with a warning, if none is usable."""
        problems: list[str] = []
        for url in self._urls:
            try:
                with anyio.fail_after(self._timeout):
                    data = await self._fetch(url)
                metadata = parse_metadata(data, self.issuer, url)
            except (JwksError, TimeoutError) as exc:
                problems.append(str(exc) or f"{url}: no answer in {self._timeout:g} s")
                continue
            if metadata.jwks_uri is None:
                problems.append(f"{url}: no jwks_uri: JWT access tokens cannot be verified")
            self.metadata = metadata
            if metadata.jwks_uri is not None and self._keys is None:
                self._keys = JwksUrl(
                    metadata.jwks_uri, fetch=self._fetch, timeout=self._timeout, clock=self._clock
                )
                await self._keys.refresh()
            return metadata
        logger.warning("authorization server %s: metadata not found: %s", self.issuer, "; ".join(problems))
        return None

    @property
    def key_count(self) -> int:
        """How many signing keys are loaded."""
        return 0 if self._keys is None else self._keys.key_count

    async def key(self, kid: str | None) -> SigningKey | None:
        if self._keys is None:
            # Not discovered yet (the server was down at start): one try now, at most once a
            # minute, so made-up tokens cannot make Manifold hammer the identity provider.
            async with self._lock:
                now = self._clock()
                if self._keys is None and (self._last_try is None or now - self._last_try >= _RETRY_AT_MOST):
                    self._last_try = now
                    await self.discover()
            if self._keys is None:
                return None
        return await self._keys.key(kid)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Discover (bounded), report readiness, then keep the keys fresh until cancelled."""
        self._last_try = self._clock()
        await self.discover()
        task_status.started()
        delay = 1.0
        while self._keys is None:
            await anyio.sleep(delay)
            delay = min(delay * 2, _RETRY_AT_MOST)
            async with self._lock:
                if self._keys is None:
                    self._last_try = self._clock()
                    await self.discover()
        await self._keys.run()


async def check_servers(settings: OAuthSettings, *, fetch: Fetch | None = None) -> str:
    """``manifold check --online``: each authorization server's metadata and keys, fetched now.

    Prints what was found; returns the problems, one per line (empty: every server is usable).
    """
    problems: list[str] = []
    for index, server in enumerate(settings.authorization_servers):
        where = f"auth.oauth.authorization_servers[{index}] ({server.issuer})"
        keys = DiscoveredKeys(server.issuer, metadata_url=server.metadata_url, fetch=fetch, timeout=5.0)
        metadata = await keys.discover()
        if metadata is None:
            urls = ", ".join(keys.tried)
            problems.append(
                f"{where}: no metadata document whose issuer is exactly {server.issuer!r} at {urls} "
                "(the issuer must match the provider's to the character, trailing slash included)"
            )
            continue
        print(f"{where}: jwks_uri {metadata.jwks_uri}, introspection {metadata.introspection_endpoint}")
        if metadata.jwks_uri is None:
            problems.append(f"{where}: its metadata has no jwks_uri: JWT access tokens cannot be verified")
        elif keys.key_count == 0:
            problems.append(f"{where}: no usable signing key at {metadata.jwks_uri}")
        if server.introspection is not None and not (
            server.introspection.endpoint or metadata.introspection_endpoint
        ):
            problems.append(f"{where}: introspection is configured, but the server publishes no endpoint")
    return "\n".join(problems)
