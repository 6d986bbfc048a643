"""Merging every server's list into one catalog a client sees.

The same code merges tools and prompts: an item is any JSON object with a string ``"name"``.
:func:`build_catalog` is pure and deterministic: the same slices in the same order give the
same names, the same order and the same :attr:`Catalog.generation`, in every process.

Rules:

* Order is the slices' order (config order), then each server's own order.
* Nothing is silently dropped or overwritten. When an item's namespaced name is already taken
  (by another server, or by the same server listing a name twice), the *later* item is renamed
  with :meth:`NamingCodec.disambiguate` and a :class:`Collision` records it. "Later" is
  decided by order alone, so adding a tool to an earlier server can rename a later one; the
  collision report says so.
* Items that cannot be served (not an object, no non-empty string ``"name"``, not JSON) are
  skipped and listed in :attr:`Catalog.invalid`, with the reason, instead of failing the merge.
* A namespace belongs to its server. ``prefix + separator`` of a prefixed server (``st.``) is
  that server's alone: an item of an unprefixed server (``prefix: ""``) whose name starts with
  another server's namespace (``st.secret``) is skipped and listed in :attr:`Catalog.invalid`,
  wherever that server stands in the config and whether or not it lists the same name. Otherwise
  a server could take another's name (or push it to a derived one), and policy rules written
  against ``st.*`` would see a name that is not ``st``'s. The namespace of
  :data:`~proxy.catalog.naming.RESERVED_PREFIX` (``manifold.``) is Manifold's own (its
  discovery meta-tools): no server's item is served in it.
* Every entry keeps its **canonical** name (:meth:`NamingCodec.canonical`: the unshortened
  ``prefix + separator + original``), which the policy matches; the client-facing ``name`` may be
  shortened or derived. Within a namespace a canonical name names one (server, original name).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, Final

import orjson

from proxy.catalog.naming import RESERVED_PREFIX, NamingCodec

__all__ = [
    "EMPTY_CATALOG",
    "Catalog",
    "Collision",
    "Entry",
    "ServerSlice",
    "build_catalog",
    "replace_slice",
]

# Hex characters of the generation (64 bits of SHA-256).
_GENERATION_HEX: Final = 16


@dataclass(frozen=True, slots=True)
class Entry:
    """One item in the catalog and where calls to it go.

    ``definition`` is a new dict: the server's item with ``"name"`` replaced by the namespaced
    name. It is shallow: nested values (``inputSchema`` …) are shared with the server's item,
    and both are treated as read-only.
    """

    name: str
    server_id: str
    original_name: str
    definition: Mapping[str, Any]
    canonical: str = ""  # prefix + separator + original, unshortened; "" (hand-built entries): name

    def __post_init__(self) -> None:
        if not self.canonical:
            object.__setattr__(self, "canonical", self.name)


@dataclass(frozen=True, slots=True)
class Collision:
    """Two items wanted the same namespaced name; the later one was renamed."""

    name: str
    first: tuple[str, str]
    second: tuple[str, str]
    renamed_to: str

    def describe(self) -> str:
        """One line for the log, saying who kept the name and what the other became."""
        return (
            f"{self.second[0]!r} item {self.second[1]!r} wanted the name {self.name!r}, which "
            f"{self.first[0]!r} item {self.first[1]!r} already has; it is listed as {self.renamed_to!r}"
        )


@dataclass(frozen=True, slots=True)
class ServerSlice:
    """Everything one server listed (every page, in its order), and the prefix it gets."""

    server_id: str
    prefix: str
    items: Sequence[Mapping[str, Any]]

    def __post_init__(self) -> None:
        # Freeze the sequence: a slice is kept between refreshes and must not change under us.
        object.__setattr__(self, "items", tuple(self.items))


@dataclass(frozen=True)
class Catalog:
    """The merged, immutable view of every server's items.

    Attributes:
        entries: in order: slices in the given (config) order, then each server's own order.
        by_name: namespaced name -> entry; the reverse lookup used for routing.
        collisions: every rename, in the order it happened.
        invalid: ``(server_id, reason)`` for every item skipped.
        generation: a short content hash; equal content gives an equal generation in every
            process, so replicas agree on it and pagination cursors can detect change.
    """

    entries: tuple[Entry, ...]
    by_name: Mapping[str, Entry]
    collisions: tuple[Collision, ...]
    invalid: tuple[tuple[str, str], ...]
    generation: str

    def __len__(self) -> int:
        return len(self.entries)

    @cached_property
    def definitions(self) -> tuple[Mapping[str, Any], ...]:
        """The items as a client sees them, in catalog order (what ``*/list`` pages over)."""
        return tuple(entry.definition for entry in self.entries)


def _problem(item: object) -> str | None:
    """Why ``item`` cannot be served, or None when it can (JSON-ness is checked later)."""
    if not isinstance(item, Mapping):
        return f"is a {type(item).__name__}, not an object"
    name = item.get("name")
    if not isinstance(name, str):
        return f'has no string "name" (got {type(name).__name__})'
    if not name:
        return 'has an empty "name"'
    return None


def _squatted(original: str, namespaces: Mapping[str, str]) -> str | None:
    """Why ``original`` (an unprefixed server's) may not be served: it starts with the namespace
    of another server. None when it may."""
    for namespace, owner in namespaces.items():
        if original.startswith(namespace) and not owner:
            return f"is named in the namespace {namespace!r}, which is reserved for Manifold's own tools"
        if original.startswith(namespace):
            return (
                f"is named in the namespace {namespace!r} of server {owner!r}, which is that "
                "server's alone (give this server a prefix)"
            )
    return None


def _free_name(
    wanted: str, server_id: str, original: str, taken: Mapping[str, Entry], codec: NamingCodec
) -> str:
    """``wanted`` if free, else the first free name :meth:`NamingCodec.disambiguate` derives."""
    if wanted not in taken:
        return wanted
    for attempt in itertools.count():
        candidate = codec.disambiguate(wanted, server_id, original, attempt=attempt)
        if candidate not in taken:
            return candidate
    raise AssertionError("unreachable")  # pragma: no cover - itertools.count() never ends


def build_catalog(
    slices: Sequence[ServerSlice],
    codec: NamingCodec,
    renames: Mapping[tuple[str, str], str] | None = None,
) -> Catalog:
    """Merge ``slices`` into one catalog, naming every item with ``codec``.

    ``renames`` (server id, original name) -> the name a tool override shows instead of the
    original, prefixed as any; the canonical name (what the policy matches) stays the original's.

    Raises:
        ValueError: two slices share a server id (a bug in the caller: ids are unique in config).
    """
    seen_ids: set[str] = set()
    entries: list[Entry] = []
    by_name: dict[str, Entry] = {}
    collisions: list[Collision] = []
    invalid: list[tuple[str, str]] = []
    digest = hashlib.sha256()
    namespaces = {codec.namespace(piece.prefix): piece.server_id for piece in slices if piece.prefix}
    namespaces.setdefault(codec.namespace(RESERVED_PREFIX), "")  # "": Manifold's own

    for piece in slices:
        if piece.server_id in seen_ids:
            raise ValueError(f"server id {piece.server_id!r} appears in more than one slice")
        seen_ids.add(piece.server_id)
        for index, item in enumerate(piece.items):
            problem = _problem(item)
            if problem is not None:
                invalid.append((piece.server_id, f"item #{index} {problem}"))
                continue
            original: str = item["name"]
            shown = renames.get((piece.server_id, original), original) if renames else original
            squat = None if piece.prefix else _squatted(shown, namespaces)
            if squat is not None:
                invalid.append((piece.server_id, f"item #{index} ({original!r}) {squat}"))
                continue
            wanted = codec.render(piece.prefix, shown)
            name = _free_name(wanted, piece.server_id, original, by_name, codec)
            definition = dict(item)
            definition["name"] = name
            try:
                # Serialising also proves the item can be sent to a client; the sorted-key
                # bytes then feed the generation, so each definition is encoded exactly once.
                encoded = orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)
            except orjson.JSONEncodeError as exc:
                invalid.append((piece.server_id, f"item #{index} ({original!r}) is not JSON: {exc}"))
                continue
            entry = Entry(
                name=name,
                server_id=piece.server_id,
                original_name=original,
                definition=definition,
                canonical=codec.canonical(piece.prefix, original),
            )
            if name != wanted:
                holder = by_name[wanted]
                collisions.append(
                    Collision(
                        name=wanted,
                        first=(holder.server_id, holder.original_name),
                        second=(piece.server_id, original),
                        renamed_to=name,
                    )
                )
            by_name[name] = entry
            entries.append(entry)
            # The route (server id, original name) is hashed too: a catalog whose definitions
            # look the same but send calls elsewhere is a different catalog.
            digest.update(orjson.dumps([piece.server_id, original]))
            digest.update(encoded)
            digest.update(b"\n")

    return Catalog(
        entries=tuple(entries),
        by_name=MappingProxyType(by_name),
        collisions=tuple(collisions),
        invalid=tuple(invalid),
        generation=digest.hexdigest()[:_GENERATION_HEX],
    )


def replace_slice(slices: Sequence[ServerSlice], new: ServerSlice) -> tuple[ServerSlice, ...]:
    """``slices`` with the slice of ``new.server_id`` replaced by ``new`` (appended if absent).

    Used when one server's list changes: only its slice is fetched again, then the catalog is
    rebuilt from the updated slices. Order is kept, so names elsewhere stay stable.
    """
    replaced = False
    result: list[ServerSlice] = []
    for piece in slices:
        if piece.server_id == new.server_id:
            result.append(new)
            replaced = True
        else:
            result.append(piece)
    if not replaced:
        result.append(new)
    return tuple(result)


EMPTY_CATALOG: Final[Catalog] = build_catalog((), NamingCodec())
