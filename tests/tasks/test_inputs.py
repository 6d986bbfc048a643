"""A handshake-era task's questions for a 2026-07-28 owner, in memory: a fake relay whose
``tasks/result`` asks through the reader it is given, as a server's questions come back through
``ServerConnection``. End to end (a real server over stdio, a real Manifold):
tests/interaction/test_tasks_modern_input.py and test_tasks_conformance.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from proxy.core.errors import InvalidParams, LimitExceeded, ServerUnavailable
from proxy.pipeline.bridge.parking import ParkedCalls
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import Caller
from proxy.tasks.inputs import TaskQuestions
from tests.pipeline.bridge.test_parking import FORM, NAME, context

pytestmark = pytest.mark.anyio

ASKING = {"taskId": "t-1", "status": "input_required", "ttlMs": 60_000}


class Relay:
    """The relay's tasks/result: ``script`` runs with the asking client, as the server's task."""

    def __init__(self, script: Callable[[Caller], Awaitable[Any]]) -> None:
        self.script = script
        self.failures: list[dict[str, Any]] = []
        self.got: list[Any] = []  # what the server's questions were answered
        self.failed_once = anyio.Event()

    async def request(self, inbound: Caller, endpoint: str, method: str, params: Mapping[str, Any]) -> Any:
        assert (method, params) == ("tasks/result", {"taskId": "t-1"})
        return await self.script(inbound)

    async def failed(self, inbound: Caller, endpoint: str, task_id: str, error: dict[str, Any]) -> None:
        self.failures.append(error)
        self.failed_once.set()


@asynccontextmanager
async def questions(**bounds: Any) -> AsyncIterator[TaskQuestions]:
    parked = ParkedCalls(RequestStates(b"k" * 32, ttl=60), settle=0.02, **bounds)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(parked.run)
            yield TaskQuestions(parked, first_question=2.0)
            tg.cancel_scope.cancel()


async def test_the_servers_question_is_the_tasks_input_request_and_its_answer_goes_back() -> None:
    done = anyio.Event()

    async def task(asker: Caller) -> Any:
        relay.got.append(await asker.request("elicitation/create", FORM))
        done.set()
        return {"content": []}

    relay = Relay(task)
    owner = context().caller
    async with questions() as held:
        shown = await held.shown(relay, owner, "", "key", dict(ASKING), 60)
        assert shown["status"] == "input_required"
        assert shown["inputRequests"] == {"elicitation-1": {"method": "elicitation/create", "params": FORM}}
        assert (await held.shown(relay, owner, "", "key", dict(ASKING), 60)) == shown  # asked once
        held.answer("key", {"elicitation-1": NAME})
        await done.wait()
    assert relay.got == [NAME]


async def test_answers_to_questions_not_held_and_malformed_ones_are_refused_whole() -> None:
    relay = Relay(lambda asker: asker.request("elicitation/create", FORM))
    owner = context().caller
    async with questions() as held:
        with pytest.raises(InvalidParams, match="not waiting on"):
            held.answer("key", {"elicitation-1": NAME})  # nothing asked yet: no reader
        await held.shown(relay, owner, "", "key", dict(ASKING), 60)
        with pytest.raises(InvalidParams) as never:
            held.answer("key", {"elicitation-1": NAME, "elicitation-7": NAME})
        assert never.value.data == {"unknown": ["elicitation-7"], "outstanding": ["elicitation-1"]}
        for malformed in ({"action": "perhaps"}, [NAME], {"action": "accept", "content": "Ada"}):
            with pytest.raises(InvalidParams, match="elicitation-1"):
                held.answer("key", {"elicitation-1": malformed})
        shown = await held.shown(relay, owner, "", "key", dict(ASKING), 60)
        assert list(shown["inputRequests"]) == ["elicitation-1"]  # still asked: nothing was answered
    assert relay.got == []


async def test_no_question_held_shows_the_task_working_and_a_dead_server_fails_it() -> None:
    asked = anyio.Event()

    async def dies(asker: Caller) -> Any:
        asked.set()
        raise ServerUnavailable("fx", "the server went away")

    relay = Relay(dies)
    owner = context().caller
    async with questions() as held:
        shown = await held.shown(relay, owner, "", "key", dict(ASKING), 60)
        assert shown["status"] == "working"
        assert "inputRequests" not in shown
        await asked.wait()
        await relay.failed_once.wait()
    assert [f["code"] for f in relay.failures] == [-32603]
    assert "went away" in relay.failures[0]["message"]


async def test_a_server_asks_no_more_than_the_bound_holds() -> None:
    refused: list[BaseException] = []

    async def greedy(asker: Caller) -> Any:
        async def ask(params: dict[str, Any]) -> None:
            try:
                await asker.request("elicitation/create", params)
            except LimitExceeded as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, {**FORM, "message": "x" * 5000})  # too large
            tg.start_soon(ask, FORM)
            tg.start_soon(ask, FORM)  # one too many
        return {}

    relay = Relay(greedy)
    async with questions(max_questions=1, max_question_bytes=1024) as held:
        shown = await held.shown(relay, context().caller, "", "key", dict(ASKING), 60)
        assert list(shown["inputRequests"]) == ["elicitation-1"]
        assert sorted(e.limit for e in refused if isinstance(e, LimitExceeded)) == [
            "max_held_questions",
            "max_question_bytes",
        ]


async def test_without_parked_calls_nothing_is_opened() -> None:
    relay = Relay(lambda asker: asker.request("elicitation/create", FORM))
    held = TaskQuestions(None)
    assert await held.shown(relay, context().caller, "", "key", dict(ASKING), 60) == ASKING
    assert len(held) == 0
