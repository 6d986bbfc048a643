"""Reading an OpenAPI server's document (a file, or an http(s) URL fetched with Manifold's own
HTTP client), bounded by ``max_document_bytes``, and planning its tools off the event loop.

Remote ``$ref``s under ``allow_remote_refs`` are fetched the same way (the document and they
together within ``max_document_bytes``, at most :data:`~proxy.openapi.remote.MAX_REMOTE_DOCUMENTS`)
and bundled into it (:mod:`proxy.openapi.remote`); others stay refused, per operation.

Raises :class:`proxy.core.errors.ServerUnavailable` (the server cannot start) for every problem,
with the reason: the document (or an allowed remote one) missing, too large, unreadable, not
OpenAPI 3, no base URL.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

import anyio
import anyio.to_thread

from proxy.config.openapi import OpenApiSource
from proxy.core.errors import ServerUnavailable
from proxy.openapi.document import parse, parse_data
from proxy.openapi.remote import MAX_REMOTE_DOCUMENTS, allowed, bundle, remote_documents
from proxy.openapi.schemas import DocumentProblem
from proxy.openapi.security import scheme_of
from proxy.openapi.tools import Skipped, ToolPlan, plan_source
from proxy.outbound.over_http import h1
from proxy.outbound.over_http.common import TRANSPORT_ERRORS, describe

__all__ = ["Loaded", "base_url_of", "load", "modified", "refetch"]

_KEPT_PLANS: Final = 8  # documents' plans kept for the connections that share them
_PLANS: dict[tuple[OpenApiSource, str | None, tuple[float, int] | None], Loaded] = {}


@dataclass(frozen=True, slots=True)
class Loaded:
    tools: list[ToolPlan]
    skipped: list[Skipped]
    base_url: str
    scheme: Any  # the security scheme credentials are placed by, or None
    info: dict[str, Any]
    stamp: tuple[float, int] | None  # a file's (mtime, size) when read: for hot reload
    etag: str | None = None  # a URL document's ETag when fetched: for If-None-Match


def modified(source: OpenApiSource) -> tuple[float, int] | None:
    """The document file's (mtime, size) now; None for a URL or a file that cannot be read."""
    if source.is_url:
        return None
    try:
        found = os.stat(source.document)
    except OSError:
        return None
    return (found.st_mtime, found.st_size)


async def _fetch(
    server_id: str, url: str, limit: int, connect_timeout: float, etag: str | None, what: str
) -> tuple[bytes, str | None] | None:
    """``url``'s bytes (at most one past ``limit``) and ETag; None when ``etag`` is given and the
    server answers 304 Not Modified. ``what`` names the document in messages."""
    client = h1.Client(url, server_id=server_id, connect_timeout=connect_timeout)
    headers = {"If-None-Match": etag} if etag is not None else None
    try:
        with anyio.fail_after(connect_timeout * 4):
            async with client.request("GET", url, headers=headers) as response:
                status = response.status
                fresh = response.header("etag")
                data = await response.read(limit) if status == 200 else b""
    except (*TRANSPORT_ERRORS, TimeoutError) as exc:
        raise ServerUnavailable(server_id, f"{what} could not be fetched: {describe(exc)}") from None
    finally:
        client.close()
    if status == 304 and etag is not None:
        return None
    if status != 200:
        raise ServerUnavailable(server_id, f"{what} answered HTTP {status}")
    return data, fresh if fresh is not None and len(fresh) <= 1024 else None


async def _read(
    server_id: str, source: OpenApiSource, connect_timeout: float, etag: str | None = None
) -> tuple[bytes, str | None] | None:
    limit = source.max_document_bytes
    if source.is_url:
        what = "its OpenAPI document"
        fetched = await _fetch(server_id, source.document, limit, connect_timeout, etag, what)
        if fetched is None:
            return None
        data, etag = fetched
    else:
        etag = None
        try:
            async with await anyio.open_file(source.document, "rb") as file:
                data = await file.read(limit + 1)
        except OSError as exc:
            reason = f"its OpenAPI document cannot be read: {exc.strerror or exc}"
            raise ServerUnavailable(server_id, reason) from None
    if len(data) > limit:
        raise ServerUnavailable(
            server_id, f"its OpenAPI document is larger than max_document_bytes ({limit} bytes)"
        )
    return data, etag


async def _with_remote(
    server_id: str, source: OpenApiSource, document: dict[str, Any], used: int, connect_timeout: float
) -> dict[str, Any]:
    """``document`` bundled with the documents its allowed remote ``$ref``s name (and theirs),
    fetched as the document is: all of them together within ``max_document_bytes``."""
    prefixes = source.allow_remote_refs
    here = source.document if source.is_url else None
    fetched: dict[str, Any] = {}

    def wanted(found: dict[str, Any], within: str | None) -> list[str]:
        urls = remote_documents(found, within)
        return [u for u in urls if u != here and u not in fetched and allowed(u, prefixes)]

    pending = wanted(document, here) if prefixes else []
    while pending:
        url = pending.pop(0)
        if url in fetched:
            continue
        what = f"its OpenAPI document's $ref {url[:200]!r}"
        if len(fetched) >= MAX_REMOTE_DOCUMENTS:
            raise ServerUnavailable(server_id, f"{what} is past {MAX_REMOTE_DOCUMENTS} remote documents")
        left = source.max_document_bytes - used
        got = await _fetch(server_id, url, max(left, 0), connect_timeout, None, what)
        assert got is not None  # no ETag was given, so there is no 304
        used += len(got[0])
        if used > source.max_document_bytes:
            said = f"larger than max_document_bytes ({source.max_document_bytes} bytes)"
            raise ServerUnavailable(server_id, f"its OpenAPI document and its remote $refs are {said}")
        try:
            fetched[url] = await anyio.to_thread.run_sync(functools.partial(parse_data, got[0], where=url))
        except DocumentProblem as exc:
            raise ServerUnavailable(server_id, f"its OpenAPI document is unusable: {exc}") from None
        pending += wanted(fetched[url], url)
    if not fetched:
        return document
    return await anyio.to_thread.run_sync(bundle, document, here, fetched)


async def _document(
    server_id: str, source: OpenApiSource, connect_timeout: float, etag: str | None
) -> tuple[dict[str, Any], str | None] | None:
    read = await _read(server_id, source, connect_timeout, etag)
    if read is None:
        return None
    data, fresh = read
    try:
        document = await anyio.to_thread.run_sync(functools.partial(parse, data, where=source.document))
    except DocumentProblem as exc:
        raise ServerUnavailable(server_id, f"its OpenAPI document is unusable: {exc}") from None
    return await _with_remote(server_id, source, document, len(data), connect_timeout), fresh


async def read_document(server_id: str, source: OpenApiSource, connect_timeout: float) -> dict[str, Any]:
    """The document, from its file or URL, with the remote documents it may refer to, within
    ``max_document_bytes`` (``manifold check`` reads it so).

    Raises:
        ServerUnavailable: see the module's docstring.
    """
    read = await _document(server_id, source, connect_timeout, None)
    assert read is not None  # no ETag was given, so there is no 304
    return read[0]


def base_url_of(document: dict[str, Any], configured: str | None, source: OpenApiSource) -> str:
    """The configured base URL, else the document's first server's (variables at their defaults,
    a relative one against the document's own URL).

    Raises:
        DocumentProblem: neither gives an http(s) URL.
    """
    if configured is not None:
        return configured
    servers = document.get("servers")
    first = servers[0] if isinstance(servers, list) and servers and isinstance(servers[0], dict) else {}
    url = first.get("url")
    if not isinstance(url, str):
        raise DocumentProblem("the document names no servers[0].url: configure the server's 'url'")
    for name, variable in (first.get("variables") or {}).items():
        if isinstance(variable, dict) and "default" in variable:
            url = url.replace("{" + str(name) + "}", str(variable["default"]))
    if source.is_url:
        url = urljoin(source.document, url)
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
        raise DocumentProblem(
            f"servers[0].url {url[:200]!r} is not an http(s) URL: configure the server's 'url'"
        )
    return url


def _plan(document: dict[str, Any], source: OpenApiSource, configured_url: str | None) -> Loaded:
    tools, skipped = plan_source(document, source)
    info = document.get("info")
    return Loaded(
        tools,
        skipped,
        base_url_of(document, configured_url, source),
        scheme_of(document, source.security_scheme),
        info if isinstance(info, dict) else {},
        None,
    )


async def load(
    server_id: str, source: OpenApiSource, configured_url: str | None, connect_timeout: float
) -> Loaded:
    """The document's tools and where to call them.

    A document file's plan is shared by every connection made from the same settings while the
    file is unchanged (same mtime and size): a server reached with each user's own credentials
    has a connection per user, and a large document would otherwise be parsed, and its tools
    kept, once per user. The plan is never changed by its users (the link copies what it lists).

    Raises:
        ServerUnavailable: see the module's docstring.
    """
    stamp = modified(source)
    key = (source, configured_url, stamp)
    if stamp is not None and (shared := _PLANS.get(key)) is not None:
        return shared
    loaded = await refetch(server_id, source, configured_url, connect_timeout, None)
    assert loaded is not None  # no ETag was given, so there is no 304
    loaded = replace(loaded, stamp=stamp)
    if stamp is not None:
        while len(_PLANS) >= _KEPT_PLANS:
            del _PLANS[next(iter(_PLANS))]  # the oldest
        _PLANS[key] = loaded
    return loaded


async def refetch(
    server_id: str,
    source: OpenApiSource,
    configured_url: str | None,
    connect_timeout: float,
    etag: str | None,
) -> Loaded | None:
    """The document read and planned again; None when it is at a URL whose server says it is
    unchanged since ``etag`` (304 Not Modified).

    Raises:
        ServerUnavailable: see the module's docstring.
    """
    read = await _document(server_id, source, connect_timeout, etag)
    if read is None:
        return None
    document, fresh = read
    try:
        loaded = await anyio.to_thread.run_sync(_plan, document, source, configured_url)
    except DocumentProblem as exc:
        raise ServerUnavailable(server_id, f"its OpenAPI document is unusable: {exc}") from None
    return replace(loaded, etag=fresh)
