"""``Notices``: what a client's own (``per_client``) connection says, and a change of its own
view of the lists, reach that client alone."""

from __future__ import annotations

from typing import Any, cast

import pytest

from proxy.clients.listen_streams import Listens
from proxy.clients.session import ClientSession
from proxy.clients.session_ids import SessionTokens
from proxy.clients.sessions import Sessions
from proxy.config.model import ServerConfig
from proxy.config.policy import PolicySettings
from proxy.enforce.access import Access
from proxy.notify.list_changes import Notices
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity
from proxy.protocol import jsonrpc
from proxy.protocol.subscriptions import Filter
from proxy.servers.connections import Connections
from proxy.servers.per_client import owner_of

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset(), "api_key")
BOB = Identity("bob", frozenset(), "api_key")
SERVERS = {
    "pc": ServerConfig(id="pc", command="x", transport="stdio", prefix="pc", session_mode="per_client")
}
UPDATED = jsonrpc.notification("notifications/resources/updated", {"uri": "note://x"})


def notices() -> tuple[Notices, Listens, Sessions]:
    listens = Listens()
    sessions = Sessions(SessionTokens(b"k" * 32), Metrics(process_metrics=False), idle_timeout=60)
    # Connections are asked only about shared connections' notifications, not tested here.
    built = Notices(sessions, listens, cast(Connections, None), Access(PolicySettings(), SERVERS))
    return built, listens, sessions


async def pending(subscription: Any) -> list[str | None]:
    """The methods of what the stream has queued (after its acknowledgement)."""
    await subscription.next()  # the acknowledgement
    methods: list[str | None] = []
    while (message := await subscription.next(0.01)) is not None:
        methods.append(message.get("method"))
    return methods


async def test_a_resource_update_from_an_identitys_own_process_reaches_only_its_streams() -> None:
    built, listens, _ = notices()
    alices = listens.open(1, ALICE, Filter(uris=("note://x",)))
    bobs = listens.open(2, BOB, Filter(uris=("note://x",)))
    built.per_client_notification(owner_of(ALICE), "pc", UPDATED)
    built.per_client_notification(
        owner_of(ALICE), "pc", jsonrpc.notification("notifications/message", {"level": "error"})
    )
    assert await pending(alices) == ["notifications/resources/updated"]
    assert await pending(bobs) == []
    listens.close(alices)
    listens.close(bobs)


async def test_a_change_of_an_owners_view_is_told_to_that_session_or_identity_only() -> None:
    built, listens, sessions = notices()
    alices, bobs = listens.open(1, ALICE, Filter(tools=True)), listens.open(2, BOB, Filter(tools=True))
    mine = await sessions.admit(_initialized(sessions, ALICE))
    other = await sessions.admit(_initialized(sessions, ALICE))
    built.per_client_list_changed(owner_of(ALICE), "tools")
    assert await pending(alices) == ["notifications/tools/list_changed"]
    assert await pending(bobs) == []
    listens.close(alices)
    listens.close(bobs)
    built.per_client_list_changed(mine, "tools")
    by_id = {session.id: session for session in sessions}
    assert by_id[mine].standalone.pending
    assert not by_id[other].standalone.pending


def _initialized(sessions: Sessions, identity: Identity) -> ClientSession:
    session = sessions.fresh("http", identity)
    session.protocol_version = "2025-11-25"
    session.initialized = True
    return session


async def test_list_changes_held_by_a_reload_reach_each_stream_once_per_kind_when_it_ends() -> None:
    built, listens, _ = notices()
    stream = listens.open(1, ALICE, Filter(tools=True, prompts=True))
    with built.held():
        for _ in range(3):  # three servers removed, say
            built.list_changed("tools")
        with built.held():  # the policy reloaded within the same SIGHUP
            built.list_changed("tools")
            built.list_changed("prompts")
        built.list_changed("tools", endpoint="narrow")  # another endpoint's: not this stream's
    assert await pending(stream) == [
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
    ]
    listens.close(stream)
