"""``PerClientCatalogs``: each owner's view of the catalogs, with its own connections' lists in place of
those servers' shared lists, and list changes told to that owner alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from proxy.catalog.cursors import CursorCodec
from proxy.catalog.naming import NamingCodec
from proxy.config.model import ServerConfig
from proxy.config.policy import PolicySettings
from proxy.core.errors import InvalidParams
from proxy.enforce.access import Access
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity
from proxy.servers.per_client import Owner, owner_of
from proxy.views.catalogs import Catalogs
from proxy.views.per_client import PerClientCatalogs

ALICE = Identity("alice", frozenset(), "api_key")
BOB = Identity("bob", frozenset(), "api_key")
SERVERS = {
    "shared": ServerConfig(id="shared", command="x", transport="stdio", prefix="shared"),
    "ev": ServerConfig(id="ev", command="x", transport="stdio", prefix="ev", session_mode="per_client"),
}
ACCESS = Access(PolicySettings(), SERVERS)


def make(on_change: Callable[[str], None]) -> Catalogs:
    return Catalogs(
        {sid: s.prefix for sid, s in SERVERS.items()},
        codec=NamingCodec(".", 64),
        cursors=CursorCodec(b"k" * 32),
        access=ACCESS,
        metrics=Metrics(process_metrics=False),
        page_size=100,
        hints={},
        private=False,
        on_change=on_change,
    )


class World:
    def __init__(self) -> None:
        self.shared_changes: list[str] = []
        self.told: list[tuple[Owner, str]] = []
        self.shared = make(self.shared_changes.append)
        self.own = PerClientCatalogs(self.shared, make, lambda owner, kind: self.told.append((owner, kind)))

    def listed(self, server_id: str, kind: str, items: list[dict[str, Any]]) -> None:
        """A shared connection listed (as the gateway's listener passes it on)."""
        self.shared.listed(server_id, kind, items)
        self.own.shared_listed(server_id, kind, items)


def tools(*names: str) -> list[dict[str, Any]]:
    return [{"name": name, "inputSchema": {"type": "object"}} for name in names]


def names(catalogs: Catalogs, identity: Identity = ALICE) -> list[str]:
    return [t["name"] for t in orjson.loads(orjson.dumps(catalogs.page("tools", None, identity)))["tools"]]


def test_an_owner_sees_its_own_connections_list_in_place_of_the_shared_one() -> None:
    world = World()
    world.listed("shared", "tools", tools("a"))
    world.listed("ev", "tools", tools("echo"))  # its shared connection declared no roots
    alice = owner_of(ALICE)
    world.own.listed(alice, "ev", "tools", tools("echo", "get-roots-list"))
    assert names(world.own.of(alice)) == ["shared.a", "ev.echo", "ev.get-roots-list"]
    entry = world.own.of(alice).tool("ev.get-roots-list")
    assert entry is not None
    assert (entry.server_id, entry.original_name) == ("ev", "get-roots-list")
    # Nobody else sees it, nor can call it by name.
    assert names(world.own.of(owner_of(BOB)), BOB) == ["shared.a", "ev.echo"]
    assert world.own.of("some-session").tool("ev.get-roots-list") is None
    assert world.own.of("some-session") is world.shared  # no view of its own: the shared one


def test_a_shared_servers_change_reaches_every_own_view_but_not_an_owned_list() -> None:
    world = World()
    alice = owner_of(ALICE)
    world.own.listed(alice, "ev", "tools", tools("mine"))
    world.listed("shared", "tools", tools("a", "b"))
    world.listed("ev", "tools", tools("theirs"))  # the shared connection's: not alice's
    assert names(world.own.of(alice)) == ["shared.a", "shared.b", "ev.mine"]
    assert names(world.shared) == ["shared.a", "shared.b", "ev.theirs"]


def test_a_change_of_an_owners_list_is_told_to_that_owner_only() -> None:
    world = World()
    world.listed("shared", "tools", tools("a"))
    alice, bob = owner_of(ALICE), owner_of(BOB)
    world.own.listed(alice, "ev", "tools", tools("echo"))
    world.own.listed(bob, "ev", "tools", tools("echo"))
    world.told.clear()
    world.shared_changes.clear()
    world.own.listed(alice, "ev", "tools", tools("echo", "get-roots-list"))
    assert world.told == [(alice, "tools")]
    assert world.shared_changes == []
    world.own.listed(alice, "ev", "tools", tools("echo", "get-roots-list"))  # the same again
    assert world.told == [(alice, "tools")]
    # A shared server's change is the shared catalog's to tell (to everyone), not told twice.
    world.told.clear()
    world.listed("shared", "tools", tools("a", "b"))
    assert world.shared_changes == ["tools"]
    assert world.told == []


def test_an_owner_with_no_connection_left_is_back_on_the_shared_lists_and_told() -> None:
    world = World()
    world.listed("ev", "tools", tools("echo"))
    alice = owner_of(ALICE)
    world.own.listed(alice, "ev", "tools", tools("echo", "get-roots-list"))
    world.told.clear()
    world.own.gone(alice)
    assert world.own.of(alice) is world.shared
    assert len(world.own) == 0
    assert (alice, "tools") in world.told
    world.own.gone(alice)  # twice: nothing more
    assert len(world.told) == 3


def test_a_cursor_is_good_only_in_the_view_it_was_cut_from() -> None:
    world = World()
    alice = owner_of(ALICE)
    world.listed("shared", "tools", tools(*(f"t{i}" for i in range(150))))
    world.own.listed(alice, "ev", "tools", tools("secret-of-alice"))
    first = orjson.loads(orjson.dumps(world.own.of(alice).page("tools", None, ALICE)))
    assert "nextCursor" in first
    second = orjson.loads(orjson.dumps(world.own.of(alice).page("tools", first["nextCursor"], ALICE)))
    assert "ev.secret-of-alice" in [t["name"] for t in second["tools"]]
    # Another view of the same identity (a session of alice's on the shared lists) refuses it.
    with pytest.raises(InvalidParams):
        world.shared.page("tools", first["nextCursor"], ALICE)
