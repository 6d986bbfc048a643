"""Decision table for policies/examples/contractors-no-destructive.yaml."""

from __future__ import annotations

import pytest

from proxy.policy.annotations import effective_annotations
from proxy.policy.engine import Subject
from proxy.policy.model import Effect, Identity
from tests.policies.tables import READ_ONLY, WRITES, check, engine_for, person, prompt, tool

ENGINE = engine_for("contractors-no-destructive")
STAFF = person("sam", "staff")
CONTRACTOR = person("carl", "contractor")
# Declared read-only by a server nobody marked trusted: still destructive as far as policy goes.
CLAIMED = effective_annotations(
    {"readOnlyHint": True, "destructiveHint": False}, trusted=False, override=None
)
MARKED = effective_annotations(None, trusted=False, override={"readOnlyHint": True})

ROWS = [
    pytest.param(STAFF, tool("github.delete_repo"), "allow", ("staff-everything",), id="staff-destroys"),
    pytest.param(
        STAFF, tool("vault.read_secret", READ_ONLY), "allow", ("staff-everything",), id="staff-vault"
    ),
    pytest.param(STAFF, prompt("github.triage"), "allow", ("staff-everything",), id="staff-prompt"),
    pytest.param(
        CONTRACTOR,
        tool("github.get_issue", READ_ONLY),
        "allow",
        ("contractors-tools",),
        id="contractor-reads",
    ),
    pytest.param(
        CONTRACTOR,
        tool("github.create_issue", WRITES),
        "allow",
        ("contractors-tools",),
        id="contractor-writes",
    ),
    pytest.param(
        CONTRACTOR,
        tool("github.delete_repo"),
        "deny",
        ("contractors-no-destructive",),
        id="contractor-cannot-destroy",
    ),
    pytest.param(
        CONTRACTOR,
        tool("notes.get", CLAIMED),
        "deny",
        ("contractors-no-destructive",),
        id="untrusted-claim-not-believed",
    ),
    pytest.param(
        CONTRACTOR, tool("notes.get", MARKED), "allow", ("contractors-tools",), id="operator-marked-read-only"
    ),
    pytest.param(
        CONTRACTOR,
        tool("vault.read_secret", READ_ONLY),
        "deny",
        ("contractors-no-vault",),
        id="contractor-no-vault",
    ),
    pytest.param(
        CONTRACTOR,
        tool("vault.rotate_key"),
        "deny",
        ("contractors-no-destructive", "contractors-no-vault"),
        id="both-denies-named",
    ),
    pytest.param(
        person("cs", "contractor", "staff"),
        tool("vault.read_secret", READ_ONLY),
        "allow",
        ("contractors-tools", "staff-everything"),
        id="staff-contractor-vault",
    ),
    pytest.param(CONTRACTOR, prompt("github.triage"), "deny", (), id="contractor-no-prompts"),
]


@pytest.mark.parametrize(("identity", "subject", "effect", "rule_ids"), ROWS)
def test_contractors_no_destructive(
    identity: Identity, subject: Subject, effect: Effect, rule_ids: tuple[str, ...]
) -> None:
    check(ENGINE, identity, subject, effect, rule_ids)
