"""JSON Web Key Sets: an issuer's public keys, from a file or a URL, kept in memory.

No request waits for the network except the first to name an unknown ``kid`` (an issuer rotated
its keys): that one refetches the set, and such refetches happen at most once per
``refetch_interval`` (a minute), so tokens with made-up key ids cannot turn Manifold into a
load generator against the identity provider. Otherwise a URL's set is refreshed in the
background (:meth:`JwksUrl.run`) and a file's set is reloaded when the file changes.

Only signing keys of asymmetric types are kept (``RSA``, ``EC``, ``OKP``): a published ``oct``
key is a shared secret in public, and honouring it would reopen algorithm confusion.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from ssl import SSLContext
from typing import Any, Final, Protocol

import aiohttp
import anyio
import anyio.abc
from jwt import PyJWK, PyJWTError

from proxy.core.errors import ManifoldError

__all__ = ["Fetch", "JwksError", "JwksFile", "JwksUrl", "KeySet", "KeySource", "SigningKey", "fetch_url"]

logger = logging.getLogger("proxy.auth.jwks")

Fetch = Callable[[str], Awaitable[bytes]]

_MAX_BYTES: Final = 1024 * 1024
_KEY_TYPES: Final = frozenset({"RSA", "EC", "OKP"})


class JwksError(ManifoldError):
    """A key set could not be read: unreachable, not JSON, or not a JWKS."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One usable key: its type, the algorithm it is pinned to (if it says), and the key itself."""

    kty: str
    alg: str | None
    key: Any  # a cryptography public key object, as PyJWT's decode accepts it


@dataclass(frozen=True, slots=True)
class KeySet:
    """Parsed keys, by ``kid``; keys without a ``kid`` only serve tokens without one."""

    by_kid: dict[str, SigningKey]
    unnamed: tuple[SigningKey, ...] = ()

    @classmethod
    def parse(cls, data: bytes | str, origin: str) -> KeySet:
        """Parse a JWKS document; unusable keys are skipped with a warning.

        Raises:
            JwksError: the document is not JSON or has no ``keys`` list.
        """
        try:
            document = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise JwksError(f"{origin}: not JSON ({exc})") from None
        keys = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(keys, list):
            raise JwksError(f"{origin}: not a JWKS (no 'keys' list)")
        by_kid: dict[str, SigningKey] = {}
        unnamed: list[SigningKey] = []
        for index, jwk in enumerate(keys):
            if (
                not isinstance(jwk, dict)
                or jwk.get("kty") not in _KEY_TYPES
                or jwk.get("use", "sig") != "sig"
            ):
                continue
            try:
                parsed = PyJWK(jwk)
            except PyJWTError as exc:
                logger.warning("%s: key %d skipped: %s", origin, index, exc)
                continue
            key = SigningKey(jwk["kty"], jwk.get("alg"), parsed.key)
            kid = jwk.get("kid")
            if isinstance(kid, str):
                by_kid[kid] = key
            else:
                unnamed.append(key)
        return cls(by_kid, tuple(unnamed))

    def find(self, kid: str | None) -> SigningKey | None:
        """The key a token's ``kid`` names; without a ``kid``, the set's only key, if it has one."""
        if kid is not None:
            return self.by_kid.get(kid)
        if len(self.unnamed) + len(self.by_kid) == 1:
            return (*self.unnamed, *self.by_kid.values())[0]
        return None


_EMPTY: Final = KeySet({})


class KeySource(Protocol):
    """Where an issuer's keys come from."""

    async def key(self, kid: str | None) -> SigningKey | None:
        """The key for ``kid``, refreshing the set first if it is unknown (rate-limited)."""
        ...

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Load the keys, report readiness, then keep them fresh until cancelled."""
        ...


class JwksFile:
    """A JWKS file, read at start and again whenever its size or modification time changes."""

    def __init__(
        self, path: str, *, check_interval: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Read the file now.

        Raises:
            JwksError: the file is unreadable or not a JWKS.
        """
        self._path = path
        self._check_interval = check_interval
        self._clock = clock
        self._stamp = self._stat()
        self._checked = clock()
        self._keys = self._load()

    def _stat(self) -> tuple[int, int]:
        try:
            info = os.stat(self._path)
        except OSError as exc:
            raise JwksError(f"{self._path}: cannot read the key set ({exc.strerror or exc})") from None
        return info.st_mtime_ns, info.st_size

    def _load(self) -> KeySet:
        try:
            data = Path(self._path).read_bytes()
        except OSError as exc:
            raise JwksError(f"{self._path}: cannot read the key set ({exc.strerror or exc})") from None
        return KeySet.parse(data, self._path)

    async def key(self, kid: str | None) -> SigningKey | None:
        found = self._keys.find(kid)
        # A stat is cheap, but not free: look at the file on an unknown kid, else once a second.
        if found is None or self._clock() - self._checked >= self._check_interval:
            self._reload_if_changed()
            found = self._keys.find(kid)
        return found

    def _reload_if_changed(self) -> None:
        self._checked = self._clock()
        try:
            stamp = self._stat()
            if stamp != self._stamp:
                self._stamp = stamp  # a half-written file changes again when the writer finishes
                self._keys = self._load()
                logger.info("%s: key set reloaded (%d keys)", self._path, len(self._keys.by_kid))
        except JwksError as exc:
            logger.warning("%s; keeping the keys loaded before", exc)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()  # reloading is lazy: nothing to do in the background


async def fetch_url(url: str, *, timeout: float = 10.0, ssl: SSLContext | None = None) -> bytes:
    """GET a key set with aiohttp (``ssl``: the CAs to trust, default the system's).

    Raises:
        JwksError: no answer in time, a connection error, a non-200 status, or over 1 MiB.
    """
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            # No redirects: keys (and metadata) come from the URL configured or discovered, not from
            # wherever a compromised or misconfigured host sends us.
            session.get(
                url, headers={"accept": "application/json"}, allow_redirects=False, ssl=ssl or True
            ) as response,
        ):
            if response.status != 200:
                raise JwksError(f"{url}: HTTP {response.status}")
            body = bytearray()
            async for chunk in response.content.iter_chunked(65536):
                body += chunk
                if len(body) > _MAX_BYTES:
                    raise JwksError(f"{url}: key set larger than {_MAX_BYTES} bytes")
            return bytes(body)
    except TimeoutError:
        raise JwksError(f"{url}: no answer in {timeout:g} s") from None
    except aiohttp.ClientError as exc:
        raise JwksError(f"{url}: {type(exc).__name__}: {exc}") from None


class JwksUrl:
    """A JWKS URL, fetched at start, refreshed every ``refresh`` seconds and on unknown key ids."""

    def __init__(
        self,
        url: str,
        *,
        fetch: Fetch | None = None,
        refresh: float = 300.0,
        refetch_interval: float = 60.0,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self._fetch = fetch if fetch is not None else lambda u: fetch_url(u, timeout=timeout)
        self._refresh = refresh
        self._refetch_interval = refetch_interval
        self._timeout = timeout
        self._clock = clock
        self._keys = _EMPTY
        self._last_refetch: float | None = None
        self._lock = anyio.Lock()
        # Why the last fetch failed (None: it worked, or none was made yet). A token whose key is
        # not loaded while this is set cannot be judged: its issuer is unreachable, not wrong.
        self.failure: str | None = None
        self.fetched = False  # whether a fetch has worked yet

    async def key(self, kid: str | None) -> SigningKey | None:
        found = self._keys.find(kid)
        if found is not None:
            return found
        async with self._lock:
            found = self._keys.find(kid)  # a request queued before us may have refetched already
            now = self._clock()
            if found is not None or (
                self._last_refetch is not None and now - self._last_refetch < self._refetch_interval
            ):
                return found
            self._last_refetch = now
            await self.refresh()
            return self._keys.find(kid)

    @property
    def key_count(self) -> int:
        """How many keys the set has now."""
        return len(self._keys.by_kid) + len(self._keys.unnamed)

    async def refresh(self) -> bool:
        """Fetch the set now and replace the keys; on failure keep the old ones. True if it worked."""
        try:
            with anyio.fail_after(self._timeout):
                data = await self._fetch(self._url)
            keys = KeySet.parse(data, self._url)
        except JwksError as exc:
            self.failure = str(exc)
        except TimeoutError:  # str() of it is empty: say what happened
            self.failure = f"{self._url}: no answer in {self._timeout:g} s"
        else:
            self._keys = keys
            self.failure = None
            self.fetched = True
            return True
        # A failed fetch counts as a request's refetch too: while the set does not answer, tokens
        # naming unknown keys are told at once (503 for OAuth), not each after its own timeout.
        self._last_refetch = self._clock()
        logger.warning(
            "JWKS could not be refreshed (%s); keeping %d keys", self.failure, len(self._keys.by_kid)
        )
        return False

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        # Readiness does not wait for success: an unreachable identity provider must not keep
        # Manifold (and API-key clients) down; tokens are refused until the keys arrive.
        ok = await self.refresh()
        task_status.started()
        while True:
            await anyio.sleep(self._refresh if ok else min(self._refresh, 30.0))
            ok = await self.refresh()
