"""What a server may ask a client, and the shape of a client's answer given in a request of its own."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.protocol.asks import answer_problem, kept_capabilities

ROOTS = {"roots": [{"uri": "file:///work"}]}
TEXT = {"role": "assistant", "content": {"type": "text", "text": "Hi"}, "model": "m"}


@pytest.mark.parametrize(
    ("method", "answer"),
    [
        ("elicitation/create", {"action": "accept", "content": {"name": "Ada"}}),
        ("elicitation/create", {"action": "decline"}),
        ("elicitation/create", {"action": "cancel"}),
        ("sampling/createMessage", TEXT),
        ("sampling/createMessage", {**TEXT, "content": [TEXT["content"]]}),
        ("roots/list", ROOTS),
    ],
)
def test_an_answer_of_its_results_shape_is_taken(method: str, answer: Any) -> None:
    assert answer_problem(method, answer) is None


@pytest.mark.parametrize(
    ("method", "answer"),
    [
        ("elicitation/create", "accept"),
        ("elicitation/create", {"action": "maybe"}),
        ("elicitation/create", {"action": "accept", "content": ["Ada"]}),
        ("sampling/createMessage", {"role": "system", "content": {}, "model": "m"}),
        ("sampling/createMessage", {"role": "assistant", "content": {}}),
        ("sampling/createMessage", {**TEXT, "content": "Hi"}),
        ("roots/list", {"roots": ["file:///work"]}),
        ("roots/list", {}),
    ],
)
def test_a_malformed_answer_is_named(method: str, answer: Any) -> None:
    assert answer_problem(method, answer)


def test_kept_capabilities_keep_what_a_server_may_ask_for() -> None:
    assert kept_capabilities({"elicitation": {"url": {}}, "other": {}}) == {"elicitation": {"url": {}}}
