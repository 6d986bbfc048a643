"""The replay buffer of an SSE stream: bounded by bytes (limits.replay_buffer_bytes), oldest first."""

from __future__ import annotations

import anyio
import pytest

from proxy.clients.streams import EVENT_OVERHEAD, EventStream, parse_event_id
from proxy.protocol import jsonrpc

pytestmark = pytest.mark.anyio


def note(size: int) -> dict[str, object]:
    """A notification whose encoding is exactly ``size`` bytes."""
    empty = len(jsonrpc.encode(jsonrpc.notification("n", {"x": ""})))
    message = jsonrpc.notification("n", {"x": "a" * (size - empty)})
    assert len(jsonrpc.encode(message)) == size
    return message


async def collect(stream: EventStream, after: int) -> list[str]:
    """The ids a follower starting after ``after`` writes of what is kept (the stream closed)."""
    written: list[str] = []

    async def write(event_id: str, data: bytes) -> None:
        written.append(event_id)

    stream.close()
    with anyio.fail_after(2):
        await stream.follow(after, write)
    return written


def test_the_oldest_events_are_dropped_once_the_kept_bytes_pass_the_budget() -> None:
    cost = 1000 + EVENT_OVERHEAD
    stream = EventStream("1", budget=3 * cost)
    for _ in range(5):
        stream.push(note(1000))
    assert stream.kept() == [3, 4, 5]
    assert stream.kept_bytes == 3 * cost


def test_many_small_events_are_kept_past_the_old_count_of_128() -> None:
    stream = EventStream("1", budget=1024 * 1024)
    for _ in range(1000):
        stream.push(note(100))
    assert len(stream.kept()) == 1000


def test_big_events_do_not_multiply_the_memory_kept() -> None:
    stream = EventStream("1", budget=1024 * 1024)
    for _ in range(20):
        stream.push(note(512 * 1024))
    assert stream.kept_bytes <= 1024 * 1024
    assert stream.kept() == [20]


async def test_an_event_larger_than_the_budget_is_written_to_a_live_follower_but_not_kept() -> None:
    stream = EventStream("1", budget=2000)
    written: list[tuple[str, int]] = []
    got = anyio.Event()

    async def write(event_id: str, data: bytes) -> None:
        written.append((event_id, len(data)))
        got.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.follow, 0, write)
        await anyio.wait_all_tasks_blocked()
        stream.push(note(10_000))
        with anyio.fail_after(2):
            await got.wait()
        stream.close()
    assert written == [("1.1", 10_000)]
    assert stream.kept() == []
    assert stream.kept_bytes == 0


def test_an_event_larger_than_the_budget_is_let_go_when_the_next_one_arrives() -> None:
    stream = EventStream("1", budget=2000)
    stream.push(note(10_000))
    assert stream.kept() == [1]  # nobody has written it yet
    stream.push(note(500))
    assert stream.kept() == [2]
    assert stream.kept_bytes == 500 + EVENT_OVERHEAD


async def test_a_client_resuming_after_dropped_events_gets_what_is_kept() -> None:
    stream = EventStream("7", budget=2 * (1000 + EVENT_OVERHEAD))
    for _ in range(5):
        stream.push(note(1000))
    assert await collect(stream, after=1) == ["7.4", "7.5"]


async def test_a_client_resuming_within_what_is_kept_gets_exactly_what_it_missed() -> None:
    stream = EventStream("7", budget=10 * (1000 + EVENT_OVERHEAD))
    for _ in range(5):
        stream.push(note(1000))
    assert await collect(stream, after=3) == ["7.4", "7.5"]
    assert parse_event_id("7.4") == ("7", 4)


def test_a_budget_of_zero_keeps_only_the_event_not_yet_written() -> None:
    stream = EventStream("1", budget=0)
    for _ in range(3):
        stream.push(note(100))
    assert stream.kept() == [3]


async def test_resuming_a_closed_stream_whose_events_were_all_let_go_ends_at_once() -> None:
    stream = EventStream("1", budget=2000)
    stream.push(note(10_000))
    assert await collect(stream, after=0) == ["1.1"]  # written once, then let go
    assert stream.kept() == []
    assert await collect(stream, after=0) == []  # a resumption: nothing kept, the stream is over
