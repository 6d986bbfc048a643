"""Decision table for policies/default.yaml."""

from __future__ import annotations

import pytest

from proxy.policy.annotations import effective_annotations
from proxy.policy.engine import Subject
from proxy.policy.model import Effect, Identity
from tests.policies.tables import (
    ANONYMOUS,
    READ_ONLY,
    WRITES,
    check,
    engine_for,
    log_level,
    person,
    prompt,
    resource,
    tool,
)

ENGINE = engine_for("default")
ALICE = person("alice")
CONTRACTOR = person("carl", "contractor")
ADMIN = person("ada", "admin")
LOCAL = person("me", source="stdio")
# An untrusted server that claims its tool only reads: the claim is not believed.
CLAIMED = effective_annotations({"readOnlyHint": True}, trusted=False, override=None)

ROWS = [
    pytest.param(
        ADMIN, tool("github.delete_repo"), "allow", ("admins-may-do-everything",), id="admin-destroys"
    ),
    pytest.param(LOCAL, tool("shell.run"), "allow", ("local-user-may-do-everything",), id="local-user-runs"),
    pytest.param(
        person("root", "admin", source="stdio"),
        tool("shell.run"),
        "allow",
        ("admins-may-do-everything", "local-user-may-do-everything"),
        id="both-allows-named",
    ),
    pytest.param(
        ALICE,
        tool("github.get_issue", READ_ONLY),
        "allow",
        ("signed-in-may-use-read-only-tools",),
        id="alice-reads",
    ),
    pytest.param(ALICE, tool("github.create_issue", WRITES), "deny", (), id="alice-cannot-write"),
    pytest.param(ALICE, tool("github.delete_repo"), "deny", (), id="alice-cannot-destroy"),
    pytest.param(ALICE, tool("notes.read", CLAIMED), "deny", (), id="untrusted-read-only-claim-not-believed"),
    pytest.param(
        ALICE,
        prompt("docs.summarise"),
        "allow",
        ("signed-in-may-use-prompts-and-resources",),
        id="alice-prompt",
    ),
    pytest.param(
        ALICE,
        resource("file:///srv/a.md", "docs"),
        "allow",
        ("signed-in-may-use-prompts-and-resources",),
        id="alice-resource",
    ),
    pytest.param(ANONYMOUS, tool("github.get_issue", READ_ONLY), "deny", (), id="anonymous-cannot-read"),
    pytest.param(ANONYMOUS, prompt("docs.summarise"), "deny", (), id="anonymous-no-prompts"),
    pytest.param(
        CONTRACTOR,
        tool("github.get_issue", READ_ONLY),
        "allow",
        ("signed-in-may-use-read-only-tools",),
        id="contractor-reads",
    ),
    pytest.param(
        CONTRACTOR,
        tool("github.delete_repo"),
        "deny",
        ("contractors-no-destructive-tools",),
        id="contractor-cannot-destroy",
    ),
    pytest.param(
        person("cara", "contractor", "admin"),
        tool("github.delete_repo"),
        "deny",
        ("contractors-no-destructive-tools",),
        id="contractor-admin-still-cannot-destroy",
    ),
    pytest.param(
        person("cara", "contractor", "admin"),
        tool("github.create_issue", WRITES),
        "allow",
        ("admins-may-do-everything",),
        id="contractor-admin-writes",
    ),
    pytest.param(
        ADMIN, log_level("github"), "allow", ("admins-set-server-log-levels",), id="admin-sets-log-level"
    ),
    pytest.param(
        LOCAL, log_level("shell"), "allow", ("local-user-sets-server-log-levels",), id="local-user-log-level"
    ),
    pytest.param(ALICE, log_level("github"), "deny", (), id="signed-in-cannot-set-log-level"),
    pytest.param(ANONYMOUS, log_level("github"), "deny", (), id="anonymous-cannot-set-log-level"),
]


@pytest.mark.parametrize(("identity", "subject", "effect", "rule_ids"), ROWS)
def test_default_policy(
    identity: Identity, subject: Subject, effect: Effect, rule_ids: tuple[str, ...]
) -> None:
    check(ENGINE, identity, subject, effect, rule_ids)
