"""The records of tasks Manifold holds for a server (a server's task-augmented sampling and
elicitation), pure: declared capabilities, ttl, lookup, cancel, listing, the bound."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.errors import InvalidParams, LimitExceeded
from proxy.protocol.client_tasks import (
    ENDED_KEPT,
    PAGE_SIZE,
    ClientTaskTable,
    declared,
    requested_ttl,
    without_task,
)

NOW = 1_800_000_000.0


def test_tasks_are_declared_for_each_of_sampling_and_elicitation_declared() -> None:
    both = declared({"sampling": {}, "elicitation": {"form": {}}, "roots": {}})
    assert both["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"sampling": {"createMessage": {}}, "elicitation": {"create": {}}},
    }
    assert both["elicitation"] == {"form": {}}
    assert declared({"elicitation": {}})["tasks"]["requests"] == {"elicitation": {"create": {}}}


def test_nothing_is_declared_without_sampling_or_elicitation_and_a_clients_own_tasks_never() -> None:
    assert declared({"roots": {}}) == {"roots": {}}
    # What a client declared of tasks is not passed on (Manifold holds the tasks, not the client).
    got = declared({"roots": {}, "tasks": {"requests": {"tools": {"call": {}}}}})
    assert got == {"roots": {}}


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("elicitation/create", {"message": "hi", "task": {"ttl": 5000}}, 5000),
        ("sampling/createMessage", {"task": {}}, 0),
        ("sampling/createMessage", {"task": {"ttl": -3}}, 0),
        ("sampling/createMessage", {"task": {"ttl": True}}, 0),
        ("sampling/createMessage", {"task": {"ttl": "9"}}, 0),
        ("elicitation/create", {"message": "hi"}, None),
        ("elicitation/create", {"task": "yes"}, None),
        ("roots/list", {"task": {"ttl": 5000}}, None),  # not a request the spec lets be a task
        ("elicitation/create", None, None),
    ],
)
def test_the_requested_ttl(method: str, params: dict[str, Any] | None, expected: int | None) -> None:
    assert requested_ttl(method, params) == expected


def test_the_client_is_asked_without_the_task() -> None:
    assert without_task({"message": "hi", "task": {"ttl": 1}, "_meta": {"k": 1}}) == {
        "message": "hi",
        "_meta": {"k": 1},
    }
    assert without_task(None) is None


def _table(limit: int = 10, max_ttl_ms: int = 60_000) -> ClientTaskTable:
    return ClientTaskTable(limit=limit, max_ttl_ms=max_ttl_ms, server_id="srv")


def test_a_task_starts_working_with_the_ttl_asked_capped_and_the_specs_fields() -> None:
    table = _table()
    asked = table.create("id-1", "elicitation/create", 5_000, NOW)
    assert asked.view() == {
        "taskId": "id-1",
        "status": "working",
        "createdAt": "2027-01-15T08:00:00.000Z",
        "lastUpdatedAt": "2027-01-15T08:00:00.000Z",
        "ttl": 5_000,
        "pollInterval": 1000,
    }
    assert table.create("id-2", "elicitation/create", 10**9, NOW).ttl_ms == 60_000
    assert table.create("id-3", "elicitation/create", 0, NOW).ttl_ms == 60_000


@pytest.mark.parametrize(
    "params",
    [{"taskId": "guessed"}, {"taskId": 7}, {"taskId": None}, {}, None, {"taskId": "x" * 10_000}],
)
def test_an_id_never_given_is_task_not_found(params: dict[str, Any] | None) -> None:
    table = _table()
    table.create("real", "elicitation/create", 5_000, NOW)
    with pytest.raises(InvalidParams, match="Task not found") as caught:
        table.find(params, NOW)
    assert caught.value.data == {"reason": "unknown_task"}
    assert "guessed" not in caught.value.message


def test_a_task_is_forgotten_when_its_ttl_ends() -> None:
    table = _table()
    table.create("id", "sampling/createMessage", 2_000, NOW)
    assert table.find({"taskId": "id"}, NOW + 1.9).task_id == "id"
    with pytest.raises(InvalidParams, match="Task not found"):
        table.find({"taskId": "id"}, NOW + 2.0)
    assert len(table) == 0


def test_a_task_that_ended_at_its_ttl_is_kept_a_little_so_its_end_is_seen() -> None:
    table = _table()
    late = table.create("late", "elicitation/create", 2_000, NOW)
    early = table.create("early", "elicitation/create", 60_000, NOW)
    table.settle(late, "failed", NOW + 2.0, message="The client did not answer in time.")
    table.settle(early, "completed", NOW + 1.0)
    assert table.find({"taskId": "late"}, NOW + 2.0 + ENDED_KEPT - 0.1).status == "failed"
    assert table.find({"taskId": "early"}, NOW + 59.9).status == "completed"  # kept until its ttl
    with pytest.raises(InvalidParams, match="Task not found"):
        table.find({"taskId": "late"}, NOW + 2.0 + ENDED_KEPT)


def test_the_table_is_bounded_and_the_refusal_names_the_limit_until_a_ttl_ends() -> None:
    table = _table(limit=3)
    for n in range(3):
        table.create(f"id-{n}", "elicitation/create", 1_000 * (n + 1), NOW)
    with pytest.raises(LimitExceeded) as caught:
        table.create("id-3", "elicitation/create", 1_000, NOW)
    assert caught.value.limit == "max_client_tasks_per_server"
    assert "limits.max_client_tasks_per_server is 3" in caught.value.message
    table.create("id-3", "elicitation/create", 1_000, NOW + 1.0)  # id-0's ttl ended: room for one


def test_an_ended_task_stays_as_it_ended() -> None:
    table = _table()
    task = table.create("id", "elicitation/create", 5_000, NOW)
    assert table.settle(task, "completed", NOW + 1)
    assert not table.settle(task, "failed", NOW + 2, message="late")
    assert (task.status, task.message, task.view()["lastUpdatedAt"]) == (
        "completed",
        None,
        "2027-01-15T08:00:01.000Z",
    )


def test_cancel_moves_a_running_task_to_cancelled_and_refuses_an_ended_one() -> None:
    table = _table()
    table.create("id", "elicitation/create", 5_000, NOW)
    assert table.cancel({"taskId": "id"}, NOW).status == "cancelled"
    with pytest.raises(InvalidParams, match="already ended"):
        table.cancel({"taskId": "id"}, NOW)
    with pytest.raises(InvalidParams, match="Task not found"):
        table.cancel({"taskId": "other"}, NOW)


def test_the_list_pages_oldest_first_and_refuses_cursors_it_did_not_give() -> None:
    table = _table(limit=PAGE_SIZE * 3)
    for n in range(PAGE_SIZE + 5):
        table.create(f"id-{n}", "elicitation/create", 5_000, NOW)
    first = table.page(None, NOW)
    assert [t["taskId"] for t in first["tasks"]] == [f"id-{n}" for n in range(PAGE_SIZE)]
    second = table.page({"cursor": first["nextCursor"]}, NOW)
    assert [t["taskId"] for t in second["tasks"]] == [f"id-{n}" for n in range(PAGE_SIZE, PAGE_SIZE + 5)]
    assert "nextCursor" not in second
    for cursor in ("abc", "-1", 7, "9" * 30):
        with pytest.raises(InvalidParams, match="Invalid cursor"):
            table.page({"cursor": cursor}, NOW)
