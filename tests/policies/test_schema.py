"""policies/schema.json agrees with the loader, and every shipped policy has a decision table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from proxy.core.errors import ConfigError
from proxy.policy.loader import document_from_mapping
from tests.policies.tables import POLICIES

SCHEMA = json.loads((POLICIES / "schema.json").read_text())
VALIDATOR = Draft202012Validator(SCHEMA)
SHIPPED = sorted([POLICIES / "default.yaml", *(POLICIES / "examples").glob("*.yaml")])


def test_the_schema_is_valid_json_schema_2020_12() -> None:
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
def test_every_shipped_policy_is_valid_for_the_schema_and_the_loader(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    assert list(VALIDATOR.iter_errors(data)) == []
    document_from_mapping(data, source=str(path))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
def test_every_shipped_policy_has_a_decision_table(path: Path) -> None:
    table = Path(__file__).parent / f"test_{path.stem.replace('-', '_')}.py"
    assert table.exists(), f"{path.name} has no decision table {table.name}"


def rule(**fields: Any) -> dict[str, Any]:
    return {"version": 1, "rules": [{"id": "r", "effect": "allow", "match": {}, **fields}]}


def guard(**fields: Any) -> dict[str, Any]:
    rule = {"id": "g", "effect": "deny", "match": {}, **fields}
    return {"version": 1, "guardrails": {"rules": [rule]}}


def test_a_complete_guardrails_section_is_valid_for_the_schema_and_the_loader() -> None:
    document = {
        "version": 1,
        "guardrails": {
            "patterns": {"ticket": "TCK-[0-9]{6}"},
            "words": {"codenames": ["bluebird"]},
            "allowed_hosts": ["docs.example.com"],
            "rules": [
                {
                    "id": "a",
                    "effect": "redact",
                    "match": {"directions": ["tool_arguments"], "detectors": ["*_key"]},
                },
                {"id": "b", "effect": "inspect", "hook": "dlp", "decode": True, "match": {"servers": ["gh"]}},
                {
                    "id": "c",
                    "effect": "confirm",
                    "match": {"detectors": ["email"]},
                    "confirm": {"timeout": 30},
                },
                {"id": "d", "effect": "quarantine", "match": {"directions": ["definitions"]}},
                {
                    "id": "e",
                    "effect": "deny",
                    "match": {"detectors": ["custom:ticket"]},
                    "unless": {"roles": ["x"]},
                },
            ],
        },
    }
    assert list(VALIDATOR.iter_errors(document)) == []
    document_from_mapping(document)


@pytest.mark.parametrize(
    "document",
    [
        {"version": 2},
        {"rules": []},
        {"version": 1, "default": "maybe"},
        {"version": 1, "extra": True},
        rule(effect="permit"),
        rule(id="has space"),
        rule(match={"rolez": ["x"]}),
        rule(match={"roles": []}),
        rule(match={"issuers": []}),
        rule(match={"issuers": "https://id.example.com"}),
        rule(match={"roles": "admin"}),
        rule(match={"tools": [""]}),
        rule(match={"log_levels": []}),
        rule(match={"log_levels": "github"}),
        rule(match={"authenticated": "yes"}),
        rule(match={"annotations": {}}),
        rule(match={"roles": None, "servers": ["x"]}),
        rule(description=None),
        rule(match={"annotations": {"readOnlyHint": True}}),
        rule(unless={"servers": [1]}),
        {"version": 1, "rules": [{"id": "r", "effect": "allow"}]},
        {"version": 1, "default": "confirm"},
        rule(confirm={}),
        rule(effect="confirm", confirm={"approver": "bob"}),
        rule(effect="confirm", confirm={"remember": "forever"}),
        rule(effect="confirm", confirm={"timeout": 0}),
        rule(effect="confirm", confirm={"reson": "x"}),
        rule(effect="confirm", match={"prompts": ["*"]}),
        guard(effect="shred"),
        guard(effect="inspect"),
        guard(hook="dlp"),
        guard(match={"directions": ["sideways"]}),
        guard(match={"detectors": []}),
        guard(effect="quarantine", match={"directions": ["tool_results"]}),
        guard(effect="confirm", match={"directions": ["tool_results"]}),
        guard(effect="redact", match={"directions": ["definitions"]}),
        {"version": 1, "guardrails": {"rulez": []}},
        {"version": 1, "guardrails": {"patterns": {"x": ""}}},
    ],
)
def test_the_schema_rejects_what_the_loader_rejects(document: dict[str, Any]) -> None:
    assert list(VALIDATOR.iter_errors(document)) != []
    with pytest.raises(ConfigError):
        document_from_mapping(document)
