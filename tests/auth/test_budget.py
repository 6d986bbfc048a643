"""The introspection budget: per client address a minute, for everyone a second."""

from __future__ import annotations

from proxy.auth.budget import Budget, Spent


def test_a_client_address_gets_its_share_at_once_then_a_minutes_pace() -> None:
    now = [0.0]
    budget = Budget(per_client=6, total=1000, clock=lambda: now[0])
    assert [budget.spend("a") for _ in range(7)] == [Spent.OK] * 6 + [Spent.CLIENT]
    assert budget.spend("b") is Spent.OK  # another address has its own share
    now[0] = 9.0
    assert budget.spend("a") is Spent.CLIENT  # 6 a minute: one per 10 s
    now[0] = 10.0
    assert budget.spend("a") is Spent.OK


def test_everyone_together_gets_a_seconds_worth_and_a_refused_client_spends_none_of_it() -> None:
    now = [0.0]
    budget = Budget(per_client=2, total=3, clock=lambda: now[0])
    assert [budget.spend(f"c{n}") for n in range(4)] == [Spent.OK] * 3 + [Spent.TOTAL]
    # c0..c2 spent from their own share; c3, refused by the total, spent nothing of its own.
    now[0] = 1.0
    assert [budget.spend("c3"), budget.spend("c3"), budget.spend("c3")] == [Spent.OK, Spent.OK, Spent.CLIENT]


def test_an_unknown_address_is_bounded_by_the_total_only() -> None:
    budget = Budget(per_client=1, total=5, clock=lambda: 0.0)
    assert [budget.spend(None) for _ in range(6)] == [Spent.OK] * 5 + [Spent.TOTAL]
