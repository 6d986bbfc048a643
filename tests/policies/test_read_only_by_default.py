"""Decision table for policies/examples/read-only-by-default.yaml."""

from __future__ import annotations

import pytest

from proxy.policy.engine import Subject
from proxy.policy.model import Effect, Identity
from tests.policies.tables import ANONYMOUS, READ_ONLY, WRITES, check, engine_for, person, prompt, tool

ENGINE = engine_for("read-only-by-default")
READER = person("rita")
EDITOR = person("ed", "editor")
ADMIN = person("ada", "admin")

ROWS = [
    pytest.param(READER, tool("wiki.get_page", READ_ONLY), "allow", ("everyone-reads",), id="reader-reads"),
    pytest.param(READER, tool("wiki.edit_page", WRITES), "deny", (), id="reader-cannot-write"),
    pytest.param(READER, tool("wiki.delete_page"), "deny", (), id="reader-cannot-destroy"),
    pytest.param(
        EDITOR,
        tool("wiki.get_page", READ_ONLY),
        "allow",
        ("editors-write-without-destroying", "everyone-reads"),
        id="editor-reads",
    ),
    pytest.param(
        EDITOR,
        tool("wiki.edit_page", WRITES),
        "allow",
        ("editors-write-without-destroying",),
        id="editor-writes",
    ),
    pytest.param(EDITOR, tool("wiki.delete_page"), "deny", (), id="editor-cannot-destroy"),
    pytest.param(ADMIN, tool("wiki.delete_page"), "allow", ("admins-everything",), id="admin-destroys"),
    pytest.param(READER, prompt("wiki.summarise"), "allow", ("everyone-prompts",), id="reader-prompt"),
    pytest.param(ANONYMOUS, tool("wiki.get_page", READ_ONLY), "deny", (), id="anonymous-nothing"),
    pytest.param(ANONYMOUS, prompt("wiki.summarise"), "deny", (), id="anonymous-no-prompt"),
]


@pytest.mark.parametrize(("identity", "subject", "effect", "rule_ids"), ROWS)
def test_read_only_by_default(
    identity: Identity, subject: Subject, effect: Effect, rule_ids: tuple[str, ...]
) -> None:
    check(ENGINE, identity, subject, effect, rule_ids)
