"""Remote ``$ref``s an operator allowed (``openapi.allow_remote_refs``): which documents they
name, whether a URL is allowed, and the document bundled with the ones fetched. Pure: the
fetching is the caller's.

A ``$ref`` to another document is resolved against the URL of the document it appears in (a
document read from a file has none: a relative reference there stays refused). It is allowed
when its URL has an allowed prefix's scheme and host and its path continues the prefix's at a
segment boundary (``https://h/schemas`` allows ``https://h/schemas/pet.yaml``, not
``https://h/schemas-evil/x`` nor ``https://h.evil/schemas/x``). Bundling moves every fetched
document under the key :data:`BUNDLED` of the main one and rewrites each allowed reference to
point there, so the resolver (:mod:`proxy.openapi.schemas`) still reads only one document and
keeps every bound it has; a reference that is not allowed is left remote (made absolute), and
the resolver refuses it as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

__all__ = ["BUNDLED", "MAX_REMOTE_DOCUMENTS", "allowed", "bundle", "remote_documents"]

BUNDLED: Final = "x-manifold-remote"
MAX_REMOTE_DOCUMENTS: Final = 32  # fetched for one document, however its references chain


def _refs(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            ref = value.get("$ref")
            if isinstance(ref, str):
                yield ref
            stack.extend(v for v in value.values() if isinstance(v, Mapping | list))
        elif isinstance(value, list):
            stack.extend(v for v in value if isinstance(v, Mapping | list))


def _absolute(ref: str, here: str | None) -> str | None:
    """The URL of the document ``ref`` names (fragment dropped), None when it has none."""
    target = urljoin(here, ref) if here is not None else ref
    url = target.partition("#")[0]
    parts = urlsplit(url)
    return url if parts.scheme in ("http", "https") and parts.netloc else None


def remote_documents(document: Any, here: str | None) -> list[str]:
    """The URLs of the other documents ``document`` (read from ``here``) refers to, in order."""
    found: dict[str, None] = {}
    for ref in _refs(document):
        if not ref.startswith("#") and (url := _absolute(ref, here)) is not None:
            found.setdefault(url)
    return list(found)


def allowed(url: str, prefixes: Sequence[str]) -> bool:
    """Whether ``url`` is under one of ``prefixes`` (see the module's docstring)."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        return False
    for prefix in prefixes:
        allow = urlsplit(prefix)
        if (parts.scheme, parts.netloc.lower()) != (allow.scheme, allow.netloc.lower()):
            continue
        base = allow.path.rstrip("/")
        if parts.path == base or parts.path.startswith(base + "/"):
            return True
    return False


def bundle(document: Mapping[str, Any], here: str | None, fetched: Mapping[str, Any]) -> dict[str, Any]:
    """``document`` (read from ``here``) with the ``fetched`` documents (URL to data) under
    :data:`BUNDLED` and every reference to them rewritten to a local one."""
    index = {url: n for n, url in enumerate(u for u in fetched if u != here)}

    def local(url: str | None, fragment: str) -> str | None:
        if not (fragment == "" or fragment.startswith("/")):
            return None  # an anchor, not a JSON pointer: left for the resolver to refuse
        if url == here:
            return "#" + fragment
        if url in index:
            return f"#/{BUNDLED}/{index[url]}{fragment}"
        return None

    def rewritten(ref: str, within: str | None) -> str:
        if ref.startswith("#"):
            return local(within, ref[1:]) or ref
        target = urljoin(within, ref) if within is not None else ref
        url, _, fragment = target.partition("#")
        return local(url, fragment) or target

    def copy(node: Any, within: str | None) -> Any:
        if isinstance(node, list):
            return [copy(item, within) for item in node]
        if not isinstance(node, Mapping):
            return node
        out = {key: copy(value, within) for key, value in node.items()}
        if isinstance(node.get("$ref"), str):
            out["$ref"] = rewritten(node["$ref"], within)
        return out

    result: dict[str, Any] = copy(document, here)
    result[BUNDLED] = [copy(fetched[url], url) for url in index]
    return result
