"""What a request may be sent back: log lines per the caller's level, and server questions, for
handshake sessions and for 2026-07-28 callers (whose "session" is one request's envelope)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.clients.session import Client, ClientSession, InboundRequest, StatelessCaller
from proxy.core.errors import METHOD_NOT_FOUND, MISSING_CAPABILITY, ProtocolError
from proxy.policy.model import ANONYMOUS
from proxy.protocol import jsonrpc, versions
from proxy.protocol.jsonrpc import Message

pytestmark = pytest.mark.anyio


def caller(version: str, log_level: str | None = None, **capabilities: Any) -> Client:
    """A 2026-07-28 request's caller, or a handshake-era session, at ``version``."""
    if versions.is_stateless(version):
        return StatelessCaller("s", "http", version, capabilities, ANONYMOUS, log_level=log_level)
    return ClientSession(
        id="s", transport="http", protocol_version=version, capabilities=capabilities, log_level=log_level
    )


def log(level: str) -> Message:
    return jsonrpc.notification("notifications/message", {"level": level, "data": level})


def delivered(session: Client, messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    request = InboundRequest(session, out.append)
    for message in messages:
        request.notify(message)
    return out


LINES = [log("debug"), log("warning"), log("error")]
PROGRESS = jsonrpc.notification("notifications/progress", {"progressToken": 1, "progress": 1})


def test_a_modern_caller_gets_log_lines_only_at_or_above_the_level_it_asked_for() -> None:
    assert delivered(caller("2026-07-28", "warning"), [*LINES, PROGRESS]) == [*LINES[1:], PROGRESS]


def test_a_modern_caller_that_asked_for_no_level_gets_no_log_lines() -> None:
    assert delivered(caller("2026-07-28"), [*LINES, PROGRESS]) == [PROGRESS]


def test_a_legacy_session_gets_every_log_line_about_its_request_as_before() -> None:
    assert delivered(caller("2025-11-25"), LINES) == LINES


async def ask(session: Client, method: str) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        await InboundRequest(session, lambda _: None).request(method, {})
    return caught.value


async def test_a_question_needing_an_undeclared_capability_is_missing_capability_for_a_modern_caller() -> (
    None
):
    refused = await ask(caller("2026-07-28"), "sampling/createMessage")
    assert (refused.code, refused.data) == (MISSING_CAPABILITY, {"requiredCapabilities": {"sampling": {}}})


async def test_a_modern_caller_cannot_be_asked_even_with_the_capability_yet() -> None:
    refused = await ask(caller("2026-07-28", sampling={}), "sampling/createMessage")
    assert refused.code == METHOD_NOT_FOUND


@pytest.mark.parametrize("version", ["2026-07-28", "2025-11-25"])
async def test_a_question_no_capability_covers_is_method_not_found(version: str) -> None:
    assert (await ask(caller(version), "tasks/get")).code == METHOD_NOT_FOUND


async def test_a_legacy_session_without_the_capability_is_refused_as_before() -> None:
    assert (await ask(caller("2025-11-25"), "roots/list")).code == METHOD_NOT_FOUND
