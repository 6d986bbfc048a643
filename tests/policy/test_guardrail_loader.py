"""The ``guardrails:`` section of policy files: validated with errors that say where, combined
across files, and checked against the detectors that exist."""

from __future__ import annotations

import pytest

from proxy.core.errors import ConfigError
from proxy.policy.loader import combine, parse_policy_text

BASE = "version: 1\ndefault: allow\n"


def load(*texts: str) -> object:
    return combine((f"p{i}.yaml", parse_policy_text(text, f"p{i}.yaml")) for i, text in enumerate(texts))


def test_rules_patterns_words_and_hosts_are_loaded_and_combined() -> None:
    policy = load(
        BASE + "guardrails:\n  patterns: {ticket: 'TCK-[0-9]+'}\n  rules:\n"
        "    - {id: a, effect: deny, match: {detectors: ['custom:ticket']}}\n",
        BASE + "guardrails:\n  words: {codes: [bluebird]}\n  allowed_hosts: [docs.example.com]\n  rules:\n"
        "    - {id: b, effect: redact, match: {detectors: ['custom:codes', aws_access_key]}}\n",
    )
    guardrails = policy.guardrails  # type: ignore[attr-defined]
    assert [rule.id for rule in guardrails.rules] == ["a", "b"]
    assert guardrails.custom == {"custom:ticket", "custom:codes"}
    assert guardrails.allowed_hosts == ("docs.example.com",)


def test_a_policy_without_guardrails_has_none() -> None:
    assert load(BASE).guardrails is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "guardrails:\n  rules:\n    - {id: a, effect: deny, match: {detectors: [aws_acces_key]}}\n",
            "p0.yaml: guardrails.rules[0] (id 'a'): match.detectors[0]: 'aws_acces_key' matches no detector",
        ),
        (
            "guardrails:\n  rules:\n    - {id: a, effect: shred, match: {}}\n",
            "p0.yaml: guardrails.rules[0] (id 'a'): effect:",
        ),
        (
            "guardrails:\n  rules:\n    - {id: a, effect: deny, match: {directions: [sideways]}}\n",
            "match.directions[0]",
        ),
        ("guardrails:\n  rulez: []\n", "p0.yaml: guardrails: rulez: unknown field"),
        ("guardrails: [1]\n", "guardrails: must be a mapping"),
        (
            "rules:\n  - {id: a, effect: allow, match: {}}\nguardrails:\n  rules:\n"
            "    - {id: a, effect: audit, match: {}}\n",
            "id: already used by a rule in p0.yaml",
        ),
    ],
)
def test_mistakes_are_reported_with_file_rule_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load(BASE + text)
    assert message in str(raised.value)


def test_a_custom_detector_defined_twice_is_refused() -> None:
    twice = BASE + "guardrails:\n  patterns: {x: 'a+'}\n"
    with pytest.raises(ConfigError, match="custom detector 'x' is defined twice"):
        load(twice, twice)
