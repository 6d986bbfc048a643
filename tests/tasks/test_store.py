"""Task records: kept per owner, bounded per identity and in all, gone at their ttl; the same
behaviour from the memory store and (with a real redis-server) the Redis one."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from proxy.core.errors import LimitExceeded
from proxy.tasks.store import MemoryTasks, TaskRecord, TaskStore, TaskStoreError

pytestmark = pytest.mark.anyio

Make = Callable[..., TaskStore]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _record(
    n: int, *, owner: str = "alice", endpoint: str = "", ttl: float = 60.0, now: float = 1_000_000.0
) -> TaskRecord:
    return TaskRecord(
        key=f"{n:032x}",
        owner=owner,
        endpoint=endpoint,
        server_id="everything",
        server_task=f"server-task-{n}",
        session_id="s1",
        created=now + n / 1000,
        expires=now + ttl,
        task={"status": "working"},
    )


@pytest.fixture(params=["memory", "redis"])
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Make]:
    if request.param == "memory":
        yield lambda **options: MemoryTasks(**options)
        return
    request.applymarker(pytest.mark.slow)
    from tests.ratelimit.redis_server import REDIS_SERVER, running_redis

    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed")
    if request.config.getoption("--fast"):
        pytest.skip("the fast tier starts no processes")
    from proxy.tasks.redis_store import RedisTasks

    async with running_redis(tmp_path) as redis:
        stores: list[TaskStore] = []

        def redis_tasks(**options: object) -> TaskStore:
            store = RedisTasks(redis.url, prefix=f"t{len(stores)}:", **options)  # type: ignore[arg-type]
            stores.append(store)
            return store

        yield redis_tasks
        for store in stores:
            await store.aclose()


async def test_a_record_is_kept_found_by_its_servers_id_and_updated(make: Make) -> None:
    clock = Clock()
    store = make(per_identity=5, total=10, clock=clock)
    record = _record(1)
    await store.add(record)
    assert await store.get(record.key) == record
    assert await store.find("everything", "server-task-1") == record
    assert await store.find("everything", "server-task-2") is None
    done = record.updated({"status": "completed"})
    await store.put(done)
    assert await store.get(record.key) == done


async def test_owned_is_the_owners_records_on_one_endpoint_oldest_first(make: Make) -> None:
    store = make(per_identity=5, total=10, clock=Clock())
    for record in (_record(2), _record(1), _record(3, owner="bob"), _record(4, endpoint="research")):
        await store.add(record)
    assert [r.key for r in await store.owned("alice", "")] == [_record(1).key, _record(2).key]
    assert [r.key for r in await store.owned("alice", "research")] == [_record(4).key]
    assert [r.key for r in await store.owned("bob", "")] == [_record(3).key]


async def test_records_per_identity_are_bounded_and_the_limit_is_named(make: Make) -> None:
    store = make(per_identity=2, total=10, clock=Clock())
    await store.add(_record(1))
    await store.add(_record(2))
    with pytest.raises(LimitExceeded) as refused:
        await store.room("alice")
    assert refused.value.limit == "max_tasks_per_identity"
    with pytest.raises(LimitExceeded):
        await store.add(_record(3))
    await store.add(_record(4, owner="bob"))  # another identity is not held back


async def test_records_in_all_are_bounded(make: Make) -> None:
    store = make(per_identity=5, total=2, clock=Clock())
    await store.add(_record(1))
    await store.add(_record(2, owner="bob"))
    with pytest.raises(LimitExceeded) as refused:
        await store.add(_record(3, owner="carol"))
    assert refused.value.limit == "max_tasks"


async def test_a_record_is_gone_at_its_ttl_with_its_outcome_and_frees_its_place(make: Make) -> None:
    clock = Clock()
    store = make(per_identity=1, total=10, clock=clock)
    record = _record(1, ttl=30)
    await store.add(record)
    await store.put(TaskRecord(**_fields(record), outcome=b'{"result":{}}'))  # type: ignore[arg-type]
    clock.now += 31
    assert await store.get(record.key) is None
    assert await store.owned("alice", "") == []
    await store.add(_record(2, now=clock.now))  # its place is free again
    await store.put(record)  # one gone stays gone
    assert await store.get(record.key) is None


def _fields(record: TaskRecord) -> dict[str, object]:
    return {name: getattr(record, name) for name in TaskRecord.__slots__ if name != "outcome"}


def test_a_record_survives_its_encoding_and_a_malformed_one_is_none() -> None:
    record = TaskRecord(**_fields(_record(1)), outcome=b'{"result":{"content":[]}}')  # type: ignore[arg-type]
    assert TaskRecord.decode(record.encode()) == record
    assert TaskRecord.decode(b"{}") is None
    assert TaskRecord.decode(b"not json") is None
    assert TaskRecord.decode(b'{"key": 1}') is None


@pytest.mark.slow
async def test_a_cancel_told_on_one_replica_is_heard_on_another_and_listening_survives_redis_restarting(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from contextlib import aclosing

    import anyio

    from tests.ratelimit.redis_server import REDIS_SERVER, running_redis

    if REDIS_SERVER is None:
        pytest.fail("redis-server is not installed (make system-deps)")
    if request.config.getoption("--fast"):
        pytest.skip("the fast tier starts no processes")
    from proxy.tasks.redis_store import RedisTasks

    async with running_redis(tmp_path) as redis:
        teller = RedisTasks(redis.url, per_identity=10, total=10)
        hearer = RedisTasks(redis.url, per_identity=10, total=10)
        other_prefix = RedisTasks(redis.url, per_identity=10, total=10, prefix="elsewhere:")
        try:
            async with aclosing(hearer.cancels()) as told:
                with anyio.fail_after(10):
                    assert await anext(told) == ""  # listening: look at the records
                    await other_prefix.cancelled("not-ours")  # another deployment's channel
                    await teller.cancelled("a" * 32)
                    assert await anext(told) == "a" * 32
                await redis.stop()
                await redis.start()
                with anyio.fail_after(30):  # backing off, then listening again: said with ""
                    assert await anext(told) == ""
                    with contextlib.suppress(TaskStoreError):  # its connection was the old Redis's
                        await teller.cancelled("c" * 32)
                    await teller.cancelled("b" * 32)
                    assert await anext(told) in ("b" * 32, "c" * 32)
        finally:
            for store in (teller, hearer, other_prefix):
                await store.aclose()


async def test_the_memory_store_tells_no_cancels() -> None:
    from contextlib import aclosing

    import anyio

    store = MemoryTasks(per_identity=1, total=1)
    await store.cancelled("a" * 32)
    async with aclosing(store.cancels()) as told:
        with anyio.move_on_after(0.05) as waited:
            await anext(told)
    assert waited.cancelled_caught
