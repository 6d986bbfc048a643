"""Manifold's task ids: issued for one owner and endpoint, refused for anyone else, one answer to
every bad id."""

from __future__ import annotations

import base64

import pytest

from proxy.core.errors import InvalidParams
from proxy.policy import Identity
from proxy.tasks.ids import MAX_ID_CHARS, TaskIds, scope_of

KEY = b"k" * 32
ALICE = Identity("alice", frozenset({"staff"}), source="api_key")
BOB = Identity("bob", frozenset({"staff"}), source="api_key")
ALICE_ADMIN = Identity("alice", frozenset({"staff", "admin"}), source="api_key")


def _refused(ids: TaskIds, task_id: object, scope: str) -> InvalidParams:
    with pytest.raises(InvalidParams) as refused:
        ids.open(task_id, scope)
    return refused.value


def test_an_id_opens_to_its_store_key_for_its_owner_and_endpoint() -> None:
    ids = TaskIds(KEY)
    task_id, key = ids.issue(scope_of(ALICE, ""))
    assert len(task_id) == MAX_ID_CHARS
    assert ids.open(task_id, scope_of(ALICE, "")) == key


def test_ids_are_fresh_and_deterministic_for_a_given_key() -> None:
    ids = TaskIds(KEY)
    first, second = ids.issue(scope_of(ALICE, "")), ids.issue(scope_of(ALICE, ""))
    assert first != second
    assert ids.issue(scope_of(ALICE, ""), bytes.fromhex(first[1])) == first


@pytest.mark.parametrize(
    "scope",
    [scope_of(BOB, ""), scope_of(ALICE, "research"), scope_of(ALICE_ADMIN, "")],
    ids=["another identity", "another endpoint", "the same name with other roles"],
)
def test_an_id_is_refused_for_any_other_owner_or_endpoint(scope: str) -> None:
    ids = TaskIds(KEY)
    task_id, _ = ids.issue(scope_of(ALICE, ""))
    refused = _refused(ids, task_id, scope)
    assert refused.message == "Failed to retrieve task: Task not found"
    assert refused.data == {"reason": "unknown_task"}


def test_another_replicas_key_refuses_it_and_a_shared_one_opens_it() -> None:
    task_id, key = TaskIds(KEY).issue(scope_of(ALICE, ""))
    _refused(TaskIds(b"x" * 32), task_id, scope_of(ALICE, ""))
    assert TaskIds(KEY).open(task_id, scope_of(ALICE, "")) == key


def _flipped(task_id: str, at: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(task_id + "="))
    raw[at] ^= 1
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


@pytest.mark.parametrize("at", [0, 1, 16, 17, 30, 40])
def test_any_altered_byte_is_refused(at: int) -> None:
    ids = TaskIds(KEY)
    task_id, _ = ids.issue(scope_of(ALICE, ""))
    _refused(ids, _flipped(task_id, at), scope_of(ALICE, ""))


@pytest.mark.parametrize(
    "task_id",
    [None, 5, 5.0, True, [], {}, "", "a", "9a6c8714f6964ea783dcac315461b495", "x" * MAX_ID_CHARS, "é" * 55],
)
def test_malformed_ids_get_the_same_answer(task_id: object) -> None:
    refused = _refused(TaskIds(KEY), task_id, scope_of(ALICE, ""))
    assert refused.data == {"reason": "unknown_task"}


def test_a_non_canonical_spelling_is_refused() -> None:
    ids = TaskIds(KEY)
    task_id, _ = ids.issue(scope_of(ALICE, ""))
    # The last character carries two spare bits: another character that decodes the same.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(task_id[-1])
    twin = task_id[:-1] + alphabet[last ^ 1]
    assert base64.urlsafe_b64decode(twin + "=") == base64.urlsafe_b64decode(task_id + "=")
    _refused(ids, twin, scope_of(ALICE, ""))


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        TaskIds(b"short")
