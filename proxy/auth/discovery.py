"""An authorization server's metadata (RFC 8414 / OpenID Connect Discovery), and its keys.

The well-known URLs are tried in the order the MCP authorization spec gives (path insertion for
RFC 8414, then OpenID Connect with insertion, then with appending); the first document whose
``issuer`` is *identical* to the configured issuer is used, any other is refused (RFC 8414
§3.3: a document served for another issuer is how a mix-up attack starts).

:class:`DiscoveredKeys` is a :class:`~proxy.auth.jwks.KeySource`: it finds the ``jwks_uri`` in
the metadata and then behaves as a :class:`~proxy.auth.jwks.JwksUrl`. An identity provider that
is down at start does not keep Manifold down: discovery runs in the background (:meth:`run`:
nothing waits for it, not even start-up), is retried there, and until it succeeds its tokens get
503 with ``Retry-After`` (they cannot be judged yet), never 401.
"""

from __future__ import annotations

import functools
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
from proxy.auth.tls import client_context
from proxy.config.oauth import OAuthSettings, check_https_url

__all__ = ["DiscoveredKeys", "ServerMetadata", "check_servers", "metadata_urls", "parse_metadata"]

logger = logging.getLogger("proxy.auth.discovery")

_RETRY_AT_MOST: Final = 60.0  # seconds between discovery attempts while it fails


class _WrongIssuer(JwksError):
    """A metadata document served for another issuer than the one configured."""


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
        raise _WrongIssuer(
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
        self._background = False  # run() discovers: requests never wait for it
        self.problems: tuple[str, ...] = ()  # why the last discovery found nothing usable
        self.wrong_issuer = False  # a document was found, but for another issuer

    async def discover(self) -> ServerMetadata | None:
        """Fetch the metadata now (each URL in turn); None, with a warning, if none is usable."""
        problems: list[str] = []
        self.wrong_issuer = False
        for url in self._urls:
            try:
                with anyio.fail_after(self._timeout):
                    data = await self._fetch(url)
            except JwksError as exc:
                problems.append(str(exc))
                continue
            except TimeoutError:
                problems.append(f"{url}: no answer in {self._timeout:g} s")
                continue
            try:
                metadata = parse_metadata(data, self.issuer, url)
            except _WrongIssuer as exc:
                self.wrong_issuer = True
                problems.append(str(exc))
                continue
            except JwksError as exc:
                problems.append(str(exc))
                continue
            if metadata.jwks_uri is None:
                problems.append(f"{url}: no jwks_uri: JWT access tokens cannot be verified")
            self.metadata = metadata
            if metadata.jwks_uri is not None and self._keys is None:
                self._keys = JwksUrl(
                    metadata.jwks_uri, fetch=self._fetch, timeout=self._timeout, clock=self._clock
                )
                await self._keys.refresh()
            self.problems = tuple(problems)
            return metadata
        self.problems = tuple(problems)
        logger.warning("authorization server %s: metadata not found: %s", self.issuer, "; ".join(problems))
        return None

    @property
    def unreachable(self) -> str | None:
        """Why this server's tokens cannot be judged now (no metadata yet, or its key set did not
        answer the last fetch), or None when they can."""
        if self.metadata is None:
            return "; ".join(self.problems) or "its metadata has not been fetched yet"
        if self._keys is not None and self._keys.failure is not None:
            return self._keys.failure
        if self._keys is not None and not self._keys.fetched:
            return "its key set has not been fetched yet"
        return None

    @property
    def keys_failure(self) -> str | None:
        """Why the key set's last fetch failed (None: it worked, or there is none)."""
        return None if self._keys is None else self._keys.failure

    @property
    def key_count(self) -> int:
        """How many signing keys are loaded."""
        return 0 if self._keys is None else self._keys.key_count

    async def key(self, kid: str | None) -> SigningKey | None:
        if self._keys is None and self._background:
            return None  # run() is discovering: a request never waits for a hanging server
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
        """Report readiness at once, discover (retried, backing off to a minute), then keep the
        keys fresh until cancelled. From here on requests never discover themselves."""
        self._background = True
        task_status.started()
        delay = 1.0
        while True:
            async with self._lock:
                if self._keys is None:
                    self._last_try = self._clock()
                    await self.discover()
            if self._keys is not None:
                break
            await anyio.sleep(delay)
            delay = min(delay * 2, _RETRY_AT_MOST)
        await self._keys.run()


async def check_servers(settings: OAuthSettings, *, fetch: Fetch | None = None, timeout: float = 5.0) -> str:
    """``manifold check --online``: each authorization server's metadata and keys, fetched now
    (each request bounded by ``timeout`` seconds, trusting ``ca_file`` when set).

    Prints what was found; returns the problems, one per line (empty: every server is usable).

    Raises:
        ConfigError: ``ca_file`` is not a PEM file of certificates.
    """
    tls = client_context(settings.ca_file)
    if fetch is None and tls is not None:
        fetch = functools.partial(fetch_url, timeout=timeout, ssl=tls)
    problems: list[str] = []
    for index, server in enumerate(settings.authorization_servers):
        where = f"auth.oauth.authorization_servers[{index}] ({server.issuer})"
        keys = DiscoveredKeys(server.issuer, metadata_url=server.metadata_url, fetch=fetch, timeout=timeout)
        metadata = await keys.discover()
        if metadata is None:
            urls = ", ".join(keys.tried)
            found = f"{where}: no metadata document whose issuer is exactly {server.issuer!r} at {urls}"
            if keys.wrong_issuer:  # the hint only when a document named another issuer
                found += " (the issuer must match the provider's to the character, trailing slash included)"
            problems.append(f"{found}: {'; '.join(keys.problems)}" if keys.problems else found)
            continue
        print(f"{where}: jwks_uri {metadata.jwks_uri}, introspection {metadata.introspection_endpoint}")
        if metadata.jwks_uri is None:
            problems.append(f"{where}: its metadata has no jwks_uri: JWT access tokens cannot be verified")
        elif keys.key_count == 0:
            failure = keys.keys_failure
            said = f" ({failure})" if failure else ""
            problems.append(f"{where}: no usable signing key at {metadata.jwks_uri}{said}")
        if server.introspection is not None and not (
            server.introspection.endpoint or metadata.introspection_endpoint
        ):
            problems.append(f"{where}: introspection is configured, but the server publishes no endpoint")
    return "\n".join(problems)
