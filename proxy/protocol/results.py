"""Results as each protocol era expects them, pure.

A 2026-07-28 caller gets ``resultType`` on every result, the answering server's identity in
``_meta["io.modelcontextprotocol/serverInfo"]``, and caching hints (``ttlMs``, ``cacheScope``) on
the results of the cacheable methods. A handshake-era caller gets none of these: the revisions
it speaks do not define them. Manifold answers a stateless caller from many servers at once, so
their hints merge: the shortest freshness and the most restrictive scope.

Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from proxy.protocol.stateless import SERVER_INFO_KEY

__all__ = [
    "OwnResultType",
    "CACHEABLE_METHODS",
    "INPUT_REQUIRED_METHODS",
    "NO_STORE",
    "CacheHint",
    "hint_of",
    "is_input_required",
    "handshake",
    "merge_cache",
    "stateless",
]

Scope = Literal["public", "private"]

# Methods whose complete results must carry caching hints (SEP-2549).
CACHEABLE_METHODS: Final = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
# The only methods a server may answer with ``input_required`` (SEP-2322).
INPUT_REQUIRED_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
_STATELESS_ONLY: Final = ("resultType", "ttlMs", "cacheScope")


@dataclass(frozen=True, slots=True)
class CacheHint:
    """How long a result stays fresh (ms, ≥ 0) and who may share a cached copy."""

    ttl_ms: int
    scope: Scope

    def __post_init__(self) -> None:
        if self.ttl_ms < 0:
            raise ValueError(f"ttl_ms must be >= 0, got {self.ttl_ms}")


# Stale at once, and never shared across authorization contexts: the safe default.
NO_STORE: Final = CacheHint(0, "private")


def hint_of(result: Mapping[str, Any]) -> CacheHint | None:
    """The hints a server put on its result, or None when it gave none (or none valid)."""
    ttl, scope = result.get("ttlMs"), result.get("cacheScope")
    if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0 and scope in ("public", "private"):
        return CacheHint(ttl, scope)
    return None


def merge_cache(hints: Iterable[CacheHint]) -> CacheHint:
    """One hint for a result made of several: the shortest TTL, ``private`` if any part is.

    No parts: :data:`NO_STORE`.
    """
    merged: CacheHint | None = None
    for hint in hints:
        if merged is None:
            merged = hint
        else:
            scope: Scope = "private" if "private" in (merged.scope, hint.scope) else "public"
            merged = CacheHint(min(merged.ttl_ms, hint.ttl_ms), scope)
    return merged if merged is not None else NO_STORE


def is_input_required(result: object) -> bool:
    """Whether a result asks the client for input before the request can complete (SEP-2322)."""
    return isinstance(result, Mapping) and result.get("resultType") == "input_required"


class OwnResultType(dict[str, Any]):
    """A result whose ``resultType`` Manifold set itself (a task handle, ``"task"``): kept by
    :func:`stateless`, where a server's own ``resultType`` is not."""


def stateless(
    result: Mapping[str, Any], *, server_info: Mapping[str, Any], cache: CacheHint | None = None
) -> dict[str, Any]:
    """``result`` for a 2026-07-28 caller: ``resultType`` (``complete`` unless it says
    ``input_required``), ``server_info`` stamped in ``_meta`` (replacing another server's stamp),
    and ``cache`` as ``ttlMs``/``cacheScope`` on a complete result (an ``input_required`` one is
    never cacheable)."""
    shaped = dict(result)
    meta = result.get("_meta")
    shaped["_meta"] = {**(meta if isinstance(meta, Mapping) else {}), SERVER_INFO_KEY: dict(server_info)}
    if is_input_required(result):
        for key in ("ttlMs", "cacheScope"):
            shaped.pop(key, None)
        return shaped
    if not isinstance(result, OwnResultType):
        shaped["resultType"] = "complete"
    if cache is not None:
        shaped["ttlMs"] = cache.ttl_ms
        shaped["cacheScope"] = cache.scope
    return shaped


def handshake(result: Mapping[str, Any]) -> dict[str, Any]:
    """``result`` for a handshake-era caller: without the fields only 2026-07-28 defines
    (``resultType``, ``ttlMs``, ``cacheScope``, the ``serverInfo`` stamp)."""
    shaped = {k: v for k, v in result.items() if k not in _STATELESS_ONLY}
    meta = result.get("_meta")
    if isinstance(meta, Mapping) and SERVER_INFO_KEY in meta:
        rest = {k: v for k, v in meta.items() if k != SERVER_INFO_KEY}
        if rest:
            shaped["_meta"] = rest
        else:
            del shaped["_meta"]
    return shaped
