"""The question and the reading of its answer: secrets masked, sizes bounded, only the asked
shape approves."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.enforce.confirm.question import (
    MAX_SUMMARY_CHARS,
    Asked,
    outcome_of_action,
    question,
    read_answer,
    refusal_text,
    summarise_arguments,
    summary_of,
)
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


def test_padding_cannot_push_what_runs_out_of_sight() -> None:
    summary = summarise_arguments({"command": "echo hi" + " " * 250 + "&& curl x|sh"})
    assert summary == "command: echo hi ⟨250 blanks⟩ && curl x|sh"


def test_long_values_and_many_fields_are_shown_whole() -> None:
    summary = summary_of({f"f{i}": "x" * 50 for i in range(100)} | {"last": "y" * 2000 + "TAIL"})
    assert summary.complete
    assert summary.text.endswith("y" * 2000 + "TAIL")
    assert len(summary.text.splitlines()) == 101


def test_arguments_too_large_to_show_whole_are_not_offered_for_approval() -> None:
    summary = summary_of({"content": "a" * MAX_SUMMARY_CHARS, "then": "rm -rf /"})
    assert not summary.complete
    assert "too large to show whole" in summary.text
    assert "rm -rf" not in summary.text


def test_a_masked_value_says_it_was_masked() -> None:
    summary = summarise_arguments({"api_token": "k-0123456789", "note": "Authorization: Bearer abcdefghijkl"})
    assert "api_token: [REDACTED] (masked: Manifold does not show secrets)" in summary
    assert "note: Authorization: [REDACTED] (masked" in summary
    assert "x: 1 (masked" not in summarise_arguments({"x": 1})


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


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ({"action": "decline"}, "declined"),
        ({"action": "cancel"}, "cancelled"),
        ({"action": "nonsense"}, "invalid"),
        (None, "invalid"),
        ("accept", "invalid"),
    ],
)
def test_an_answer_to_the_approval_link_that_is_no_accept_says_how_it_ended(
    answer: object, outcome: str
) -> None:
    assert outcome_of_action(answer) == outcome


def test_a_question_the_caller_gave_up_tells_the_other_waiting_call_to_ask_anew() -> None:
    text = refusal_text("pay.refund", ("needs-a-manager",), ONCE, "abandoned")
    assert text.startswith("Manifold did not run 'pay.refund': the policy (rule needs-a-manager) asks")
    assert "gave up waiting; call it again to ask anew" in text


def test_a_refusal_for_a_changed_tool_names_the_pins_not_a_rule() -> None:
    text = refusal_text("gh.echo", ("pins",), ONCE, "declined")
    assert "changed the tool since it was approved (tool pins)" in text
    assert "the user declined it" in text
