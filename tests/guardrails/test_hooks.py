"""The hook contract, both ways: what Manifold sends (names, never more than selected) and what
it accepts back (a known decision; edits only to fields it sent; a bounded, printable reason)."""

from __future__ import annotations

import orjson
import pytest

from proxy.guardrails.hooks import CONTRACT, HookFailure, read_answer, request_body
from proxy.policy.guardrail_engine import GuardSubject
from proxy.policy.model import Identity

SENT = {"arguments": {"note": "x"}}


def test_the_request_names_direction_identity_server_tool_content_and_findings() -> None:
    identity = Identity("alice", frozenset({"dev", "ops"}), "jwt", issuer="https://idp", subject="u-1")
    subject = GuardSubject("tool_arguments", "gh", "tool", "gh.create_issue", "team")
    body = orjson.loads(request_body("dlp-out", identity, subject, SENT, {"email": 2, "aws_access_key": 1}))
    assert body == {
        "version": CONTRACT,
        "rule": "dlp-out",
        "direction": "tool_arguments",
        "identity": {
            "name": "alice",
            "roles": ["dev", "ops"],
            "source": "jwt",
            "issuer": "https://idp",
            "subject": "u-1",
        },
        "endpoint": "team",
        "server": "gh",
        "kind": "tool",
        "name": "gh.create_issue",
        "content": SENT,
        "findings": [{"detector": "aws_access_key", "count": 1}, {"detector": "email", "count": 2}],
    }


@pytest.mark.parametrize("decision", ["allow", "deny", "confirm"])
def test_a_decision_is_read_with_its_reason(decision: str) -> None:
    answer = read_answer(orjson.dumps({"decision": decision, "reason": "because\x1b[31m"}), SENT)
    assert (answer.decision, answer.reason) == (decision, "because [31m")


def test_a_redaction_carries_the_edited_fields() -> None:
    answer = read_answer(orjson.dumps({"decision": "redact", "content": {"arguments": {"note": "y"}}}), SENT)
    assert answer.content == {"arguments": {"note": "y"}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"decision": "shrug"}', "unknown decision"),
        (b'{"decision": "deny", "reason": 5}', "'reason' is not a string"),
        (b'{"decision": "redact"}', "no 'content'"),
        (b'{"decision": "redact", "content": {"structuredContent": {}}}', "did not send: structuredContent"),
    ],
)
def test_anything_else_is_a_failure_of_the_hook(body: bytes, message: str) -> None:
    with pytest.raises(HookFailure, match=message):
        read_answer(body, SENT)


def test_a_long_reason_is_cut() -> None:
    answer = read_answer(orjson.dumps({"decision": "deny", "reason": "x" * 10_000}), SENT)
    assert len(answer.reason) == 500
