"""Remembered approvals expire; each question is answered once."""

from __future__ import annotations

from proxy.enforce.confirm.memory import Memory, RememberKey

KEY: RememberKey = (("jwt", "https://a", "alice"), "", "web", "web.delete", ("ask",), "digest", "mark")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_approval_for_minutes_lasts_that_long() -> None:
    clock = Clock()
    memory = Memory(clock=clock)
    memory.remember(KEY, minutes=5)
    assert memory.approved(KEY)
    clock.now += 299
    assert memory.approved(KEY)
    clock.now += 2
    assert not memory.approved(KEY)


def test_another_identity_key_is_not_approved() -> None:
    memory = Memory(clock=Clock())
    memory.remember(KEY, minutes=5)
    other: RememberKey = (("jwt", "https://b", "alice"), *KEY[1:])
    assert not memory.approved(other)


def test_a_question_is_answered_once() -> None:
    memory = Memory(clock=Clock())
    assert memory.spend("q1")
    assert not memory.spend("q1")
    assert memory.spend("q2")


def test_a_full_spent_list_refuses_rather_than_forgets_an_answer() -> None:
    from cachetools import TTLCache

    from proxy.enforce.confirm.memory import spend_once

    clock = Clock()
    spent: TTLCache[str, bool] = TTLCache(2, 60, timer=clock)
    assert spend_once(spent, "a")
    assert spend_once(spent, "b")
    assert not spend_once(spent, "c")  # forgetting "a" would let "a" be replayed
    assert not spend_once(spent, "a")
    clock.now += 61
    assert spend_once(spent, "c")
