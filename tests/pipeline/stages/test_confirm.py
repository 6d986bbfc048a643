"""The confirm stage, as the chain sees it: stepped over while nobody can be asked (the asking
itself is tested end to end in tests/interaction/test_confirm.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from proxy.enforce.confirm.memory import Memory
from proxy.observe.metrics import Metrics
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import GuardQuestion
from proxy.pipeline.stages.confirm import Confirm
from proxy.policy.model import Confirmation
from tests.pipeline.stages.contexts import POLICY, access_for, call_context, served_tools, tool_context

ASK = Confirmation(reasons=("it deletes",), timeout=60, remember="session")


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
    guarded = dataclasses.replace(creating, guard_question=GuardQuestion(("g",), ASK, {}))
    assert not stage.passes(guarded)  # a guardrail's question is asked whatever the policy
    (tmp_path / "policy.yaml").write_text(POLICY.replace("rules:\n", "rules:" + CONFIRMING, 1))
    assert access.reload()  # a reload brings a confirm rule
    assert access.asks
    assert not stage.passes(creating)
    assert stage.passes(call_context(method="tools/list", name="", params={}))
