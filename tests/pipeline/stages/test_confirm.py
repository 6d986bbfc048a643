"""The approval mark: what an approval, a remembered answer or an open question is tied to."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from proxy.enforce.confirm.memory import Memory
from proxy.observe.metrics import Metrics
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import GuardQuestion
from proxy.pipeline.stages.confirm import Confirm, Need, approval_mark
from proxy.policy.model import Confirmation
from tests.pipeline.stages.contexts import POLICY, access_for, call_context, served_tools, tool_context

BASE = Need(("ask",), Confirmation(reasons=("it deletes",), timeout=60, remember="session"))


@pytest.mark.parametrize(
    "edited",
    [
        pytest.param(dataclasses.replace(BASE, rule_ids=("ask", "ask-too")), id="another-rule"),
        pytest.param(dataclasses.replace(BASE.confirm, reasons=("it now pays",)), id="reason"),
        pytest.param(dataclasses.replace(BASE.confirm, remember="none"), id="remember"),
        pytest.param(dataclasses.replace(BASE.confirm, timeout=30), id="timeout"),
        pytest.param(dataclasses.replace(BASE.confirm, remember_any_arguments=True), id="any-arguments"),
        pytest.param(
            dataclasses.replace(BASE.confirm, approver_roles=frozenset({"managers"})), id="approver"
        ),
    ],
)
def test_any_edit_of_the_deciding_rules_changes_the_mark(edited: Need | Confirmation) -> None:
    need = edited if isinstance(edited, Need) else dataclasses.replace(BASE, confirm=edited)
    assert approval_mark(need) != approval_mark(BASE)


def test_the_same_rules_give_the_same_mark() -> None:
    same = Need(("ask",), Confirmation(reasons=("it deletes",), timeout=60, remember="session"))
    assert approval_mark(same) == approval_mark(BASE)


CONFIRMING = """
  - id: ask-before-creating
    effect: confirm
    match: {tools: ["gh.create_*"]}
"""


def test_the_chain_steps_over_the_stage_while_nobody_can_be_asked(tmp_path: Path) -> None:
    access = access_for(tmp_path)  # allow and deny rules, no confirm rule, pins off
    stage = Confirm(access, RequestStates(b"k" * 32, ttl=60), Memory(), Metrics(process_metrics=False), None)
    served = served_tools(access)
    creating = tool_context(served, "gh.create_issue")
    assert stage.passes(creating)
    guarded = dataclasses.replace(creating, guard_question=GuardQuestion(("g",), BASE.confirm, {}))
    assert not stage.passes(guarded)  # a guardrail's question is asked whatever the policy
    (tmp_path / "policy.yaml").write_text(POLICY.replace("rules:\n", "rules:" + CONFIRMING, 1))
    assert access.reload()  # a reload brings a confirm rule
    assert access.asks
    assert not stage.passes(creating)
    assert stage.passes(call_context(method="tools/list", name="", params={}))
