"""Approval records: the first decision wins, only before the deadline; waits are bounded."""

from __future__ import annotations

import anyio
import pytest

from proxy.confirm.approvals import Approval, Approvals, MemoryApprovals

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
