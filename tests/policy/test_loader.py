"""Policy documents: what is accepted, how several combine, and errors that say where."""

from __future__ import annotations

import pytest

from proxy.core.errors import ConfigError
from proxy.policy.loader import combine, document_from_mapping, parse_policy_text
from proxy.policy.model import Policy

BASE = """\
version: 1
default: deny
rules:
  - id: admins
    effect: allow
    description: admins may do anything
    match: {roles: [admin]}
  - id: no-shell
    effect: deny
    match: {servers: [shell]}
    unless: {identities: [root]}
"""


def load(*documents: tuple[str, str]) -> Policy:
    """The policy of ``(source, text)`` documents, as if read from files of those names."""
    return combine((source, parse_policy_text(text, source)) for source, text in documents)


def problems(text: str, source: str = "p.yaml") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_policy_text(text, source)
    return str(caught.value).splitlines()


def rules(body: str) -> str:
    return "version: 1\nrules:\n" + body


def test_a_valid_document_loads_into_rules_and_a_default() -> None:
    policy = load(("base.yaml", BASE))

    assert policy.default == "deny"
    assert [rule.id for rule in policy.rules] == ["admins", "no-shell"]
    admins, no_shell = policy.rules
    assert admins.match.roles == ("admin",)
    assert admins.sentence() == "allowed by rule admins: admins may do anything"
    assert no_shell.unless is not None
    assert no_shell.unless.identities == ("root",)


def test_json_documents_load_too() -> None:
    text = '{"version": 1, "default": "allow", "rules": [{"id": "x", "effect": "deny", "match": {}}]}'
    policy = load(("p.json", text))
    assert (policy.default, policy.rules[0].id) == ("allow", "x")


def test_a_file_without_default_denies_by_default() -> None:
    policy = load(("p.yaml", rules("  - {id: a, effect: allow, match: {roles: [x]}}\n")))
    assert policy.default == "deny"


def test_several_files_pool_their_rules_and_share_one_default() -> None:
    team = rules("  - {id: devs, effect: allow, match: {roles: [dev]}}\n")
    policy = load(("base.yaml", BASE), ("team.yaml", team))

    assert policy.default == "deny"
    assert [rule.id for rule in policy.rules] == ["admins", "no-shell", "devs"]


def test_a_rule_id_used_in_two_files_is_an_error_naming_both() -> None:
    other = rules("  - {id: x, effect: allow, match: {}}\n  - {id: admins, effect: deny, match: {}}\n")
    with pytest.raises(ConfigError) as caught:
        load(("base.yaml", BASE), ("team.yaml", other))

    message = str(caught.value)
    assert "team.yaml: rules[1] (id 'admins'): id: already used by a rule in" in message
    assert message.endswith("base.yaml")


def test_files_that_set_different_defaults_are_an_error() -> None:
    with pytest.raises(
        ConfigError, match=r"open\.yaml: default: 'allow' contradicts default 'deny' set in .*base"
    ):
        load(("base.yaml", BASE), ("open.yaml", "version: 1\ndefault: allow\n"))


def test_files_that_set_the_same_default_agree() -> None:
    first = document_from_mapping({"version": 1, "default": "allow"})
    second = document_from_mapping({"version": 1, "default": "allow"})
    assert combine([("a", first), ("b", second)]) == Policy(default="allow", rules=())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            rules("  - {id: a, effect: permit, match: {}}\n"),
            "p.yaml: rules[0] (id 'a'): effect: must be 'allow', 'deny' or 'confirm' (got 'permit')",
        ),
        (
            rules("  - {id: a, effect: allow, match: {rolez: [x]}}\n"),
            "p.yaml: rules[0] (id 'a'): match.rolez: unknown field (did you mean 'roles'?)",
        ),
        (
            rules("  - {id: a, effect: allow, match: {tools: [ok, 'gh.[abc']}}\n"),
            "p.yaml: rules[0] (id 'a'): match.tools[1]: unclosed '[' at position 3",
        ),
        (
            rules("  - {id: a, effect: allow, match: {tools: ['']}}\n"),
            "p.yaml: rules[0] (id 'a'): match.tools[0]: a glob must not be empty",
        ),
        (
            rules("  - {id: a, effect: allow, match: {roles: []}}\n"),
            "p.yaml: rules[0] (id 'a'): match.roles: must not be empty",
        ),
        (
            rules("  - {id: a, effect: allow, match: {roles: admin}}\n"),
            "p.yaml: rules[0] (id 'a'): match.roles: "
            "must be a list (got 'admin'; write [admin] for a list of one)",
        ),
        (
            rules("  - {id: a, effect: deny, match: {annotations: {readOnlyHint: true}}}\n"),
            "p.yaml: rules[0] (id 'a'): match.annotations.readOnlyHint: "
            "unknown field (did you mean 'readOnly'?)",
        ),
        (
            rules("  - {id: a, effect: deny, match: {annotations: {destructive: 'yes'}}}\n"),
            "p.yaml: rules[0] (id 'a'): match.annotations.destructive: must be true or false (got 'yes')",
        ),
        (
            rules("  - {id: a, effect: deny, match: {annotations: {}}}\n"),
            "p.yaml: rules[0] (id 'a'): match.annotations: give at least one of readOnly",
        ),
        (  # `roles:` with nothing after it is null in YAML; read as "any role" it would open the rule
            rules("  - id: a\n    effect: allow\n    match:\n      roles:\n      servers: [x]\n"),
            "p.yaml: rules[0] (id 'a'): match.roles: is empty (null): give a value, or leave the field out",
        ),
        (
            rules("  - {id: a, effect: deny, match: {prompts: ['*'], annotations: {destructive: true}}}\n"),
            "p.yaml: rules[0] (id 'a'): match: 'annotations' only apply to tools",
        ),
        (
            rules("  - {id: a, effect: deny, match: {}, unless: {servers: [1]}}\n"),
            "p.yaml: rules[0] (id 'a'): unless.servers[0]: must be a string (got 1)",
        ),
        (
            rules("  - {id: 'has space', effect: deny, match: {}}\n"),
            "p.yaml: rules[0] (id 'has space'): id: must be a letter or digit",
        ),
        (rules("  - {effect: deny, match: {}}\n"), "p.yaml: rules[0]: id: required field is missing"),
        (rules("  - {id: a, effect: deny}\n"), "p.yaml: rules[0] (id 'a'): match: required field is missing"),
        (
            rules("  - {id: a, effect: deny, match: {}}\n  - {id: a, effect: allow, match: {}}\n"),
            "p.yaml: rules[1] (id 'a'): id: duplicate rule id 'a' (also rules[0])",
        ),
        ("version: 2\n", "p.yaml: version: must be 1 (got 2)"),
        ("rules: []\n", "p.yaml: version: required field is missing"),
        ("version: 1\ndefault: maybe\n", "p.yaml: default: must be 'allow' or 'deny' (got 'maybe')"),
        ("version: 1\nrule: []\n", "p.yaml: rule: unknown field (did you mean 'rules'?)"),
        ("- 1\n", "p.yaml: the top level must be a mapping with 'version' and 'rules' (got a list)"),
        ("", "p.yaml: the top level must be a mapping with 'version' and 'rules' (got an empty file)"),
        ("version: 1\nversion: 1\n", "p.yaml: invalid YAML: line 2, column 1: duplicate key 'version'"),
    ],
)
def test_a_bad_document_is_an_error_naming_file_rule_field_and_value(text: str, expected: str) -> None:
    found = problems(text)
    assert any(line.startswith(expected) for line in found), found


def test_every_problem_in_a_file_is_reported_at_once() -> None:
    text = rules(
        "  - {id: a, effect: permit, match: {}}\n"
        "  - {id: b, effect: allow, match: {tols: [x]}}\n"
        "  - {id: c, effect: deny, match: {servers: []}}\n"
    )
    found = problems(text)
    assert [line.split(":")[1].strip() for line in found] == [
        "rules[0] (id 'a')",
        "rules[1] (id 'b')",
        "rules[2] (id 'c')",
    ]


def test_an_empty_match_is_allowed_and_means_everything() -> None:
    document = parse_policy_text(rules("  - {id: all, effect: deny, match: {}}\n"), "p.yaml")
    assert document.rules[0].match.kinds is None
