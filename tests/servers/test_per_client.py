"""``per_client`` connections: one per session, or per identity for 2026-07-28 callers; bounded
in number, stopped when unused, started again on use; against real stdio fixture servers (real
processes, counted in /proc)."""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import orjson
import pytest

from proxy.clients.session import ClientSession, InboundRequest, StatelessCaller
from proxy.config.loading import config_from_mapping
from proxy.config.model import LimitsConfig
from proxy.core.errors import LimitExceeded, SignInNeeded
from proxy.credentials import Credentials, Sources
from proxy.credentials.sealing import new_key
from proxy.observe.boundary import wire_error
from proxy.outbound.health import ServerState
from proxy.policy.model import Identity
from proxy.protocol import versions
from proxy.servers.per_client import ClientConnections, owner, owner_of
from tests.fixtures.processes import children
from tests.interaction.harness import fixture_server

pytestmark = pytest.mark.anyio

MARKER = "--name pc-unit"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def running_servers() -> int:
    return len(children(os.getpid(), MARKER))


async def until(predicate: Callable[[], bool], timeout: float = 10) -> None:
    """Wait (bounded) until ``predicate`` holds: a process ends on its own time, with no event
    we could wait on here."""
    with anyio.fail_after(timeout):
        while True:
            if predicate():
                return
            await anyio.sleep(0.05)


@asynccontextmanager
async def per_client(limit: int, clock: Clock) -> AsyncIterator[ClientConnections]:
    config = config_from_mapping({"servers": {"pc": fixture_server("pc-unit", tools=2)}}, environ={})
    connections = ClientConnections(
        {s.id: s for s in config.enabled_servers()},
        max_pages=10,
        limits=LimitsConfig(max_per_client_connections=limit, per_client_idle_timeout=60.0),
        answer_error=wire_error,
        clock=clock,
    )
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(connections.run)
            try:
                yield connections
            finally:
                tg.cancel_scope.cancel()


def session(name: str) -> ClientSession:
    return ClientSession(id=name, transport="http")


@pytest.mark.slow
async def test_a_connection_past_the_limit_is_refused_at_once_naming_it() -> None:
    clock = Clock()
    async with per_client(2, clock) as connections:
        for name in ("a", "b"):
            assert (await connections.connection(session(name), "pc")).state is ServerState.READY
        with anyio.fail_after(1), pytest.raises(LimitExceeded) as refused:
            await connections.connection(session("c"), "pc")
        assert refused.value.limit == "max_per_client_connections"
        assert "limits.max_per_client_connections is 2" in refused.value.message
        assert running_servers() == 2
        connections.close("a")
        assert (await connections.connection(session("c"), "pc")).state is ServerState.READY
    await until(lambda: running_servers() == 0)


@pytest.mark.slow
async def test_an_unused_connection_is_stopped_and_started_again_on_the_next_request() -> None:
    clock = Clock()
    alice = session("alice")
    async with per_client(10, clock) as connections:
        first = await connections.connection(alice, "pc")
        assert await first.request(
            "tools/call", {"name": "echo", "arguments": {"x": 1}}, relay=InboundRequest(alice)
        )
        await until(lambda: not first.in_flight)  # its own list requests after connecting, too
        clock.now += 59
        assert connections.stop_idle() == 0
        assert running_servers() == 1
        clock.now += 1
        assert connections.stop_idle() == 1
        await until(lambda: running_servers() == 0)
        assert len(connections) == 0
        again = await connections.connection(alice, "pc")
        assert again is not first
        assert await again.request("tools/call", {"name": "echo", "arguments": {"x": 2}})
        assert running_servers() == 1


@pytest.mark.slow
async def test_a_connection_with_a_request_in_flight_or_a_subscription_is_not_idle() -> None:
    clock = Clock()
    busy, subscribed = session("busy"), session("subscribed")
    async with per_client(10, clock) as connections, anyio.create_task_group() as tg:
        hanging = await connections.connection(busy, "pc")
        call = functools.partial(hanging.request, relay=InboundRequest(busy))
        tg.start_soon(call, "tools/call", {"name": "hang", "arguments": {}})
        await connections.connection(subscribed, "pc")
        subscribed.subscriptions["note://x"] = "pc"
        await anyio.wait_all_tasks_blocked()
        assert hanging.in_flight == 1
        clock.now += 3600
        assert connections.stop_idle() == 0
        assert running_servers() == 2
        tg.cancel_scope.cancel()


@pytest.mark.slow
async def test_a_connection_still_starting_for_a_request_is_not_idle() -> None:
    clock = Clock()
    alice = session("alice")
    async with per_client(10, clock) as connections, anyio.create_task_group() as tg:
        started = anyio.Event()

        async def connect() -> None:
            await connections.connection(alice, "pc")
            started.set()

        tg.start_soon(connect)
        await anyio.wait_all_tasks_blocked()
        clock.now += 3600  # the process takes its time to start
        assert connections.stop_idle() == 0
        with anyio.fail_after(10):
            await started.wait()
        assert running_servers() == 1


# ---- whose connection: a session's, or a 2026-07-28 caller's identity's ------------------------

ALICE = Identity("alice", frozenset(), "api_key")
ALICE_JWT = Identity("alice", frozenset(), "jwt")
BOB = Identity("bob", frozenset(), "api_key")


def stateless(identity: Identity, **capabilities: Any) -> StatelessCaller:
    return StatelessCaller(
        f"request-{id(capabilities)}", "http", versions.LATEST_STATELESS, capabilities, identity
    )


def test_a_stateless_callers_owner_is_its_identity_and_a_sessions_is_its_id() -> None:
    assert owner_of(ALICE) == ("api_key", "", "alice") == ALICE.key
    assert owner(stateless(ALICE)) == owner(stateless(ALICE, roots={})) == owner_of(ALICE)
    assert owner(stateless(ALICE)) != owner(stateless(ALICE_JWT))  # same name, another source
    other_issuers = Identity("alice", frozenset(), "jwt", issuer="https://partner.example")
    assert owner(stateless(ALICE_JWT)) != owner(stateless(other_issuers))  # same name, another issuer
    assert owner(stateless(ALICE)) != owner(stateless(BOB))
    alices_session = ClientSession(id="s1", transport="http", identity=ALICE)
    assert owner(alices_session) == "s1"
    assert owner(alices_session) != owner(stateless(ALICE))


@pytest.mark.slow
async def test_each_identity_gets_one_connection_of_its_own_across_its_requests() -> None:
    clock = Clock()
    async with per_client(10, clock) as connections:
        first = await connections.connection(stateless(ALICE, roots={}), "pc")
        again = await connections.connection(stateless(ALICE), "pc")  # a later request of alice's
        bobs = await connections.connection(stateless(BOB), "pc")
        sessions = await connections.connection(
            ClientSession(id="s1", transport="http", identity=ALICE), "pc"
        )
        assert again is first
        assert len({id(first), id(bobs), id(sessions)}) == 3
        assert running_servers() == 3
        # Opened with the capabilities of the request that started it, kept for its lifetime.
        assert first._client_capabilities == {"roots": {}}
        assert bobs._client_capabilities == {}


async def test_identity_connections_count_against_the_same_limit_and_go_idle_alike() -> None:
    clock = Clock()
    async with per_client(2, clock) as connections:
        await connections.connection(stateless(ALICE), "pc")
        await connections.connection(ClientSession(id="s1", transport="http"), "pc")
        with anyio.fail_after(1), pytest.raises(LimitExceeded) as refused:
            await connections.connection(stateless(BOB), "pc")
        assert "for this identity to pc" in refused.value.message
        clock.now += 60
        assert connections.stop_idle() == 2
        assert len(connections) == 0
        await connections.connection(stateless(BOB), "pc")
        assert len(connections) == 1


# ---- each identity's own credentials (proxy.credentials) ----------------------------------------


class Kept:
    """A credential source: what each identity has now (absent: it must sign in)."""

    def __init__(self) -> None:
        self.tokens: dict[tuple[str, ...], str] = {}

    async def credentials(self, identity: Identity, server_id: str) -> Credentials:
        token = self.tokens.get(identity.key)
        if token is None:
            raise SignInNeeded(server_id, None, "keep a secret for it")
        return Credentials(env={"TOKEN": token}, label="secret")


@asynccontextmanager
async def with_credentials(kept: Kept) -> AsyncIterator[ClientConnections]:
    server = fixture_server("pc-unit", tools=1)
    server["args"] += ["--report-env", "TOKEN"]
    config = config_from_mapping(
        {
            "credentials": {"key": new_key()},
            "servers": {
                "pc": {
                    **server,
                    "env": {"TOKEN": "configured"},
                    "credentials": {"mode": "secret", "env": "TOKEN"},
                }
            },
        },
        environ={},
    )
    connections = ClientConnections(
        config.servers,
        max_pages=10,
        limits=LimitsConfig(),
        answer_error=wire_error,
        credentials=Sources({"pc": kept}),
    )
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(connections.run)
            try:
                yield connections
            finally:
                tg.cancel_scope.cancel()


async def token_seen(connections: ClientConnections, client: ClientSession | StatelessCaller) -> str | None:
    connection = await connections.connection(client, "pc")
    result = await connection.request("tools/call", {"name": "report", "arguments": {}})
    token: str | None = orjson.loads(result["content"][0]["text"])["env"]["TOKEN"]
    return token


@pytest.mark.slow
async def test_each_identitys_process_is_started_with_its_own_credentials_and_sessions_keep_their_own() -> (
    None
):
    kept = Kept()
    kept.tokens = {ALICE.key: "alice-token", BOB.key: "bob-token"}
    async with with_credentials(kept) as connections:
        assert await token_seen(connections, stateless(ALICE)) == "alice-token"
        assert await token_seen(connections, stateless(BOB)) == "bob-token"
        alices_session = ClientSession(id="s1", transport="http", identity=ALICE)
        assert await token_seen(connections, alices_session) == "alice-token"
        assert len(connections) == 3  # alice's stateless identity, bob's, and alice's session


@pytest.mark.slow
async def test_changed_credentials_restart_the_connection_and_gone_ones_stop_it() -> None:
    kept = Kept()
    kept.tokens = {ALICE.key: "first-token"}
    async with with_credentials(kept) as connections:
        first = await connections.connection(stateless(ALICE), "pc")
        assert await connections.connection(stateless(ALICE), "pc") is first
        kept.tokens[ALICE.key] = "second-token"
        assert await token_seen(connections, stateless(ALICE)) == "second-token"
        assert connections.find(stateless(ALICE), "pc") is not first
        del kept.tokens[ALICE.key]
        with pytest.raises(SignInNeeded):
            await connections.connection(stateless(ALICE), "pc")
        assert connections.find(stateless(ALICE), "pc") is None
        assert len(connections) == 0


@pytest.mark.slow
async def test_a_credentials_change_fails_the_calls_in_flight_at_once_naming_why() -> None:
    # A call in flight on the connection built with the old credentials must not hang (or finish
    # with a generic error) when the connection is stopped for new ones.
    kept = Kept()
    kept.tokens = {ALICE.key: "first-token"}
    async with with_credentials(kept) as connections:
        first = await connections.connection(stateless(ALICE), "pc")
        failures: list[BaseException] = []
        sent = anyio.Event()

        async def in_flight() -> None:
            try:
                sent.set()
                await first.request("tools/call", {"name": "hang", "arguments": {}})
            except Exception as exc:
                failures.append(exc)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(in_flight)
                await sent.wait()
                await anyio.wait_all_tasks_blocked()
                kept.tokens[ALICE.key] = "second-token"
                await connections.connection(stateless(ALICE), "pc")  # restarted
        [failure] = failures
        assert "credentials changed" in str(failure)
        del kept.tokens[ALICE.key]
        second = connections.find(stateless(ALICE), "pc")
        assert second is not None
        failures.clear()
        sent = anyio.Event()
        first = second
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(in_flight)
                await sent.wait()
                await anyio.wait_all_tasks_blocked()
                with pytest.raises(SignInNeeded):
                    await connections.connection(stateless(ALICE), "pc")  # stopped
        [failure] = failures
        assert "credentials are gone" in str(failure)
