"""Who holds which resource subscription, and what each server is told: sessions on shared and
``per_client`` servers, listen streams, and servers that refuse."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.clients.listen_streams import Listens
from proxy.clients.session import ClientSession, StatelessCaller
from proxy.config.model import ServerConfig
from proxy.core.errors import RemoteError
from proxy.notify.subscriptions import Interest
from proxy.policy.model import Identity
from proxy.protocol import versions
from proxy.protocol.subscriptions import Filter
from proxy.servers.connections import Sharing

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset(), "api_key")


class Server:
    """A server's shared connection: what it was told, in order; ``refuses`` URIs it won't watch."""

    def __init__(self, told: list[tuple[str, str, str]], name: str, refuses: frozenset[str] = frozenset()):
        self.told, self.name, self.refuses = told, name, refuses

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        uri = str((params or {})["uri"])
        if uri in self.refuses:
            raise RemoteError(self.name, {"code": -32602, "message": "no"})
        self.told.append((self.name, method, uri))
        return {}


class World:
    def __init__(self, *, refuses: frozenset[str] = frozenset()) -> None:
        self.told: list[tuple[str, str, str]] = []
        self.sessions: dict[str, ClientSession] = {}
        self.listens = Listens()
        servers = {
            "shared": ServerConfig(id="shared", command="x", transport="stdio", prefix="shared"),
            "own": ServerConfig(
                id="own", command="x", transport="stdio", prefix="own", session_mode="per_client"
            ),
        }
        connections = {sid: Server(self.told, sid, refuses) for sid in servers}
        self.sharing = Sharing(servers)
        self.interest = Interest(self.sessions.values(), self.listens, self.sharing, connections)

    def session(self, *subscribed: tuple[str, str]) -> ClientSession:
        session = ClientSession(
            f"s{len(self.sessions)}", "http", protocol_version=versions.LATEST, identity=ALICE
        )
        session.subscriptions.update(dict(subscribed))
        self.sessions[session.id] = session
        return session


def test_a_shared_uri_is_told_once_and_a_per_client_one_every_time() -> None:
    world = World()
    world.session(("mem://a", "shared"), ("mem://b", "own"))
    late = world.session()
    assert not world.interest.must_tell(late, "mem://a", "shared")
    assert world.interest.must_tell(late, "mem://b", "own")  # its own process: nobody else's
    assert world.interest.must_tell(late, "mem://c", "shared")


def test_a_2026_caller_on_a_per_client_server_does_not_get_the_shared_connection() -> None:
    world = World()
    caller = StatelessCaller("request-1", "http", versions.LATEST_STATELESS, {}, ALICE)
    assert not world.sharing.shares(caller, "own")  # its identity's own, as a session has its own
    assert world.sharing.shares(caller, "shared")
    assert not world.interest.shares(world.session(), "own")


async def test_an_ended_session_releases_only_what_nobody_else_holds_on_a_shared_connection() -> None:
    world = World()
    leaving = world.session(("mem://a", "shared"), ("mem://b", "shared"), ("mem://c", "own"))
    world.session(("mem://b", "shared"))
    del world.sessions[leaving.id]  # as the gateway forgets it before releasing
    await world.interest.release(leaving)
    assert world.told == [("shared", "resources/unsubscribe", "mem://a")]
    assert leaving.subscriptions == {}


async def test_a_listen_stream_holds_what_it_watches_until_it_closes() -> None:
    world = World(refuses=frozenset({"mem://refused"}))
    world.session(("mem://held", "shared"))
    watched = {"mem://new": "shared", "mem://held": "shared", "mem://refused": "shared"}
    requested = Filter.parse({"notifications": {"resourceSubscriptions": list(watched)}})
    stream = world.listens.open(1, ALICE, requested)
    await world.interest.watch(stream, watched)
    assert world.told == [("shared", "resources/subscribe", "mem://new")]
    assert set(stream.filter.uris) == {"mem://new", "mem://held"}  # the refused one is dropped

    other = world.listens.open(2, ALICE, requested)
    world.listens.close(stream)
    world.told.clear()
    await world.interest.unwatch(stream, watched)
    assert world.told == []  # the other stream watches mem://new still, a session mem://held
    world.listens.close(other)
    await world.interest.unwatch(other, watched)
    assert world.told == [("shared", "resources/unsubscribe", "mem://new")]


async def test_a_per_client_session_holding_a_uri_does_not_hold_it_for_a_listen_stream() -> None:
    """The session's subscription is on its own process; the stream hears the shared one."""
    world = World()
    world.session(("mem://x", "own"))
    watched = {"mem://x": "own"}
    stream = world.listens.open(
        1, ALICE, Filter.parse({"notifications": {"resourceSubscriptions": ["mem://x"]}})
    )
    await world.interest.watch(stream, watched)
    assert world.told == [("own", "resources/subscribe", "mem://x")]
    world.listens.close(stream)
