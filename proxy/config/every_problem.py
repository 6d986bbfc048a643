"""Every problem of a config, not the first layer of them. Pure.

Pydantic validates in layers: a model's own cross-field checks (``mode="after"``) run only once
every field of it is valid. A config with a server that has neither ``command`` nor ``url`` and
another whose id is not a name would be reported for the first alone: the id is checked by the
config's cross-field check, which never ran. ``manifold check`` promises every problem, so the
loader validates again what is left once each reported problem is taken out (:func:`pruned`),
and reports what that finds too, a bounded number of rounds (:data:`ROUNDS`).

Taking a problem out: a bad setting is removed (its default stands in), a server that is wrong
as a whole is replaced by a stand-in that keeps its key and prefix (the cross-server checks are
about those). What a removal itself causes (a required field now missing) is not a problem of
the file: :func:`caused_by` says which locations to leave out of the next round's report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

__all__ = ["ROUNDS", "Loc", "Pruned", "caused_by", "pruned"]

Loc: TypeAlias = tuple[str | int, ...]

ROUNDS: Final = 4  # validations after the first; each one only ever removes more

# A server wrong as a whole becomes this (with its key and prefix): valid on its own.
_STAND_IN: Final = {"command": "manifold-check-stand-in"}


class Pruned:
    """The data with the problems taken out, and where (to tell their consequences apart)."""

    def __init__(self, data: dict[str, Any], removed: set[Loc], replaced: set[Loc]) -> None:
        self.data = data
        self.removed = removed  # settings taken out: a problem at or under one is a consequence
        self.replaced = replaced  # servers stood in for: a problem under one is a consequence


def pruned(data: Mapping[str, Any], locs: Iterable[Loc], *, servers_key: str = "servers") -> Pruned | None:
    """``data`` without the settings at ``locs`` (as the validator names them: ``servers`` for
    whichever key the file used); None when nothing could be taken out (a problem of the whole
    file: there is nothing further to learn by validating again)."""
    copy = _thaw(data)
    removed: set[Loc] = set()
    replaced: set[Loc] = set()
    for loc in locs:
        path = _existing(copy, loc, servers_key)
        if not path:
            continue
        parent = _at(copy, path[:-1])
        key = path[-1]
        if len(path) == 2 and path[0] == servers_key:
            entry = parent[key]
            stand_in = dict(_STAND_IN)
            if isinstance(entry, Mapping) and isinstance(entry.get("prefix"), str):
                stand_in["prefix"] = entry["prefix"]
            parent[key] = stand_in
            replaced.add(("servers", key))
        elif isinstance(parent, dict) and key in parent:
            del parent[key]
            removed.add(tuple("servers" if i == 0 and p == servers_key else p for i, p in enumerate(path)))
    if not removed and not replaced:
        return None
    return Pruned(copy, removed, replaced)


def caused_by(loc: Loc, pruning: Iterable[Pruned]) -> bool:
    """Whether a problem at ``loc`` is a consequence of taking problems out, not the file's own."""
    for done in pruning:
        if any(loc[: len(r)] == r for r in done.removed):
            return True
        if any(len(loc) > len(r) and loc[: len(r)] == r for r in done.replaced):
            return True
    return False


def _thaw(value: Any) -> Any:
    """A deep copy of the mappings and lists of ``value`` that can be changed."""
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(item) for item in value]
    return value


def _existing(data: dict[str, Any], loc: Loc, servers_key: str) -> tuple[str, ...]:
    """The longest path of mapping keys along ``loc`` that ``data`` has (a list, a union's tag
    or a missing key ends it: what lies below is taken out with the setting that holds it)."""
    path: list[str] = []
    here: Any = data
    for index, part in enumerate(loc):
        key = servers_key if index == 0 and part == "servers" else part
        if not isinstance(here, dict) or not isinstance(key, str) or key not in here:
            break
        path.append(key)
        here = here[key]
    return tuple(path)


def _at(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    here: Any = data
    for key in path:
        here = here[key]
    return here
