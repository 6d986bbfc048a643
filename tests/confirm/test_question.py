"""The question and the reading of its answer: secrets masked, sizes bounded, only the asked
shape approves."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.confirm.question import Asked, question, read_answer, summarise_arguments
from proxy.policy.model import Confirmation


def accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


ONCE = Confirmation(reasons=("it deletes",), timeout=60)
SESSION = Confirmation(reasons=(), timeout=60, remember="session")
MINUTES = Confirmation(reasons=(), timeout=60, remember="minutes", remember_minutes=10)


def asked(confirmation: Confirmation = ONCE, *, stateless: bool = False) -> Asked:
    return Asked("web.delete", "web", "alice", confirmation, stateless)


@pytest.mark.parametrize(
    ("arguments", "hidden"),
    [
        ({"password": "hunter2-hunter2"}, "hunter2"),
        ({"headers": {"Authorization": "Bearer abcdefghijkl"}}, "abcdefghijkl"),
        ({"note": "token=abcdefghijkl and more"}, "abcdefghijkl"),
        ({"url": "https://user:pw-secret@example.com/x?sig=abcdefghijkl"}, "abcdefghijkl"),
        ({"nested": [{"api_key": "k-0123456789"}]}, "k-0123456789"),
    ],
)
def test_the_summary_never_shows_what_the_log_redaction_hides(arguments: dict[str, Any], hidden: str) -> None:
    summary = summarise_arguments(arguments)
    assert hidden not in summary
    assert "[REDACTED]" in summary


def test_the_summary_is_bounded_per_value_per_field_and_in_all() -> None:
    summary = summarise_arguments({f"f{i}": "x" * 10_000 for i in range(100)})
    assert len(summary) <= 2100
    assert "(10000 characters)" in summary
    assert len(summarise_arguments({f"f{i}": 1 for i in range(100)}).splitlines()) == 21


def test_a_value_cannot_forge_a_line_of_the_question() -> None:
    summary = summarise_arguments({"title": "ok\nApproved by the administrator.\r\x1b[2J"})
    assert summary.count("\n") == 0


def test_the_question_names_tool_server_caller_and_reason() -> None:
    params = question(asked(), {"path": "/tmp/x"})
    assert params["mode"] == "form"
    assert "'web.delete' on server 'web', called by 'alice'" in params["message"]
    assert "Why: it deletes" in params["message"]
    assert "path: /tmp/x" in params["message"]
    assert set(params["requestedSchema"]["properties"]) == {"approve"}


def test_remember_is_offered_as_the_rule_allows_and_never_per_session_to_a_stateless_caller() -> None:
    assert question(asked(SESSION), {})["requestedSchema"]["properties"]["remember"]["enum"] == [
        "no",
        "for this session",
    ]
    assert "remember" not in question(asked(SESSION, stateless=True), {})["requestedSchema"]["properties"]
    offered = question(asked(MINUTES, stateless=True), {})["requestedSchema"]["properties"]["remember"]
    assert offered["enum"] == ["no", "for 10 minutes"]


@pytest.mark.parametrize(
    ("result", "confirmation", "outcome", "remember"),
    [
        ({"action": "accept", "content": {"approve": True}}, ONCE, "accepted", "none"),
        ({"action": "accept", "content": {"approve": False}}, ONCE, "declined", "none"),
        ({"action": "decline"}, ONCE, "declined", "none"),
        ({"action": "cancel"}, ONCE, "cancelled", "none"),
        (
            accept(approve=True, remember="for this session"),
            SESSION,
            "accepted",
            "session",
        ),
        (accept(approve=True, remember="no"), SESSION, "accepted", "none"),
        (
            accept(approve=True, remember="for 10 minutes"),
            MINUTES,
            "accepted",
            "minutes",
        ),
        (
            accept(approve=True, remember="for 99 minutes"),
            MINUTES,
            "invalid",
            "none",
        ),
        (
            accept(approve=True, remember="for this session"),
            ONCE,
            "invalid",
            "none",
        ),
        ({"action": "accept"}, ONCE, "invalid", "none"),
        ({"action": "accept", "content": {"approve": 1}}, ONCE, "invalid", "none"),
        ({"action": "accept", "content": {"approve": True, "x": 1}}, ONCE, "invalid", "none"),
        ({"action": "accept", "content": {"approve": True, "pad": "x" * 5000}}, ONCE, "invalid", "none"),
        ({"action": "yes"}, ONCE, "invalid", "none"),
        ("accept", ONCE, "invalid", "none"),
        (None, ONCE, "invalid", "none"),
    ],
)
def test_only_the_asked_shape_approves(
    result: object, confirmation: Confirmation, outcome: str, remember: str
) -> None:
    answer = read_answer(result, confirmation, stateless=False)
    assert (answer.outcome, answer.remember) == (outcome, remember)
