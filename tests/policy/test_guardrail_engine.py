"""Deciding guardrails: deny overrides the rest, order never matters, a decision names its
rules and detectors, and a rule applies only where its conditions (and its directions) hold."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from proxy.policy.guardrail_engine import GuardEngine, GuardSubject
from proxy.policy.guardrails import GuardRule
from proxy.policy.model import ANONYMOUS, Identity

ALICE = Identity("alice", frozenset({"dev"}), "api_key")
ADMIN = Identity("root", frozenset({"admin"}), "api_key")
ARGS = GuardSubject("tool_arguments", "gh", "tool", "gh.create_issue")
RESULT = GuardSubject("tool_results", "gh", "tool", "gh.create_issue")
DEFINITION = GuardSubject("definitions", "gh", "tool", "gh.create_issue")


def rule(**fields: Any) -> GuardRule:
    return GuardRule.model_validate(fields)


RULES = (
    rule(id="redact-keys", effect="redact", match={"detectors": ["aws_*"]}),
    rule(
        id="deny-injection", effect="deny", match={"directions": ["tool_results"], "detectors": ["injection"]}
    ),
    rule(id="audit-email", effect="audit", match={"detectors": ["email"]}),
    rule(
        id="ask-email-out",
        effect="confirm",
        match={"detectors": ["email"], "servers": ["gh"]},
        unless={"roles": ["admin"]},
    ),
    rule(id="poisoned", effect="quarantine", match={"detectors": ["tool_poisoning", "injection"]}),
)


def test_nothing_found_is_allowed_without_naming_a_rule() -> None:
    decision = GuardEngine(RULES).decide(ALICE, ARGS, set())
    assert (decision.effect, decision.rule_ids) == ("allow", ())


def test_a_redact_rule_redacts_the_detectors_it_names() -> None:
    decision = GuardEngine(RULES).decide(ALICE, ARGS, {"aws_access_key"})
    assert (decision.effect, decision.rule_ids, decision.detectors) == (
        "redact",
        ("redact-keys",),
        ("aws_access_key",),
    )
    assert decision.redact == {"aws_access_key"}


def test_deny_overrides_redact_and_the_redaction_is_still_listed() -> None:
    decision = GuardEngine(RULES).decide(ALICE, RESULT, {"aws_access_key", "injection"})
    assert (decision.effect, decision.rule_ids, decision.detectors) == (
        "deny",
        ("deny-injection",),
        ("injection",),
    )
    assert decision.audited == ("deny-injection", "redact-keys")


def test_confirm_outranks_redact_and_audit_and_carries_how_to_ask() -> None:
    decision = GuardEngine(RULES).decide(ALICE, ARGS, {"email", "aws_access_key"})
    assert decision.effect == "confirm"
    assert decision.rule_ids == ("ask-email-out",)
    assert decision.confirm is not None
    assert decision.confirm.timeout == 120
    assert decision.redact == {"aws_access_key"}  # the person approves the redacted call


def test_an_unless_excepts_the_identity_and_the_next_effect_wins() -> None:
    decision = GuardEngine(RULES).decide(ADMIN, ARGS, {"email"})
    assert (decision.effect, decision.rule_ids) == ("audit", ("audit-email",))


def test_an_unless_naming_detectors_excepts_only_those_findings() -> None:
    rules = [
        rule(
            id="deny-secrets",
            effect="deny",
            match={"detectors": ["aws_*", "email"]},
            unless={"detectors": ["email"], "roles": ["dev"]},
        )
    ]
    engine = GuardEngine(rules)
    assert engine.decide(ALICE, ARGS, {"email"}).effect == "allow"
    assert engine.decide(ALICE, ARGS, {"email", "aws_access_key"}).detectors == ("aws_access_key",)
    assert engine.decide(ANONYMOUS, ARGS, {"email"}).effect == "deny"


def test_a_rule_applies_only_in_its_directions_and_where_its_effect_means_something() -> None:
    engine = GuardEngine(RULES)
    assert engine.decide(ALICE, ARGS, {"injection"}).effect == "allow"  # deny-injection: results
    assert engine.decide(ALICE, DEFINITION, {"injection"}).effect == "quarantine"
    assert engine.decide(ALICE, RESULT, {"tool_poisoning"}).effect == "allow"  # quarantine: definitions


def test_the_decision_never_depends_on_the_order_of_the_rules() -> None:
    found = {"aws_access_key", "email", "injection"}
    decisions = {
        GuardEngine(order).decide(who, where, found)
        for order in itertools.permutations(RULES)
        for who, where in [(ALICE, RESULT)]
    }
    assert len(decisions) == 1


def test_an_inspect_rule_lists_its_hook_always_or_only_on_its_detectors() -> None:
    rules = [
        rule(id="dlp", effect="inspect", hook="dlp", match={"directions": ["tool_arguments"]}),
        rule(id="second-opinion", effect="inspect", hook="judge", match={"detectors": ["injection"]}),
    ]
    engine = GuardEngine(rules)
    assert engine.decide(ALICE, ARGS, set()).hooks == (("dlp", "dlp"),)
    assert engine.decide(ALICE, RESULT, {"injection"}).hooks == (("second-opinion", "judge"),)
    assert engine.decide(ALICE, RESULT, set()).hooks == ()


def test_no_rule_for_a_direction_means_no_candidates_so_nothing_is_scanned() -> None:
    engine = GuardEngine([rule(id="r", effect="redact", match={"directions": ["tool_arguments"]})])
    assert engine.candidates(ALICE, ARGS)
    assert engine.candidates(ALICE, RESULT) == ()
    assert engine.directions() == {"tool_arguments"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"effect": "quarantine", "match": {"directions": ["tool_results"]}}, "does not apply to direction"),
        ({"effect": "confirm", "match": {"directions": ["tool_results"]}}, "does not apply to direction"),
        ({"effect": "redact", "match": {"directions": ["definitions"]}}, "does not apply to direction"),
        ({"effect": "inspect", "match": {}}, "'hook' names"),
        ({"effect": "deny", "hook": "x", "match": {}}, "'hook' names"),
        ({"effect": "deny", "confirm": {"timeout": 5}, "match": {}}, "'confirm' options"),
        (
            {"effect": "audit", "match": {"directions": ["definitions"], "roles": ["dev"]}},
            "judged once for everyone",
        ),
    ],
)
def test_rules_that_could_not_mean_anything_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rule(id="bad", **fields)


def test_a_rule_about_who_asks_never_applies_to_definitions() -> None:
    about_roles = rule(id="r", effect="audit", match={"roles": ["dev"]})
    assert "definitions" not in about_roles.directions
    assert "definitions" in rule(id="s", effect="audit", match={}).directions


def test_explain_lists_per_direction_the_rules_that_may_apply_to_who_and_what() -> None:
    engine = GuardEngine(RULES)
    report = engine.explain(ALICE, "gh", "tool", "gh.create_issue")
    assert report["tool_arguments"] == [
        {"rule": "ask-email-out", "effect": "confirm", "detectors": ["email"]},
        {"rule": "audit-email", "effect": "audit", "detectors": ["email"]},
        {"rule": "redact-keys", "effect": "redact", "detectors": ["aws_*"]},
    ]
    assert [r["rule"] for r in report["definitions"]] == ["audit-email", "poisoned"]
    assert "ask-email-out" not in [
        r["rule"] for r in engine.explain(ADMIN, "gh", "tool", "gh.x")["tool_arguments"]
    ]
