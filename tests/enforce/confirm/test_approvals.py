"""Approval records: the first decision wins, only before the deadline; waits are bounded."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from proxy.core.errors import LimitExceeded
from proxy.enforce.confirm.approvals import (
    Approval,
    Approvals,
    ApprovalStore,
    MemoryApprovals,
    RedisApprovals,
)
from tests.ratelimit.redis_server import REDIS_SERVER, running_redis

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def approval(deadline: float) -> Approval:
    return Approval.new(
        tool="pay.refund",
        server="pay",
        caller="alice",
        caller_key=("api_key", "", "alice"),
        roles=("finance",),
        reason="money",
        summary="amount: 5",
        deadline=deadline,
    )


async def test_the_first_decision_wins() -> None:
    clock = Clock()
    store = MemoryApprovals(clock=clock)
    record = approval(clock.now + 60)
    await store.put(record)
    decided = await store.decide(record.id, "approved", "mona", clock.now)
    assert decided is not None
    assert (decided.state, decided.decided_by) == ("approved", "mona")
    later = await store.decide(record.id, "rejected", "max", clock.now)
    assert later is not None
    assert (later.state, later.decided_by) == ("approved", "mona")


async def test_a_decision_after_the_deadline_changes_nothing() -> None:
    clock = Clock()
    store = MemoryApprovals(clock=clock)
    record = approval(clock.now + 60)
    await store.put(record)
    decided = await store.decide(record.id, "approved", "mona", clock.now + 61)
    assert decided is not None
    assert decided.state == "pending"


async def test_a_wait_ends_at_the_decision() -> None:
    clock = Clock()
    store = MemoryApprovals(clock=clock)
    record = approval(clock.now + 60)
    await store.put(record)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.decide, record.id, "rejected", "mona", clock.now)
            decided = await store.wait(record.id, record.deadline)
    assert decided is not None
    assert decided.state == "rejected"


async def test_a_wait_ends_at_the_deadline_undecided() -> None:
    clock = Clock()
    store = MemoryApprovals(clock=clock)
    record = approval(clock.now)  # the deadline is now
    await store.put(record)
    with anyio.fail_after(5):
        decided = await store.wait(record.id, record.deadline)
    assert decided is not None
    assert decided.state == "pending"


async def test_each_approval_is_spent_once() -> None:
    store = MemoryApprovals()
    assert await store.spend("x")
    assert not await store.spend("x")


def test_records_survive_encoding() -> None:
    record = approval(5.0)
    assert Approval.decode(record.encode()) == record


def test_form_tokens_are_bound_to_the_request() -> None:
    approvals = Approvals(MemoryApprovals(), base_url="http://h:1/", key=b"k" * 32)
    assert approvals.link("abc") == "http://h:1/approvals/abc"
    assert approvals.token_ok("abc", approvals.token("abc"))
    assert not approvals.token_ok("abd", approvals.token("abc"))


# ---- bounded: per caller, in all; the same call asked again waits on its pending approval ------


def of(caller: str, call: str, deadline: float) -> Approval:
    return replace(approval(deadline), caller=caller, caller_key=("api_key", "", caller), call=call)


@asynccontextmanager
async def store_of(kind: str, clock: Clock, tmp_path: Path, **limits: int) -> AsyncIterator[ApprovalStore]:
    if kind == "memory":
        yield MemoryApprovals(clock=clock, **limits)
        return
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    async with running_redis(tmp_path) as server:
        store = RedisApprovals(Redis.from_url(server.url), key_prefix="t:", clock=clock, **limits)
        try:
            yield store
        finally:
            await store.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_one_caller_cannot_hold_more_than_its_share_nor_all_callers_more_than_the_total(
    kind: str, tmp_path: Path
) -> None:
    clock = Clock()
    async with store_of(kind, clock, tmp_path, total=5, per_caller=2) as store:
        for n in range(2):
            await store.put(of("mallory", f"m{n}", clock.now + 60))
        with pytest.raises(LimitExceeded, match="max_pending_approvals") as refused:
            await store.put(of("mallory", "m2", clock.now + 60))
        assert refused.value.data == {"limit": "max_pending_approvals", "max": 5, "per_caller": 2}
        for n in range(3):
            await store.put(of(f"user{n}", f"u{n}", clock.now + 60))
        with pytest.raises(LimitExceeded, match="in all"):
            await store.put(of("alice", "a0", clock.now + 60))
        clock.now += 121  # a minute after their deadlines, every record goes
        await store.put(of("mallory", "m3", clock.now + 60))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_the_same_call_asked_again_waits_on_its_pending_approval(kind: str, tmp_path: Path) -> None:
    clock = Clock()
    async with store_of(kind, clock, tmp_path, total=5, per_caller=1) as store:
        first = await store.put(of("alice", "same", clock.now + 60))
        again = await store.put(of("alice", "same", clock.now + 60))  # not refused: not a new one
        assert again.id == first.id
        await store.decide(first.id, "approved", "mona", clock.now)
        clock.now += 121
        assert (await store.put(of("alice", "same", clock.now + 60))).id != first.id


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_the_records_kept_are_listed_up_to_a_bound(kind: str, tmp_path: Path) -> None:
    clock = Clock()
    async with store_of(kind, clock, tmp_path, total=10, per_caller=10) as store:
        kept = [await store.put(of("alice", f"c{n}", clock.now + 60)) for n in range(4)]
        await store.decide(kept[0].id, "approved", "mona", clock.now)
        listed = await store.listed(10)
        assert sorted(a.id for a in listed) == sorted(a.id for a in kept)
        assert {a.id: a.state for a in listed}[kept[0].id] == "approved"
        assert len(await store.listed(2)) == 2


@pytest.mark.slow
async def test_pruning_many_expired_records_is_linear() -> None:
    clock = Clock()
    store = MemoryApprovals(clock=clock, total=20_000, per_caller=20_000)
    for n in range(20_000):
        await store.put(of("alice", f"c{n}", clock.now + 60 + n % 7))
    clock.now += 10_000
    started = time.perf_counter()
    for n in range(20_000):  # each put prunes: only what expired, in deadline order
        await store.put(of("alice", f"d{n}", clock.now + 60))
    assert time.perf_counter() - started < 5  # a scan of every record on each put: minutes
