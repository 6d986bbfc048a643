"""Decision table for policies/examples/guardrails.yaml: who, where, what was found → effect, rules."""

from __future__ import annotations

import pytest

from proxy.config.policy_files import load_policy
from proxy.policy.guardrail_engine import GuardEngine, GuardSubject
from proxy.policy.model import Identity
from tests.policies.tables import POLICIES, person

POLICY = load_policy(POLICIES / "examples" / "guardrails.yaml")
assert POLICY.guardrails is not None
ENGINE = GuardEngine(POLICY.guardrails.rules)
DEV = person("dev", "engineer")
AGENT = person("sam", "support-agent")


def where(direction: str, name: str = "github.create_issue") -> GuardSubject:
    return GuardSubject(direction, name.split(".", 1)[0], "tool", name)  # type: ignore[arg-type]


ROWS: list[tuple[Identity, GuardSubject, set[str], str, tuple[str, ...]]] = [
    (DEV, where("tool_arguments"), set(), "allow", ()),
    (DEV, where("tool_arguments"), {"aws_access_key"}, "redact", ("secrets-never-leave",)),
    (DEV, where("tool_arguments"), {"custom:ticket"}, "deny", ("no-tickets-to-third-parties",)),
    (DEV, where("tool_arguments", "support.reply"), {"custom:ticket"}, "allow", ()),
    (DEV, where("tool_arguments"), {"email"}, "confirm", ("ask-before-sending-personal-data",)),
    (AGENT, where("tool_arguments"), {"email"}, "audit", ("watch-personal-data",)),
    (DEV, where("tool_arguments"), {"email", "custom:ticket"}, "deny", ("no-tickets-to-third-parties",)),
    (DEV, where("tool_results"), {"github_token"}, "redact", ("results-without-secrets",)),
    (DEV, where("tool_results"), {"injection", "github_token"}, "deny", ("no-instructions-in-results",)),
    (DEV, where("definitions"), {"tool_poisoning"}, "quarantine", ("poisoned-definitions",)),
    (DEV, where("definitions"), {"aws_access_key"}, "allow", ()),
    (DEV, where("tool_arguments"), {"inspection_limit"}, "deny", ("too-big-to-read",)),
    (DEV, where("tool_results"), {"inspection_limit"}, "allow", ()),
]


@pytest.mark.parametrize(("who", "subject", "found", "effect", "rules"), ROWS)
def test_the_guardrails_example_decides_as_written(
    who: Identity, subject: GuardSubject, found: set[str], effect: str, rules: tuple[str, ...]
) -> None:
    decision = ENGINE.decide(who, subject, found)
    assert (decision.effect, decision.rule_ids) == (effect, rules), "policies/examples/guardrails.yaml"
