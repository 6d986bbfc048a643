"""``Doorway``: a server's question outside any call waits for its 2026-07-28 identity's next
call, and goes to that call; nobody else is ever asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from proxy.core.errors import MethodNotFound
from proxy.protocol.jsonrpc import Message
from proxy.servers.held_questions import Doorway

pytestmark = pytest.mark.anyio


class Call:
    """A call of the identity's (a parked call in the gateway): records what it was asked."""

    def __init__(self, name: str) -> None:
        self.session_id = name
        self.capabilities: Mapping[str, Any] = {"roots": {}}
        self.log_level: str | None = None
        self.asleep = False
        self.asked: list[str] = []
        self.heard: list[Message] = []

    def notify(self, message: Message) -> None:
        self.heard.append(message)

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        self.asked.append(method)
        return {"roots": [{"uri": f"file:///{self.session_id}"}]}


async def test_a_question_before_any_call_waits_for_the_next_call_and_goes_to_it() -> None:
    doorway = Doorway("identity-alice", {"roots": {}}, hold=10)
    call = Call("alice-call")
    answer: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def ask() -> None:
            answer.append(await doorway.request("roots/list", None))

        tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        assert answer == []  # held: no call yet
        doorway.enter(call)
    assert call.asked == ["roots/list"]
    assert answer == [{"roots": [{"uri": "file:///alice-call"}]}]
    doorway.leave(call)


async def test_a_question_no_call_comes_for_is_refused_after_the_hold() -> None:
    doorway = Doorway("identity-alice", {}, hold=0.01)
    with anyio.fail_after(5), pytest.raises(MethodNotFound) as refused:
        await doorway.request("roots/list", None)
    assert "only during one of its calls" in refused.value.message


async def test_the_latest_call_is_asked_and_one_that_left_never_is() -> None:
    doorway = Doorway("identity-alice", {}, hold=0.01)
    first, second = Call("first"), Call("second")
    doorway.enter(first)
    doorway.enter(second)
    await doorway.request("roots/list", None)
    doorway.leave(second)
    await doorway.request("roots/list", None)
    doorway.leave(first)
    with anyio.fail_after(5), pytest.raises(MethodNotFound):
        await doorway.request("roots/list", None)
    assert (first.asked, second.asked) == (["roots/list"], ["roots/list"])


async def test_a_session_is_asked_at_once_on_its_standing_stream() -> None:
    session = Call("session-1")
    doorway = Doorway("session-1", {"roots": {}}, hold=0.01, standing=session)
    with anyio.fail_after(5):
        await doorway.request("roots/list", None)
    assert session.asked == ["roots/list"]
    assert doorway.session_id == "session-1"
