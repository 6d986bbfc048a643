"""What a client sees when ``per_client`` servers are configured: its own view of the catalogs.

A server may list different things to different clients (``server-everything`` lists
``get-roots-list`` only to a client that declared roots), and each client of a ``per_client``
server has a connection of its own (:mod:`proxy.servers.per_client`). So once an owner's connection has
listed, what that owner sees (its lists, their cursors, the names its calls resolve, the
``list_changed`` it hears) comes from a :class:`~proxy.views.catalogs.Catalogs` of its own: the shared
lists, with what its own connections listed in place of those servers' shared lists. The policy
applies to it as to the shared one. Without ``per_client`` servers none is ever made, and every
lookup is the shared catalog's (one dict lookup, nothing more).

An owner's catalog is made when its first own connection lists, and dropped when it has no own
connection left (idle, or its session ended); until then it sees the shared lists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from proxy.outbound.lists import LIST_KINDS
from proxy.servers.per_client import Owner
from proxy.views.catalogs import Catalogs

__all__ = ["PerClientCatalogs"]

MakeCatalogs = Callable[[Callable[[str], None]], Catalogs]  # its on_change -> a fresh, empty one


class PerClientCatalogs:
    """Every owner's catalog (:class:`proxy.servers.per_client.PerClientLists`: its connections tell it)."""

    def __init__(self, shared: Catalogs, make: MakeCatalogs, tell: Callable[[Owner, str], None]) -> None:
        self._shared = shared
        self._make = make
        self._tell = tell  # (owner, list kind): what that owner sees of it changed
        self._per_client: dict[Owner, Catalogs] = {}
        self._listed: dict[Owner, set[tuple[str, str]]] = {}  # (server, kind) it listed itself
        self._quiet: set[Owner] = set()  # being filled: nothing to tell yet

    def __len__(self) -> int:
        return len(self._per_client)

    def of(self, owner: Owner) -> Catalogs:
        """The catalog ``owner`` sees: its own, or the shared one."""
        return self._per_client.get(owner, self._shared)

    # ---- what an owner's connections listed (PerClientLists) ----------------------------------------

    def listed(self, owner: Owner, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        catalog = self._per_client.get(owner)
        if catalog is None:
            catalog = self._start(owner)
        self._listed[owner].add((server_id, kind))
        catalog.listed(server_id, kind, items)

    def gone(self, owner: Owner) -> None:
        """``owner`` has no own connection left: back to the shared lists (and a re-list)."""
        if self._per_client.pop(owner, None) is not None:
            del self._listed[owner]
            for kind in ("tools", "prompts", "resources"):
                self._tell(owner, kind)

    def _start(self, owner: Owner) -> Catalogs:
        catalog = self._per_client[owner] = self._make(lambda kind: self._changed(owner, kind))
        self._listed[owner] = set()
        self._quiet.add(owner)
        try:
            for kind in LIST_KINDS:
                for piece in self._shared.slices(kind):
                    if piece.items:
                        catalog.listed(piece.server_id, kind, cast(list[dict[str, Any]], list(piece.items)))
        finally:
            self._quiet.discard(owner)
        return catalog

    def _changed(self, owner: Owner, kind: str) -> None:
        if owner not in self._quiet:
            self._tell(owner, kind)

    # ---- what the shared connections listed, and the policy -----------------------------------

    def shared_listed(self, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        """A shared connection's list: into every own catalog that has no list of its own there
        (each client hears of the change from the shared catalog already)."""
        for owner, catalog in self._per_client.items():
            if (server_id, kind) not in self._listed[owner]:
                self._quiet.add(owner)
                try:
                    catalog.listed(server_id, kind, items)
                finally:
                    self._quiet.discard(owner)

    def servers_changed(self) -> None:
        """A reload changed the servers (every client is told by the shared catalog's change)."""
        for owner, catalog in self._per_client.items():
            self._quiet.add(owner)
            try:
                catalog.servers_changed()
            finally:
                self._quiet.discard(owner)

    def policy_changed(self) -> None:
        """The policy was reloaded (every client is told by the shared catalog's change)."""
        for owner, catalog in self._per_client.items():
            self._quiet.add(owner)
            try:
                catalog.policy_changed()
            finally:
                self._quiet.discard(owner)
