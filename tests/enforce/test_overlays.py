"""Overlays: in force until they expire, for everyone or one role, bounded, and replaced whole
(as a replica reads them from Redis)."""

from __future__ import annotations

import pytest

from proxy.enforce.overlays import MAX_OVERLAYS, Overlay, Overlays
from proxy.policy.model import Identity

ALICE = Identity("alice", frozenset({"dev"}), "api_key")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_overlay_expires_by_itself() -> None:
    clock = Clock()
    overlays = Overlays(clock=clock)
    overlays.add(Overlay("a", "gh.t", None, 1010.0, "ops", 1000.0))
    assert overlays.refusing(ALICE, "gh.t") is not None
    clock.now = 1010.0
    assert overlays.refusing(ALICE, "gh.t") is None
    assert overlays.active() == []


def test_a_role_overlay_applies_to_holders_of_that_role_only() -> None:
    overlays = Overlays(clock=Clock())
    overlays.add(Overlay("a", "gh.t", "intern", 2000.0, "ops", 1000.0))
    assert overlays.refusing(ALICE, "gh.t") is None
    assert overlays.refusing(Identity("i", frozenset({"intern"}), "jwt"), "gh.t") is not None


def test_switching_on_removes_the_role_given_or_every_overlay_of_the_tool() -> None:
    overlays = Overlays(clock=Clock())
    overlays.add(Overlay("a", "gh.t", "intern", 2000.0, "ops", 1000.0))
    overlays.add(Overlay("b", "gh.t", None, 2000.0, "ops", 1000.0))
    assert [o.id for o in overlays.remove("gh.t", "intern")] == ["a"]
    assert [o.id for o in overlays.remove("gh.t", None)] == ["b"]
    assert overlays.active() == []


def test_the_number_in_force_is_bounded() -> None:
    overlays = Overlays(clock=Clock())
    overlays.replace(Overlay(str(n), f"t{n}", None, 2000.0, "ops", 1000.0) for n in range(MAX_OVERLAYS))
    with pytest.raises(ValueError, match="overlays are in force already"):
        overlays.add(Overlay("x", "tx", None, 2000.0, "ops", 1000.0))


def test_json_round_trips_and_foreign_data_is_refused() -> None:
    overlay = Overlay("a", "gh.t", None, 2000.0, "ops", 1000.0, "why")
    assert Overlay.from_json(overlay.to_json()) == overlay
    shown = overlay.to_json()
    bad_ones: list[object] = [[], {"id": "a"}, {**shown, "extra": 1}, {**shown, "until": "x"}]
    for bad in bad_ones:
        with pytest.raises(ValueError, match=r"overlay|argument"):
            Overlay.from_json(bad)
