"""The conditions policy rules and guardrail rules share: each one compiled once, holding when any
element of its list does, and meaning the same in a policy rule as in a guardrail rule."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from proxy.policy.conditions import Check, all_of, globs, where, who
from proxy.policy.engine import PolicyEngine, Subject
from proxy.policy.guardrail_engine import GuardEngine, GuardSubject
from proxy.policy.guardrails import GuardRule
from proxy.policy.model import ANONYMOUS, Identity, Match, Policy, Rule

ALICE = Identity("alice", frozenset({"dev"}), "api_key")
BOB = Identity("bob", frozenset({"ops", "dev"}), "oauth", issuer="https://idp.example")
ROOT = Identity("root", frozenset({"admin"}), "api_key")
PEOPLE = (ALICE, BOB, ROOT, ANONYMOUS)
SUBJECTS = (
    Subject("tool", "gh.create_issue", "gh"),
    Subject("tool", "gh.delete_repo", "gh"),
    Subject("prompt", "gh.summary", "gh"),
    Subject("resource", "file:///etc/hosts", "files"),
    Subject("tool", "files.read", "files"),
)
MATCHES: tuple[dict[str, Any], ...] = (
    {},
    {"identities": ["alice"]},
    {"roles": ["ops", "admin"]},
    {"sources": ["oauth"]},
    {"issuers": ["https://idp.example"]},
    {"authenticated": True},
    {"authenticated": False},
    {"servers": ["gh"]},
    {"tools": ["gh.*"]},
    {"tools": ["*delete*"], "roles": ["dev"]},
    {"prompts": ["*"]},
    {"resources": ["file:///etc/*"]},
    {"tools": ["files.*"], "resources": ["file:*"], "servers": ["files"]},
    {"identities": ["bob"], "servers": ["gh"], "tools": ["gh.create_*"]},
)


def test_each_condition_holds_when_any_of_its_elements_does() -> None:
    match = Match.model_validate({"roles": ["ops", "admin"], "servers": ["gh", "files"]})
    checks: list[Check[Subject]] = who(match)
    check = all_of(checks + where(match, {}))
    assert check(BOB, SUBJECTS[0])
    assert check(ROOT, SUBJECTS[3])
    assert not check(ALICE, SUBJECTS[0])  # no role given
    assert not check(BOB, Subject("tool", "x.y", "other"))  # no server given


def test_naming_one_kind_limits_the_match_to_that_kind() -> None:
    match = Match.model_validate({"tools": ["*"]})
    checks: list[Check[Subject]] = where(match, {"tool": match.tools, "prompt": match.prompts})
    check = all_of(checks)
    assert check(ALICE, SUBJECTS[0])
    assert not check(ALICE, SUBJECTS[2])  # a prompt: no prompts named


def test_globs_match_whole_names_case_sensitively() -> None:
    matcher = globs(["gh.create_*", "files.read"])
    assert matcher("gh.create_issue")
    assert matcher("files.read")
    for other in ("xgh.create_issue", "files.readme", "GH.create_issue"):
        assert not matcher(other)


def test_no_conditions_always_hold() -> None:
    none: list[Check[Subject]] = []
    assert all_of(none)(ANONYMOUS, SUBJECTS[0])


@pytest.mark.parametrize("fields", MATCHES)
def test_a_match_means_the_same_in_a_policy_rule_and_a_guardrail_rule(fields: dict[str, Any]) -> None:
    """The one policy language: a policy rule and a guardrail rule with the same match apply to
    exactly the same (identity, subject) pairs."""
    policy = PolicyEngine(
        Policy(default="allow", rules=(Rule(id="r", effect="deny", match=Match(**fields)),))
    )
    guard = GuardEngine([GuardRule.model_validate({"id": "g", "effect": "audit", "match": fields})])
    for identity, subject in itertools.product(PEOPLE, SUBJECTS):
        denied = policy.decide(identity, subject).effect == "deny"
        where_ = GuardSubject("tool_results", subject.server_id, subject.kind, subject.name)  # type: ignore[arg-type]
        inspected = bool(guard.candidates(identity, where_))
        assert denied == inspected, (fields, identity.name, subject)
