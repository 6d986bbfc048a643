"""The ``confirm`` effect: matched like any rule, overridden by deny, never allowing on its own,
options combined most cautiously, and every mistake in its options named at load."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.errors import ConfigError
from proxy.policy.engine import PolicyEngine
from proxy.policy.loader import combine, document_from_mapping
from proxy.policy.model import Identity
from tests.policies.tables import READ_ONLY, person, prompt, resource, tool

ALICE = person("alice", "staff")


def engine(*rules: dict[str, Any], default: str = "allow") -> PolicyEngine:
    document = document_from_mapping({"version": 1, "default": default, "rules": list(rules)})
    return PolicyEngine(combine([("p.yaml", document)]))


def confirm(rule_id: str, match: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    rule: dict[str, Any] = {"id": rule_id, "effect": "confirm", "match": match or {}}
    if options:
        rule["confirm"] = options
    return rule


def test_a_confirm_rule_asks_about_a_tool_the_default_allows() -> None:
    decision = engine(confirm("ask", reason="check it")).decide(ALICE, tool("web.delete"))
    assert (decision.effect, decision.rule_ids) == ("confirm", ("ask",))
    assert decision.confirm is not None
    assert decision.confirm.reason == "check it"
    assert decision.visible


def test_deny_overrides_confirm() -> None:
    deny = {"id": "no", "effect": "deny", "match": {"tools": ["web.*"]}}
    decision = engine(confirm("ask"), deny).decide(ALICE, tool("web.delete"))
    assert (decision.effect, decision.rule_ids, decision.confirm) == ("deny", ("no",), None)


def test_confirm_never_allows_what_the_default_denies() -> None:
    decision = engine(confirm("ask"), default="deny").decide(ALICE, tool("web.delete"))
    assert (decision.effect, decision.rule_ids) == ("deny", ())


def test_confirm_overrides_an_allow_rule() -> None:
    allow = {"id": "staff", "effect": "allow", "match": {"roles": ["staff"]}}
    decision = engine(allow, confirm("ask"), default="deny").decide(ALICE, tool("web.delete"))
    assert (decision.effect, decision.rule_ids) == ("confirm", ("ask",))


def test_confirm_matches_effective_annotations_and_servers() -> None:
    rules = engine(confirm("ask", {"servers": ["web"], "annotations": {"destructive": True}}))
    assert rules.decide(ALICE, tool("web.delete")).effect == "confirm"
    assert rules.decide(ALICE, tool("web.read", READ_ONLY)).effect == "allow"
    assert rules.decide(ALICE, tool("mail.delete")).effect == "allow"


@pytest.mark.parametrize(
    "identity",
    [person("alice", "staff", source="api_key"), Identity("alice", frozenset({"staff"}), "jwt", "https://b")],
)
def test_confirm_matches_sources_and_issuers(identity: Identity) -> None:
    rules = engine(confirm("ask", {"sources": ["jwt"], "issuers": ["https://a"]}))
    assert rules.decide(identity, tool("web.delete")).effect == "allow"
    asked = Identity("alice", frozenset({"staff"}), "jwt", "https://a")
    assert rules.decide(asked, tool("web.delete")).effect == "confirm"


def test_prompts_resources_and_log_levels_are_never_asked_about() -> None:
    rules = engine(confirm("ask"))
    assert rules.decide(ALICE, prompt("web.p")).effect == "allow"
    assert rules.decide(ALICE, resource("file:///x", "web")).effect == "allow"


def test_several_confirm_rules_combine_most_cautiously() -> None:
    rules = engine(
        confirm("a", reason="one", timeout=300, remember="session", remember_any_arguments=True),
        confirm("b", reason="two", timeout=30, remember={"minutes": 5}, approver={"role": "admins"}),
    )
    decision = rules.decide(ALICE, tool("web.delete"))
    assert decision.rule_ids == ("a", "b")
    options = decision.confirm
    assert options is not None
    assert options.reasons == ("one", "two")
    assert options.timeout == 30
    assert (options.remember, options.remember_minutes) == ("minutes", 5)
    assert options.remember_any_arguments is False
    assert options.approver_roles == {"admins"}


def test_one_rule_that_remembers_nothing_makes_the_decision_remember_nothing() -> None:
    decision = engine(confirm("a", remember="session"), confirm("b")).decide(ALICE, tool("web.delete"))
    assert decision.confirm is not None
    assert decision.confirm.remember == "none"


def test_the_reason_defaults_to_the_rules_description() -> None:
    rule = {**confirm("a"), "description": "it deletes things"}
    decision = engine(rule).decide(ALICE, tool("web.delete"))
    assert decision.confirm is not None
    assert decision.confirm.reason == "it deletes things"
    assert decision.reason == "to be confirmed by rule a: it deletes things"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (confirm("a", approver="bob"), "confirm.approver: must be 'self' or {role: <a role>} (got 'bob')"),
        (confirm("a", approver={"role": ""}), "confirm.approver: must be 'self'"),
        (confirm("a", remember="forever"), "confirm.remember: must be 'none', 'session' or {minutes:"),
        (confirm("a", remember={"minutes": 0}), "confirm.remember: must be"),
        (confirm("a", remember={"minutes": 100000}), "(got {'minutes': 100000})"),
        (confirm("a", timeout=0), "confirm.timeout: must be greater than or equal to 1"),
        (confirm("a", timeout=99999), "confirm.timeout: must be less than or equal to 3600"),
        (confirm("a", timeout="soon"), "confirm.timeout"),
        (confirm("a", reson="x"), "confirm.reson: unknown field (did you mean 'reason'?)"),
        (confirm("a", reason=""), "confirm.reason"),
        (
            {"id": "a", "effect": "allow", "match": {}, "confirm": {}},
            "'confirm' options only apply to rules with effect: confirm",
        ),
        (confirm("a", {"prompts": ["*"]}), "a confirm rule asks before tool calls only"),
        ({**confirm("a"), "show": True}, "'show' only applies to deny rules"),
    ],
)
def test_mistakes_in_confirm_options_are_named_at_load(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        document_from_mapping({"version": 1, "rules": [rule]}, source="p.yaml")
    assert "p.yaml: rules[0] (id 'a')" in str(raised.value)
    assert message in str(raised.value)


def test_confirm_is_not_a_default() -> None:
    with pytest.raises(ConfigError, match="default: must be 'allow' or 'deny'"):
        document_from_mapping({"version": 1, "default": "confirm"}, source="p.yaml")
