"""Hostile clients against a real ``manifold serve`` (issue #14): what one session can make
Manifold keep. Small limits are configured; each case checks that the refusal names its limit,
that the refusal is counted, that another client is still served, and that memory stays near
where it started.

Behind Manifold: ``alpha`` (the SDK fixture server, shared), ``pc`` (the same, ``per_client``:
one process per session), ``r1`` (tests/fixtures/relay_server.py: resources under
``note://r1/{topic}`` it can subscribe to) and ``fx`` (the conformance fixture in its handshake
era, whose tool asks its client a question mid-call: a 2026-07-28 caller's call parks).
"""

from __future__ import annotations

import io
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest

from proxy.protocol import stateless, versions
from tests.fixtures.processes import children
from tests.interaction.harness import (
    REPO,
    RunningManifold,
    another_client_is_served,
    fixture_server,
    names_the_limit,
    post,
    raw_session,
    refusals,
    rss_mib,
    running_manifold,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
RELAY = str(REPO / "tests" / "fixtures" / "relay_server.py")
HANDSHAKE_FIXTURE = {
    "command": sys.executable,
    "args": ["-m", "tests.conformance_modern.fixture_server", "--era", "legacy", "--transport", "stdio"],
    "cwd": str(REPO),
}
ELICIT = "fx.test_input_required_result_elicitation"
PER_CLIENT_MARKER = "--name pchs"
POLICY = """version: 1
default: allow
rules:
  - id: no-secrets
    effect: deny
    match: {resources: ["note://r1/secret*"]}
"""
MIB = 1024 * 1024


def config(directory: Path) -> dict[str, Any]:
    (directory / "policy.yaml").write_text(POLICY)
    return {
        "policy": {"files": [str(directory / "policy.yaml")]},
        "servers": {
            "alpha": fixture_server("alpha", tools=2),
            "pc": {**fixture_server("pchs", tools=2), "session_mode": "per_client"},
            "r1": {"command": sys.executable, "args": [RELAY, "--name", "r1"], "era": "handshake"},
            "fx": HANDSHAKE_FIXTURE,
        },
        "limits": {
            "max_subscriptions_per_session": 3,
            "replay_buffer_bytes": 64 * 1024,
            "max_parked_calls": 1,
            "max_per_client_connections": 2,
            "per_client_idle_timeout": 4,
        },
    }


class Served:
    def __init__(self, manifold: RunningManifold) -> None:
        self.manifold = manifold
        self.baseline = 0.0

    @property
    def url(self) -> str:
        return self.manifold.url

    async def refusals(self, limit: str) -> float:
        return await refusals(self.manifold, limit)

    async def still_fine(self) -> None:
        """Every case ends here: another client is served, and memory is near where it began."""
        await another_client_is_served(self.manifold, "alpha.echo", {"message": "still here"})
        assert rss_mib(self.manifold.process) < self.baseline + 50, (
            rss_mib(self.manifold.process),
            self.baseline,
        )


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    directory = tmp_path_factory.mktemp("hostile-sessions")
    async with running_manifold(directory, config(directory)) as manifold:
        result = Served(manifold)
        await another_client_is_served(manifold, "alpha.echo", {"message": "warm"})
        result.baseline = rss_mib(manifold.process)
        yield result


async def post_big(http: aiohttp.ClientSession, url: str, message: Any, headers: dict[str, str]) -> Any:
    """POST a large JSON-RPC message (streamed from memory, as aiohttp wants large bodies)."""
    every = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers}
    async with http.post(url, data=io.BytesIO(orjson.dumps(message)), headers=every) as response:
        assert response.status == 200
        return orjson.loads(await response.read())


def call(request_id: int, name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def sse_events(raw: bytes) -> list[tuple[str | None, Any]]:
    """(id, decoded data) of each SSE event with data."""
    events: list[tuple[str | None, Any]] = []
    for block in raw.decode().split("\n\n"):
        event_id, data = None, []
        for line in block.splitlines():
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data and "".join(data):
            events.append((event_id, orjson.loads("".join(data))))
    return events


# ---- resources/subscribe ------------------------------------------------------------------------


async def test_a_session_past_its_resource_subscriptions_is_refused(served: Served) -> None:
    before = await served.refusals("max_subscriptions_per_session")
    async with aiohttp.ClientSession() as http:
        session = {"Mcp-Session-Id": await raw_session(http, served.url)}
        for n, topic in enumerate(("a", "b", "c", "d")):
            subscribe = {"jsonrpc": "2.0", "id": n, "method": "resources/subscribe"}
            status, _, body = await post(
                http, served.url, {**subscribe, "params": {"uri": f"note://r1/{topic}"}}, session
            )
            assert status == 200
            if topic != "d":
                assert body["result"] == {}, body
    assert body["error"]["code"] == -32600
    assert names_the_limit(body, "limits.max_subscriptions_per_session")
    assert await served.refusals("max_subscriptions_per_session") == before + 1
    await served.still_fine()


# ---- the policy's decision cache ---------------------------------------------------------------


async def test_many_huge_resource_uris_do_not_grow_the_decision_cache(served: Served) -> None:
    """40 URIs of 1 MiB, each decided by the policy (denied: no server is asked): cached, they
    would hold 40 MiB."""
    start = rss_mib(served.manifold.process)
    async with aiohttp.ClientSession() as http:
        session = {"Mcp-Session-Id": await raw_session(http, served.url)}
        with anyio.fail_after(60):
            for n in range(40):
                uri = f"note://r1/secret-{n}-" + "x" * MIB
                read = {"jsonrpc": "2.0", "id": n, "method": "resources/read", "params": {"uri": uri}}
                body = await post_big(http, served.url, read, session)
                assert "error" in body
    grown = rss_mib(served.manifold.process) - start
    assert grown < 20, f"RSS grew {grown:.1f} MiB"
    await served.still_fine()


# ---- replay buffers -----------------------------------------------------------------------------


async def test_big_responses_are_not_kept_for_replay_past_the_byte_budget(served: Served) -> None:
    """Each request's SSE stream used to keep its last 128 events whatever their size, and a
    session keeps its 8 last finished streams: 3 sessions x 9 answers of 1 MiB were ~24 MiB."""
    start = rss_mib(served.manifold.process)
    big = "y" * MIB
    async with aiohttp.ClientSession() as http:
        for _ in range(3):
            session = {"Mcp-Session-Id": await raw_session(http, served.url)}
            for n in range(9):
                body = io.BytesIO(
                    orjson.dumps(call(n, "alpha.echo", {"message": big}, progressToken=f"p{n}"))
                )
                headers = {
                    **session,
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                }
                with anyio.fail_after(30):
                    async with http.post(served.url, data=body, headers=headers) as response:
                        assert response.content_type == "text/event-stream"
                        events = sse_events(await response.read())
                ((answer_id, answer),) = [(i, e) for i, e in events if "result" in e]
                assert big in orjson.dumps(answer).decode()
            # The last answer was written, but it is larger than the budget: nothing to replay.
            assert answer_id is not None
            stream = answer_id.rsplit(".", 1)[0]
            resume = {**session, "Accept": "text/event-stream", "Last-Event-ID": f"{stream}.0"}
            with anyio.fail_after(10):
                async with http.get(served.url, headers=resume) as replay:
                    assert replay.status == 200
                    assert sse_events(await replay.read()) == []
    grown = rss_mib(served.manifold.process) - start
    assert grown < 20, f"RSS grew {grown:.1f} MiB"  # 10.9 measured; the replay check above guards the bug
    await served.still_fine()


# ---- parked calls -------------------------------------------------------------------------------


def parking_call(request_id: int, responses: dict[str, Any] | None = None, state: str | None = None) -> Any:
    params: dict[str, Any] = {
        "name": ELICIT,
        "arguments": {},
        "_meta": {
            stateless.PROTOCOL_VERSION_KEY: V,
            stateless.CLIENT_CAPABILITIES_KEY: {"elicitation": {}},
            stateless.CLIENT_INFO_KEY: {"name": "raw", "version": "0"},
        },
    }
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_a_call_that_would_park_past_the_limit_is_refused(served: Served) -> None:
    before = await served.refusals("max_parked_calls")
    headers = {"MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": ELICIT}
    async with aiohttp.ClientSession() as http:
        with anyio.fail_after(30):
            status, _, first = await post(http, served.url, parking_call(1), headers)
            assert status == 200
            ((question, _),) = first["result"]["inputRequests"].items()
            status, _, refused = await post(http, served.url, parking_call(2), headers)
            assert refused["error"]["code"] == -32600, refused
            assert names_the_limit(refused, "limits.max_parked_calls")
            answer = {question: {"action": "accept", "content": {"name": "Ada"}}}
            retry = parking_call(3, answer, first["result"]["requestState"])
            status, _, done = await post(http, served.url, retry, headers)
            assert done["result"]["content"][0]["text"] == "Hello, Ada!"
    assert await served.refusals("max_parked_calls") == before + 1
    await served.still_fine()


# ---- per_client connections ---------------------------------------------------------------------


def per_client_processes(served: Served) -> int:
    """Processes of ``pc`` beside the one of its shared connection (2026-07-28 callers use it)."""
    return len(children(served.manifold.process.pid, PER_CLIENT_MARKER)) - 1


async def until(predicate: Any, timeout: float) -> None:
    """Wait (bounded) for processes to start or end: no event to wait on from outside."""
    with anyio.fail_after(timeout):
        while True:
            if predicate():
                return
            await anyio.sleep(0.1)


async def test_per_client_connections_are_bounded_and_stopped_when_unused(served: Served) -> None:
    before = await served.refusals("max_per_client_connections")
    echo = call(2, "pc.echo", {"message": "mine"})
    async with aiohttp.ClientSession() as http:
        sessions = [{"Mcp-Session-Id": await raw_session(http, served.url)} for _ in range(3)]
        answers: list[Any] = []

        async def echo_in(session: dict[str, str]) -> None:
            answers.append((await post(http, served.url, echo, session))[2])

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:  # at once: neither goes idle meanwhile
                for session in sessions[:2]:
                    tg.start_soon(echo_in, session)
            assert [body["result"]["isError"] for body in answers] == [False, False], answers
            assert per_client_processes(served) == 2
            _, _, refused = await post(http, served.url, echo, sessions[2])
        assert names_the_limit(refused, "limits.max_per_client_connections"), refused
        assert await served.refusals("max_per_client_connections") == before + 1
        # Unused for per_client_idle_timeout (4 s): stopped, though their sessions live on.
        await until(lambda: per_client_processes(served) == 0, timeout=15)
        with anyio.fail_after(30):
            _, _, body = await post(http, served.url, echo, sessions[0])
        assert not body["result"].get("isError"), body
        assert per_client_processes(served) == 1
    await served.still_fine()


# ---- listen streams (own limits: one stream per session, two sessions per identity) -------------


@pytest.fixture(scope="module")
async def listening(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    config = {
        "servers": {"alpha": fixture_server("alpha", tools=2)},
        "limits": {"max_listen_streams_per_session": 1, "max_sessions_per_identity": 2},
    }
    async with running_manifold(tmp_path_factory.mktemp("hostile-listen"), config) as manifold:
        result = Served(manifold)
        await another_client_is_served(manifold, "alpha.echo", {"message": "warm"})
        result.baseline = rss_mib(manifold.process)
        yield result


async def test_a_get_stream_past_the_sessions_limit_is_409_naming_it(listening: Served) -> None:
    before = await listening.refusals("max_listen_streams_per_session")
    async with aiohttp.ClientSession() as http:
        session = {"Mcp-Session-Id": await raw_session(http, listening.url)}
        # A request answered on its own SSE stream (it asked for progress): stream 1.
        body = orjson.dumps(call(2, "alpha.echo", {"message": "m"}, progressToken="p"))
        headers = {
            **session,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        async with http.post(listening.url, data=body, headers=headers) as response:
            events = sse_events(await response.read())
        stream = next(i for i, e in events if "result" in e and i).rsplit(".", 1)[0]
        get = {**session, "Accept": "text/event-stream"}
        with anyio.fail_after(20):
            async with http.get(listening.url, headers=get) as standalone:
                assert standalone.status == 200
                async with http.get(
                    listening.url, headers={**get, "Last-Event-ID": f"{stream}.0"}
                ) as refused:
                    assert refused.status == 409
                    answer = await refused.json()
                assert names_the_limit(answer, "limits.max_listen_streams_per_session")
    assert await listening.refusals("max_listen_streams_per_session") == before + 1
    await listening.still_fine()


async def test_stateless_listens_past_the_identitys_limit_are_refused(listening: Served) -> None:
    before = await listening.refusals("max_listen_streams_per_session")
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": V,
        "Mcp-Method": "subscriptions/listen",
    }
    meta = {stateless.PROTOCOL_VERSION_KEY: V, stateless.CLIENT_CAPABILITIES_KEY: {}}

    def listen(request_id: int) -> bytes:
        params = {"notifications": {"toolsListChanged": True}, "_meta": meta}
        return orjson.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": params}
        )

    async with aiohttp.ClientSession() as http:
        with anyio.fail_after(20):
            async with (
                http.post(listening.url, data=listen(1), headers=headers) as first,
                http.post(listening.url, data=listen(2), headers=headers) as second,
            ):
                assert first.status == second.status == 200
                await first.content.readline()  # the acknowledgement is on its way: the stream is open
                await second.content.readline()
                status, _, refused = await post(http, listening.url, listen(3), headers)
    assert status == 400
    assert refused["id"] == 3
    assert names_the_limit(refused, "limits.max_listen_streams_per_session")
    assert await listening.refusals("max_listen_streams_per_session") == before + 1
    await listening.still_fine()
