"""A server's task-augmented sampling and elicitation held by Manifold: asked plainly of the
client in the background, polled by the server from the record. The client here is an in-memory
relay (the end-to-end proof, with the official SDK clients: tests/interaction/test_tasks_client_side.py
and test_tasks_client_side_hostile.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from proxy.core.errors import InvalidParams, LimitExceeded, NoClientToAsk, RemoteError
from proxy.outbound.client_tasks import ClientTasks
from proxy.outbound.relay import RELATED_TASK
from proxy.protocol.jsonrpc import Message

pytestmark = pytest.mark.anyio

ELICIT = "elicitation/create"
ACCEPTED = {"action": "accept", "content": {"name": "Ada"}}


class Client:
    """A relay whose client answers when told to (or fails, or never answers)."""

    def __init__(self, answer: Any = ACCEPTED, *, fail: Exception | None = None) -> None:
        self.answer, self.fail = answer, fail
        self.asked: list[tuple[str, dict[str, Any] | None]] = []
        self.go = anyio.Event()
        self.cancelled = False

    session_id = "s1"
    log_level = None
    asleep = False

    @property
    def capabilities(self) -> Mapping[str, Any]:
        return {"elicitation": {}, "sampling": {}}

    def notify(self, message: Message) -> None:
        raise AssertionError("nothing is notified")

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        self.asked.append((method, params))
        try:
            await self.go.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        if self.fail is not None:
            raise self.fail
        return self.answer


def _tasks(**options: Any) -> ClientTasks:
    return ClientTasks("srv", **options)


async def test_a_plain_request_is_asked_as_it_is() -> None:
    tasks = _tasks()
    client = Client()
    client.go.set()
    async with anyio.create_task_group() as tg:
        assert await tasks.ask(client, ELICIT, {"message": "hi"}, tg) == ACCEPTED
    assert client.asked == [(ELICIT, {"message": "hi"})]
    assert tasks.held == 0


async def test_a_task_is_answered_at_once_and_its_result_read_once_the_client_answered() -> None:
    tasks = _tasks()
    client = Client()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            created = await tasks.ask(client, ELICIT, {"message": "hi", "task": {"ttl": 60_000}}, tg)
            task_id = created["task"]["taskId"]
            assert created["task"]["status"] == "working"
            assert created["task"]["ttl"] == 60_000
            assert len(task_id) >= 20
            await anyio.lowlevel.checkpoint()
            assert client.asked == [(ELICIT, {"message": "hi"})]  # plainly: no task
            got = await tasks.poll("tasks/get", {"taskId": task_id})
            assert got["status"] == "input_required"  # a person is asked
            read: list[Any] = []
            async with anyio.create_task_group() as readers:

                async def reader() -> None:
                    read.append(await tasks.poll("tasks/result", {"taskId": task_id}))

                readers.start_soon(reader)
                for _ in range(5):
                    await anyio.lowlevel.checkpoint()
                assert read == []  # tasks/result blocks until the client answered
                client.go.set()
            assert read == [{**ACCEPTED, "_meta": {RELATED_TASK: {"taskId": task_id}}}]
            assert (await tasks.poll("tasks/get", {"taskId": task_id}))["status"] == "completed"
            listed = await tasks.poll("tasks/list", {})
            assert [t["taskId"] for t in listed["tasks"]] == [task_id]


async def test_a_sampling_task_is_working_while_its_client_is_asked() -> None:
    tasks = _tasks()
    client = Client({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"})
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            created = await tasks.ask(client, "sampling/createMessage", {"maxTokens": 3, "task": {}}, tg)
            task_id = created["task"]["taskId"]
            await anyio.lowlevel.checkpoint()
            assert client.asked == [("sampling/createMessage", {"maxTokens": 3})]
            assert (await tasks.poll("tasks/get", {"taskId": task_id}))["status"] == "working"
            client.go.set()
            got = await tasks.poll("tasks/result", {"taskId": task_id})
            assert got["model"] == "m"


async def test_a_clients_error_is_what_the_servers_tasks_result_gets() -> None:
    tasks = _tasks()
    refused = RemoteError("client", {"code": -32600, "message": "user said no"})
    client = Client(fail=refused)
    client.go.set()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            task_id = (await tasks.ask(client, ELICIT, {"task": {}}, tg))["task"]["taskId"]
            with pytest.raises(RemoteError) as caught:
                await tasks.poll("tasks/result", {"taskId": task_id})
            assert caught.value is refused
            got = await tasks.poll("tasks/get", {"taskId": task_id})
            # The client's own error is not echoed in the status (tasks/result carries it).
            assert (got["status"], got["statusMessage"]) == ("failed", "The client's answer was an error.")


@pytest.mark.slow  # waits for a ttl of 0.2s
async def test_a_client_that_never_answers_fails_the_task_at_its_ttl_and_nothing_hangs() -> None:
    tasks = _tasks(max_ttl=0.2)
    client = Client()  # never told to answer
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            task_id = (await tasks.ask(client, ELICIT, {"task": {"ttl": 600_000}}, tg))["task"]["taskId"]
            with pytest.raises(NoClientToAsk, match="within the task's ttl") as caught:
                await tasks.poll("tasks/result", {"taskId": task_id})
            assert caught.value.data["reason"] == "ttl_ended"
    assert client.cancelled
    got = await tasks.poll("tasks/get", {"taskId": task_id})  # its end is seen past its ttl
    assert (got["status"], got["statusMessage"]) == ("failed", "The client did not answer in time.")


async def test_a_server_that_cancels_stops_the_question_and_cannot_cancel_twice() -> None:
    tasks = _tasks()
    client = Client()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            task_id = (await tasks.ask(client, ELICIT, {"task": {}}, tg))["task"]["taskId"]
            await anyio.lowlevel.checkpoint()
            cancelled = await tasks.poll("tasks/cancel", {"taskId": task_id})
            assert cancelled["status"] == "cancelled"
            with pytest.raises(NoClientToAsk, match="cancelled by the server"):
                await tasks.poll("tasks/result", {"taskId": task_id})
            with pytest.raises(InvalidParams, match="already ended"):
                await tasks.poll("tasks/cancel", {"taskId": task_id})
    assert client.cancelled
    assert (await tasks.poll("tasks/get", {"taskId": task_id}))["status"] == "cancelled"


async def test_ids_of_another_connection_or_never_given_are_not_found_and_reach_no_client() -> None:
    mine = _tasks()
    theirs = _tasks()
    client = Client()
    client.go.set()
    async with anyio.create_task_group() as tg:
        task_id = (await theirs.ask(client, ELICIT, {"task": {}}, tg))["task"]["taskId"]
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        for params in ({"taskId": task_id}, {"taskId": "guessed"}, {"taskId": 3}, None):
            with pytest.raises(InvalidParams, match="Task not found"):
                await mine.poll(method, params)
    assert (await mine.poll("tasks/list", None)) == {"tasks": []}
    assert len(client.asked) == 1


async def test_a_flood_is_bounded_by_the_named_limit() -> None:
    tasks = _tasks(limit=3)
    client = Client()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                await tasks.ask(client, ELICIT, {"task": {}}, tg)
            with pytest.raises(LimitExceeded) as caught:
                await tasks.ask(client, ELICIT, {"task": {}}, tg)
            assert caught.value.limit == "max_client_tasks_per_server"
            await anyio.lowlevel.checkpoint()
            assert len(client.asked) == 3  # the refused one asked nobody
            client.go.set()
    assert tasks.held == 3


async def test_without_a_task_group_the_request_is_asked_plainly() -> None:
    tasks = _tasks()
    client = Client()
    client.go.set()
    assert await tasks.ask(client, ELICIT, {"task": {}}, None) == ACCEPTED
    assert tasks.held == 0
