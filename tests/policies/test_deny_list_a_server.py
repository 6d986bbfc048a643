"""Decision table for policies/examples/deny-list-a-server.yaml."""

from __future__ import annotations

import pytest

from proxy.policy.engine import Subject
from proxy.policy.model import Effect, Identity
from tests.policies.tables import (
    ANONYMOUS,
    READ_ONLY,
    check,
    engine_for,
    log_level,
    person,
    prompt,
    resource,
    tool,
)

ENGINE = engine_for("deny-list-a-server")
DEV = person("dev")
ADMIN = person("ada", "admin")

ROWS = [
    pytest.param(DEV, tool("github.create_issue"), "allow", (), id="open-by-default"),
    pytest.param(DEV, prompt("docs.summarise"), "allow", (), id="prompts-open-by-default"),
    pytest.param(DEV, tool("shell.run"), "deny", ("shell-is-for-admins",), id="dev-no-shell"),
    pytest.param(
        DEV,
        tool("shell.list_dir", READ_ONLY),
        "deny",
        ("shell-is-for-admins",),
        id="dev-no-shell-even-reading",
    ),
    pytest.param(
        DEV, resource("file:///tmp/x", "shell"), "deny", ("shell-is-for-admins",), id="dev-no-shell-resources"
    ),
    pytest.param(ADMIN, tool("shell.run"), "allow", (), id="admin-shell"),
    pytest.param(DEV, tool("github.delete_repo"), "deny", ("no-deletes",), id="no-deletes"),
    pytest.param(DEV, tool("drive.remove_file"), "deny", ("no-deletes",), id="no-removes"),
    pytest.param(ADMIN, tool("shell.delete_file"), "deny", ("no-deletes",), id="admin-no-deletes-either"),
    pytest.param(DEV, prompt("github.delete_help"), "allow", (), id="delete-glob-is-for-tools-only"),
    pytest.param(
        ANONYMOUS, tool("github.get_issue", READ_ONLY), "deny", ("no-anonymous",), id="anonymous-nothing"
    ),
    pytest.param(
        ANONYMOUS,
        tool("shell.delete_file"),
        "deny",
        ("no-anonymous", "no-deletes", "shell-is-for-admins"),
        id="all-denies-named",
    ),
    # `default: allow` opens tools, prompts and resources, never a shared server's log level.
    pytest.param(DEV, log_level("github"), "deny", (), id="open-default-does-not-open-log-levels"),
    pytest.param(ADMIN, log_level("github"), "deny", (), id="nor-for-admins"),
    # A deny rule naming no kind denies log levels as it denies everything else.
    pytest.param(DEV, log_level("shell"), "deny", ("shell-is-for-admins",), id="deny-rules-still-apply"),
]


@pytest.mark.parametrize(("identity", "subject", "effect", "rule_ids"), ROWS)
def test_deny_list_a_server(
    identity: Identity, subject: Subject, effect: Effect, rule_ids: tuple[str, ...]
) -> None:
    check(ENGINE, identity, subject, effect, rule_ids)
