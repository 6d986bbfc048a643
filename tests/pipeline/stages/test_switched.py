"""The switched-off stage: a tool an operator switched off is refused (for everyone, or for one
role) with who did it and until when; other tools and other roles go on."""

from __future__ import annotations

import pytest

from proxy.enforce.overlays import Overlay, Overlays
from proxy.pipeline.context import outcome_of
from proxy.pipeline.stages.switched import SwitchedOff
from proxy.policy.model import Identity
from tests.pipeline.stages.contexts import ALICE, Recorder, call_context

pytestmark = pytest.mark.anyio

NOW = 1_000_000.0


def overlays(*switched: Overlay) -> Overlays:
    found = Overlays(clock=lambda: NOW)
    found.replace(switched)
    return found


def off(tool: str, role: str | None = None, until: float = NOW + 60) -> Overlay:
    return Overlay("o1", tool, role, until, "ops", NOW - 1, "it misbehaves")


async def test_a_tool_switched_off_for_everyone_is_refused_saying_by_whom_and_why() -> None:
    forward = Recorder()
    result = await SwitchedOff(overlays(off("gh.get_issue")))(call_context(name="gh.get_issue"), forward)
    assert forward.seen == []
    assert outcome_of(result) == "denied"
    text = result["content"][0]["text"]
    assert "switched off for everyone by an operator (ops)" in text
    assert "it misbehaves" in text


async def test_another_tool_and_an_expired_overlay_let_the_call_through() -> None:
    forward = Recorder()
    stage = SwitchedOff(overlays(off("gh.other"), off("gh.get_issue", until=NOW - 1)))
    assert await stage(call_context(name="gh.get_issue"), forward) == forward.result
    assert len(forward.seen) == 1


async def test_a_tool_switched_off_for_a_role_refuses_that_role_only() -> None:
    forward = Recorder()
    stage = SwitchedOff(overlays(off("gh.get_issue", role="intern")))
    intern = Identity("ivy", frozenset({"intern"}), "api_key")
    assert outcome_of(await stage(call_context(identity=intern, name="gh.get_issue"), forward)) == "denied"
    assert await stage(call_context(identity=ALICE, name="gh.get_issue"), forward) == forward.result


async def test_only_tool_calls_are_refused() -> None:
    forward = Recorder()
    stage = SwitchedOff(overlays(off("gh.get_issue")))
    assert await stage(call_context(method="prompts/get", name="gh.get_issue"), forward) == forward.result
