"""MCP Apps (the ``io.modelcontextprotocol/ui`` extension) through the gateway: pure.

A server's UI is a resource at a ``ui://`` URI, and a tool points at it in its definition's
``_meta.ui.resourceUri`` (or the deprecated flat ``_meta["ui/resourceUri"]``); a host reads it
with ``resources/read``, whether or not the server lists it. Two servers may both call theirs
``ui://dashboard``, and a tool of one may point at anything, so Manifold namespaces them as it
does tool names, by the server's id in the URI's authority:

    server ``weather``'s ``ui://forecast/panel``  <->  clients' ``ui://weather/forecast/panel``

* :func:`namespace_items`: a server's lists as clients are shown them: each ``ui://`` resource's
  URI and each tool's ``_meta`` reference namespaced. A reference that is not a ``ui://`` URI
  (``https:``, ``file:``, ``javascript:``) or that no normalization can read is removed, the
  tool kept; a ``ui://`` resource template (UIs are declared, not templated) is left out. Each
  removal comes back with its reason, for a log line.
* :func:`server_spelling`: the URI a server is sent for a client's namespaced one. What a server
  points at is always in its own namespace: a server cannot point a tool at another's UI.
* :func:`links`: which tools point at each UI. A UI that tools point at may be read only by an
  identity shown one of them (at the endpoint it asks on); one no tool points at is an ordinary
  resource. Either way the policy's resource rules decide on the namespaced URI.
* :func:`namespace_read`: a read's ``contents[].uri``, namespaced as the client asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from proxy.core.errors import InvalidParams
from proxy.protocol.uris import normalize_uri

__all__ = ["SCHEME", "is_ui", "links", "namespace_items", "namespace_read", "namespaced", "server_spelling"]

SCHEME: Final = "ui://"
_FLAT: Final = "ui/resourceUri"  # deprecated before GA, still sent


def is_ui(uri: object) -> bool:
    """Whether ``uri`` is a ``ui://`` URI (the scheme in any case)."""
    return isinstance(uri, str) and uri[: len(SCHEME)].lower() == SCHEME


def namespaced(server_id: str, uri: str) -> str:
    """Server ``server_id``'s ``ui://`` URI as clients see it, normalized.

    Raises:
        InvalidParams: the URI is one no normalization can read (:func:`normalize_uri`).
    """
    return normalize_uri(f"{SCHEME}{server_id}/{uri[len(SCHEME) :]}")


def server_spelling(uri: str) -> str:
    """The URI a server knows for a client's (namespaced) one; any other URI as it is."""
    if not is_ui(uri):
        return uri
    end = uri.find("/", len(SCHEME))
    return SCHEME + uri[end + 1 :] if end != -1 else uri


def _tool(server_id: str, tool: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    meta = tool.get("_meta")
    if not isinstance(meta, dict):
        return tool
    ui = meta.get("ui")
    nested = isinstance(ui, dict) and "resourceUri" in ui
    if not nested and _FLAT not in meta:
        return tool
    meta = dict(meta)
    name = tool.get("name")

    def rewritten(where: str, value: object) -> str | None:
        if is_ui(value):
            assert isinstance(value, str)
            try:
                return namespaced(server_id, value)
            except InvalidParams as exc:
                problems.append(f"tool {name!r}: {where} {value[:200]!r} removed: {exc}")
                return None
        shown = value[:200] if isinstance(value, str) else type(value).__name__
        problems.append(f"tool {name!r}: {where} {shown!r} removed: not a ui:// URI")
        return None

    if nested:
        assert isinstance(ui, dict)
        ui = dict(ui)
        if (uri := rewritten("_meta.ui.resourceUri", ui.pop("resourceUri"))) is not None:
            ui["resourceUri"] = uri
        meta["ui"] = ui
    if _FLAT in meta and (uri := rewritten(f"_meta[{_FLAT!r}]", meta.pop(_FLAT))) is not None:
        meta[_FLAT] = uri
    return {**tool, "_meta": meta}


def namespace_items(server_id: str, kind: str, items: Sequence[Any]) -> tuple[list[Any], tuple[str, ...]]:
    """Server ``server_id``'s list of ``kind`` (``tools``, ``resources``, ``resourceTemplates``,
    ``prompts``) as clients are shown it, and what was removed, why. Items that hold nothing of
    MCP Apps are passed on as they are (the same objects)."""
    problems: list[str] = []
    out: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            out.append(item)  # the merge reports it
        elif kind == "tools":
            out.append(_tool(server_id, item, problems))
        elif kind == "resources" and is_ui(item.get("uri")):
            try:
                out.append({**item, "uri": namespaced(server_id, item["uri"])})
            except InvalidParams as exc:
                problems.append(f"resource {item['uri'][:200]!r} left out: {exc}")
        elif kind == "resourceTemplates" and is_ui(item.get("uriTemplate")):
            template = item["uriTemplate"][:200]
            problems.append(f"resource template {template!r} left out: UIs are not templated")
        else:
            out.append(item)
    return out, tuple(problems)


def _references(definition: Mapping[str, Any]) -> set[str]:
    meta = definition.get("_meta")
    if not isinstance(meta, Mapping):
        return set()
    ui = meta.get("ui")
    found: list[object] = [ui.get("resourceUri") if isinstance(ui, Mapping) else None, meta.get(_FLAT)]
    return {uri for uri in found if isinstance(uri, str) and is_ui(uri)}


def links(tools: Iterable[tuple[str, str, Mapping[str, Any]]]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """For tools ``(server id, namespaced name, definition as shown)``: each (namespaced,
    normalized) UI URI they point at -> (its server, the names of the tools pointing at it)."""
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for server_id, name, definition in tools:
        for uri in _references(definition):
            server, names = found.get(uri, (server_id, ()))
            found[uri] = (server, (*names, name))
    return found


def namespace_read(server_id: str, result: Any) -> Any:
    """A ``resources/read`` result of a UI, its ``contents[].uri`` namespaced as the client asked
    (an item whose URI cannot be is left out: a client must not be handed a server's raw URI)."""
    contents = result.get("contents") if isinstance(result, dict) else None
    if not isinstance(contents, list):
        return result
    shown: list[Any] = []
    for item in contents:
        if isinstance(item, dict) and is_ui(item.get("uri")):
            try:
                item = {**item, "uri": namespaced(server_id, item["uri"])}
            except InvalidParams:
                continue
        shown.append(item)
    return {**result, "contents": shown}
