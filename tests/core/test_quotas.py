"""Quota: distinct things per owner, refused past the limit, and given back."""

from __future__ import annotations

import pytest

from proxy.core.errors import LimitExceeded
from proxy.core.quotas import Quota


def test_the_thing_past_the_maximum_is_refused_naming_the_limit() -> None:
    quota = Quota("max_listen_streams_per_session", 2, "too many open listen streams")
    quota.take("s", "a")
    quota.take("s", "b")
    with pytest.raises(LimitExceeded) as refused:
        quota.take("s", "c")
    assert refused.value.limit == "max_listen_streams_per_session"
    assert "limits.max_listen_streams_per_session is 2" in refused.value.message
    assert refused.value.data == {"limit": "max_listen_streams_per_session", "max": 2}


def test_owners_are_counted_apart() -> None:
    quota = Quota("x", 1, "no")
    quota.take("s", "a")
    quota.take("t", "a")
    assert quota.held("s") == quota.held("t") == 1


def test_holding_the_same_thing_again_is_a_takeover_not_one_more() -> None:
    quota = Quota("x", 1, "no")
    quota.take("s", "a")
    quota.take("s", "a")
    assert quota.held("s") == 1
    quota.give_back("s", "a")
    assert quota.held("s") == 1  # the older holder is still there until it lets go
    quota.give_back("s", "a")
    assert quota.held("s") == 0
    assert quota.owners() == 0  # nothing is kept for an owner that holds nothing


def test_a_thing_given_back_makes_room() -> None:
    quota = Quota("x", 1, "no")
    with quota.hold("s", "a"), pytest.raises(LimitExceeded):
        quota.take("s", "b")
    quota.take("s", "b")
    assert quota.held("s") == 1
