"""``Sessions``: the one owner of client sessions, in memory (a clock we move by hand)."""

from __future__ import annotations

import anyio
import pytest

from proxy.clients.revocations import Revocations
from proxy.clients.session import ClientSession
from proxy.clients.session_ids import SessionTokens
from proxy.clients.sessions import Sessions
from proxy.core.errors import LimitExceeded
from proxy.core.keys import derive_key
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity
from proxy.protocol import jsonrpc

ALICE = Identity("alice", frozenset({"dev"}), "api_key")
MALLORY = Identity("mallory", frozenset({"dev"}), "api_key")
KEY = derive_key(b"k" * 32, "session")
LIFETIME = 600.0

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sessions(
    clock: Clock | None = None,
    *,
    key: bytes = KEY,
    max_sessions: int = 10_000,
    per_identity: int = 100,
    wall: Clock | None = None,
    revocations: Revocations | None = None,
) -> tuple[Sessions, Metrics]:
    metrics = Metrics(process_metrics=False)
    tokens = SessionTokens(key, lifetime=LIFETIME, clock=wall) if wall is not None else SessionTokens(key)
    if wall is not None and revocations is None:
        revocations = Revocations(clock=wall)  # ended ids expire on the ids' own clock
    registry = Sessions(
        tokens,
        metrics,
        idle_timeout=60,
        max_sessions=max_sessions,
        max_per_identity=per_identity,
        revocations=revocations,
        clock=clock or Clock(),
    )
    return registry, metrics


def refusals(metrics: Metrics, limit: str) -> float | None:
    return metrics.registry.get_sample_value("manifold_limit_refusals_total", {"limit": limit})


def active(metrics: Metrics, transport: str) -> float | None:
    return metrics.registry.get_sample_value("manifold_client_sessions_active", {"transport": transport})


async def admitted(registry: Sessions, identity: Identity = ALICE) -> ClientSession:
    session = registry.fresh("http", identity)
    session.protocol_version, session.capabilities = "2025-11-25", {"roots": {}}
    await registry.admit(session)
    return session


async def test_a_fresh_session_is_registered_only_once_admitted_under_a_signed_id() -> None:
    registry, metrics = sessions()
    session = registry.fresh("http", ALICE)
    assert len(registry) == 0
    session.protocol_version = "2025-11-25"
    session_id = await registry.admit(session)
    assert session.id == session_id
    assert session_id.count(".") == 2  # <nonce>.<payload>.<mac>
    assert await registry.find(session_id, ALICE) is session
    assert active(metrics, "http") == 1


async def test_another_replica_takes_a_session_over_from_its_signed_id_with_the_same_identity() -> None:
    first, _ = sessions()
    session = await admitted(first)
    second, metrics = sessions()  # same key: a replica sharing sessions.secret
    taken = await second.find(session.id, ALICE)
    assert taken is not None
    assert taken is not session
    assert (taken.protocol_version, taken.capabilities, taken.initialized) == (
        "2025-11-25",
        {"roots": {}},
        True,
    )
    assert active(metrics, "http") == 1
    assert await sessions()[0].find(session.id, MALLORY) is None  # the id alone is no credential


async def test_a_forged_or_foreign_id_finds_nothing() -> None:
    registry, _ = sessions()
    session = await admitted(sessions(key=derive_key(b"x" * 32, "session"))[0])
    assert await registry.find(session.id, ALICE) is None
    assert await registry.find("not-a-token", ALICE) is None


async def test_an_ended_session_runs_every_hook_and_cannot_be_taken_over_again() -> None:
    registry, metrics = sessions()
    session = await admitted(registry)
    ran: list[str] = []

    async def failing(ended: ClientSession) -> None:
        ran.append("failing")
        raise RuntimeError("a cleanup step broke")

    async def release(ended: ClientSession) -> None:
        ran.append(f"release {ended.id == session.id}")

    registry.on_end(failing)
    registry.on_end(release)
    await registry.end(session)
    assert ran == ["failing", "release True"]  # one hook's failure keeps no other from running
    assert await registry.find(session.id, ALICE) is None  # a signed id must not bring it back here
    assert active(metrics, "http") == 0


async def test_ending_a_session_cancels_its_requests_in_flight() -> None:
    registry, _ = sessions()
    session = await admitted(registry)
    with anyio.CancelScope() as scope:
        session.in_flight[1] = scope
        await registry.end(session)
        await anyio.sleep(1)  # cancelled at once by the end; never slept through
    assert scope.cancelled_caught


async def test_idle_http_sessions_expire_but_busy_and_stdio_ones_stay() -> None:
    clock = Clock()
    registry, _ = sessions(clock)
    idle, busy = await admitted(registry), await admitted(registry)
    busy.in_flight[7] = anyio.CancelScope()
    stdio = registry.open("stdio", ALICE)
    clock.now += 61
    assert await registry.expire_idle() == 1
    assert {s.id for s in registry} == {busy.id, stdio.id}
    again = await registry.find(idle.id, ALICE)  # idleness does not revoke: the id comes back
    assert again is not None
    assert again is not idle


async def test_finding_a_session_counts_as_activity() -> None:
    clock = Clock()
    registry, _ = sessions(clock)
    session = await admitted(registry)
    clock.now += 50
    await registry.find(session.id, ALICE)
    assert session.last_seen == clock.now


def test_broadcast_reaches_initialized_sessions_only() -> None:
    registry, _ = sessions()
    ready, pending = registry.open("stdio", ALICE), registry.open("stdio", ALICE)
    ready.initialized = True
    registry.broadcast(jsonrpc.notification("notifications/tools/list_changed"))
    assert ready.standalone.pending
    assert not pending.standalone.pending


@pytest.mark.parametrize(
    ("levels", "floor"), [((), None), (("error",), "error"), (("warning", "debug", None), "debug")]
)
def test_the_log_floor_is_the_most_verbose_level_any_session_asked_for(
    levels: tuple[str | None, ...], floor: str | None
) -> None:
    registry, _ = sessions()
    for level in levels:
        registry.open("stdio", ALICE).log_level = level
    assert registry.log_floor() == floor


# ---- how many sessions (limits.max_sessions, max_sessions_per_identity) -------------------------


async def test_past_the_per_identity_limit_the_longest_idle_session_of_that_identity_ends() -> None:
    clock = Clock()
    registry, metrics = sessions(clock, per_identity=3)
    ended: list[str] = []

    async def hook(session: ClientSession) -> None:
        ended.append(session.id)

    registry.on_end(hook)
    first = await admitted(registry)
    clock.now += 1
    second, third = await admitted(registry), await admitted(registry)
    bob = await admitted(registry, MALLORY)  # another identity is not evicted for alice
    clock.now += 1
    await registry.find(first.id, ALICE)  # used again: second is now the longest idle
    fourth = await admitted(registry)
    assert ended == [second.id]  # ended through the same end as expiry: its hooks ran
    assert {s.id for s in registry} == {first.id, third.id, bob.id, fourth.id}
    assert await registry.find(second.id, ALICE) is None  # its signed id does not bring it back
    assert refusals(metrics, "max_sessions_per_identity") == 1


OURS = Identity("alice", frozenset({"dev"}), "jwt", issuer="https://id.example", subject="alice")
THEIRS = Identity("alice", frozenset({"dev"}), "jwt", issuer="https://partner.example", subject="alice")


async def test_another_issuers_alice_neither_takes_over_nor_evicts_alices_sessions() -> None:
    registry, _ = sessions(per_identity=1)
    ours = await admitted(registry, OURS)
    theirs = await admitted(registry, THEIRS)  # one each: theirs does not count against ours
    assert {s.id for s in registry} == {ours.id, theirs.id}
    # On a replica that does not know it, the id of one is nothing to the other.
    assert await sessions()[0].find(ours.id, THEIRS) is None
    assert await sessions()[0].find(ours.id, OURS) is not None


async def test_one_principals_sessions_count_together_whatever_roles_it_had() -> None:
    registry, _ = sessions(per_identity=1)
    first = await admitted(registry, ALICE)
    await admitted(registry, Identity("alice", frozenset({"dev", "ops"}), "api_key"))  # roles changed
    assert first.id not in {s.id for s in registry}  # the same key: one budget of sessions


async def test_when_no_session_of_the_identity_is_idle_a_new_one_is_refused_naming_the_limit() -> None:
    registry, metrics = sessions(per_identity=2)
    busy = [await admitted(registry), await admitted(registry)]
    for number, session in enumerate(busy):
        session.in_flight[number] = anyio.CancelScope()
    with pytest.raises(LimitExceeded) as refused:
        await admitted(registry)
    assert refused.value.limit == "max_sessions_per_identity"
    assert "limits.max_sessions_per_identity is 2" in refused.value.message
    assert len(registry) == 2
    assert refusals(metrics, "max_sessions_per_identity") is None  # counted where it is answered


async def test_the_total_limit_evicts_the_longest_idle_session_of_any_identity() -> None:
    clock = Clock()
    registry, _ = sessions(clock, max_sessions=2)
    oldest = await admitted(registry, MALLORY)
    clock.now += 1
    newer = await admitted(registry)
    await admitted(registry)
    assert oldest not in list(registry)
    assert newer in list(registry)


async def test_stdio_sessions_are_never_evicted_and_a_full_registry_takes_no_session_over() -> None:
    registry, _ = sessions(max_sessions=1)
    registry.open("stdio", ALICE)
    with pytest.raises(LimitExceeded):
        await admitted(registry)
    other, _ = sessions()
    elsewhere = await admitted(other)
    assert await registry.find(elsewhere.id, ALICE) is None  # initialize again, where room is made


# ---- ended on purpose stays ended; an id's lifetime ends it (sessions.max_lifetime) -------------


async def test_a_deleted_session_is_not_taken_over_by_a_replica_sharing_the_store() -> None:
    wall = Clock()
    shared = Revocations(clock=wall)  # what Redis gives replicas: one store
    a, _ = sessions(wall=wall, revocations=shared)
    b, _ = sessions(wall=wall, revocations=shared)
    session = await admitted(a)
    await a.end(session)  # DELETE
    assert await b.find(session.id, ALICE) is None
    assert await a.find(session.id, ALICE) is None


async def test_a_deleted_session_stays_ended_here_long_after_the_idle_timeout() -> None:
    clock, wall = Clock(), Clock()
    registry, _ = sessions(clock, wall=wall)
    session = await admitted(registry)
    await registry.end(session)
    clock.now += 5 * 60  # five idle timeouts, still within the id's lifetime
    wall.now += 5 * 60
    assert await registry.expire_idle() == 0
    assert await registry.find(session.id, ALICE) is None


async def test_an_evicted_session_is_revoked_like_a_deleted_one() -> None:
    clock, wall = Clock(), Clock()
    shared = Revocations(clock=wall)
    registry, _ = sessions(clock, per_identity=1, wall=wall, revocations=shared)
    evicted = await admitted(registry)
    clock.now += 1
    await admitted(registry)  # makes room by ending the first
    other, _ = sessions(wall=wall, revocations=shared)
    assert await other.find(evicted.id, ALICE) is None


async def test_a_live_session_ends_when_its_id_reaches_its_lifetime_however_busy() -> None:
    clock, wall = Clock(), Clock()
    registry, _ = sessions(clock, wall=wall)
    session = await admitted(registry)
    ended: list[str] = []

    async def hook(gone: ClientSession) -> None:
        ended.append(gone.id)

    registry.on_end(hook)
    for _ in range(9):  # used every minute: never idle
        wall.now += LIFETIME / 10
        clock.now += LIFETIME / 10
        assert await registry.find(session.id, ALICE) is session
    wall.now += LIFETIME / 10
    assert await registry.find(session.id, ALICE) is None
    assert ended == [session.id]
    assert await sessions(wall=wall)[0].find(session.id, ALICE) is None  # nor taken over elsewhere


async def test_the_expirer_ends_sessions_whose_ids_reached_their_lifetime() -> None:
    clock, wall = Clock(), Clock()
    registry, _ = sessions(clock, wall=wall)
    session = await admitted(registry)
    wall.now += LIFETIME
    assert await registry.expire_idle() == 1
    assert session not in list(registry)
