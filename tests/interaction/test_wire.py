"""What Manifold puts on the wire, checked against the protocol's own JSON Schemas, and the
Streamable HTTP details: resuming a dropped SSE stream with Last-Event-ID, and batches."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from functools import cache
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import jsonschema
import orjson
import pytest
from jsonschema.validators import validator_for

from proxy.protocol.sse import SSEDecoder
from tests.interaction.harness import REPO, RunningManifold, fixture_server, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SCHEMAS = REPO / "tests" / "fixtures" / "schemas"
RELAY = str(REPO / "tests" / "fixtures" / "relay_server.py")
RESULTS = {
    "initialize": "InitializeResult",
    "ping": "EmptyResult",
    "logging/setLevel": "EmptyResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "resources/read": "ReadResourceResult",
    "completion/complete": "CompleteResult",
}


@cache
def _validator(revision: str, definition: str) -> Callable[[Any], None]:
    schema = orjson.loads((SCHEMAS / f"{revision}.json").read_bytes())
    defs_key = "$defs" if "$defs" in schema else "definitions"
    root = {"$schema": schema["$schema"], defs_key: schema[defs_key], "$ref": f"#/{defs_key}/{definition}"}
    validator = validator_for(root)(root)
    return validator.validate


class Wire:
    """A raw Streamable HTTP client that records every message Manifold sends it."""

    def __init__(self, http: aiohttp.ClientSession, url: str, revision: str) -> None:
        self.http, self.url, self.revision = http, url, revision
        self.session: str | None = None
        self.received: list[tuple[str | None, Any]] = []  # (the method it answers, the message)
        self._ids = iter(range(1, 10_000))

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        return headers | extra

    async def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            body["params"] = params
        async with self.http.post(self.url, data=orjson.dumps(body), headers=self.headers()) as response:
            assert response.status == 200, await response.text()
            self.session = response.headers.get("mcp-session-id", self.session)
            messages = await _messages(response)
        for message in messages:
            self.received.append((method if "id" in message and "method" not in message else None, message))
        return messages[-1]

    async def notify(self, method: str) -> None:
        body = {"jsonrpc": "2.0", "method": method}
        async with self.http.post(self.url, data=orjson.dumps(body), headers=self.headers()) as response:
            assert response.status == 202

    def check(self) -> int:
        """Validate everything recorded; returns how many messages were checked."""
        for answered, message in self.received:
            _validator(self.revision, "JSONRPCMessage")(message)
            if answered is not None and "result" in message:
                _validator(self.revision, RESULTS[answered])(message["result"])
            elif "method" in message and "id" not in message:
                _validator(self.revision, "ServerNotification")(message)
            elif "method" in message:
                _validator(self.revision, "ServerRequest")(message)
        return len(self.received)


async def _messages(response: aiohttp.ClientResponse) -> list[Any]:
    if response.content_type == "application/json":
        decoded = orjson.loads(await response.read())
        return decoded if isinstance(decoded, list) else [decoded]
    decoder = SSEDecoder()
    messages: list[Any] = []
    async for chunk in response.content.iter_any():
        messages += [orjson.loads(event.data) for event in decoder.feed(chunk) if event.data]
    return messages


async def opened(wire: Wire, capabilities: dict[str, Any] | None = None) -> None:
    await wire.request(
        "initialize",
        {
            "protocolVersion": wire.revision,
            "capabilities": capabilities or {},
            "clientInfo": {"name": "w", "version": "0"},
        },
    )
    await wire.notify("notifications/initialized")


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    config = {
        "catalog": {"page_size": 4},
        "servers": {
            "alpha": fixture_server("alpha", tools=5, page_size=3),
            "r1": {"command": sys.executable, "args": [RELAY, "--name", "r1"], "era": "handshake"},
        },
    }
    async with running_manifold(tmp_path_factory.mktemp("wire"), config) as running:
        yield running


@pytest.mark.parametrize("revision", ["2025-11-25", "2025-06-18", "2025-03-26"])
async def test_every_message_manifold_sends_validates_against_the_negotiated_revision(
    manifold: RunningManifold, revision: str
) -> None:
    async with aiohttp.ClientSession() as http:
        wire = Wire(http, manifold.url, revision)
        await opened(wire, {"sampling": {}})
        page = await wire.request("tools/list")
        await wire.request("tools/list", {"cursor": page["result"]["nextCursor"]})
        await wire.request("tools/call", {"name": "alpha.echo", "arguments": {"x": 1}})
        await wire.request(
            "tools/call", {"name": "r1.progress", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}}
        )
        await wire.request("prompts/list")
        await wire.request("prompts/get", {"name": "r1.greet", "arguments": {"name": "Ada"}})
        await wire.request("resources/list")
        await wire.request("resources/templates/list")
        await wire.request("resources/read", {"uri": "note://r1/static"})
        ref = {"type": "ref/prompt", "name": "r1.greet"}
        await wire.request("completion/complete", {"ref": ref, "argument": {"name": "name", "value": "A"}})
        await wire.request("logging/setLevel", {"level": "error"})
        await wire.request("ping")
        await wire.request("tools/call", {"name": "alpha.nope"})  # an error response
        await wire.request("tools/list", {"cursor": "forged"})  # another
        checked = wire.check()
    kinds = {
        ("notification" if "method" in m else "error" if "error" in m else "result") for _, m in wire.received
    }
    assert kinds == {"result", "error", "notification"}  # progress came on the call's own stream
    assert checked >= 17


async def test_the_get_stream_carries_list_changed_valid_for_the_revision(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        wire = Wire(http, manifold.url, "2025-11-25")
        await opened(wire)
        headers = wire.headers(Accept="text/event-stream")
        async with http.get(manifold.url, headers=headers) as stream:
            assert stream.status == 200
            await wire.request("tools/call", {"name": "alpha.add_tool", "arguments": {"name": "fresh"}})
            decoder = SSEDecoder()
            with anyio.fail_after(15):
                while not any(
                    m.get("method") == "notifications/tools/list_changed" for _, m in wire.received
                ):
                    chunk = await stream.content.readany()
                    for event in decoder.feed(chunk):
                        if event.data:
                            wire.received.append((None, orjson.loads(event.data)))
        wire.check()


async def test_a_dropped_sse_answer_is_resumed_with_last_event_id(
    manifold: RunningManifold, tmp_path: Path
) -> None:
    async with aiohttp.ClientSession() as http:
        wire = Wire(http, manifold.url, "2025-11-25")
        await opened(wire, {"sampling": {}})  # a client that can be asked things gets SSE answers
        marker = str(tmp_path / "unused")
        call = {"jsonrpc": "2.0", "id": 77, "method": "tools/call"}
        call["params"] = {"name": "r1.wait", "arguments": {"seconds": 1.5, "marker": marker}}
        decoder = SSEDecoder()
        async with http.post(manifold.url, data=orjson.dumps(call), headers=wire.headers()) as response:
            assert response.content_type == "text/event-stream"
            with anyio.fail_after(10):
                while decoder.last_event_id is None:  # the priming event: an id, no data
                    decoder.feed(await response.content.readany())
        # The connection is gone before the answer; the call goes on (a drop is not a cancel).
        last = decoder.last_event_id
        resumed = SSEDecoder()
        answers: list[Any] = []
        headers = wire.headers(Accept="text/event-stream", **{"Last-Event-ID": last})
        with anyio.fail_after(15):
            async with http.get(manifold.url, headers=headers) as replay:
                assert replay.status == 200
                while not answers:
                    answers += [
                        orjson.loads(e.data) for e in resumed.feed(await replay.content.readany()) if e.data
                    ]
    assert answers[0]["id"] == 77
    assert answers[0]["result"]["content"][0]["text"] == "waited"
    _validator("2025-11-25", "JSONRPCMessage")(answers[0])


async def test_a_2025_03_26_client_may_batch_and_gets_one_array_back(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        wire = Wire(http, manifold.url, "2025-03-26")
        await opened(wire)
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "no/such"},
        ]
        async with http.post(manifold.url, data=orjson.dumps(batch), headers=wire.headers()) as response:
            assert response.status == 200
            answers = orjson.loads(await response.read())
    _validator("2025-03-26", "JSONRPCBatchResponse")(answers)
    assert sorted(a["id"] for a in answers) == [1, 2, 3]
    assert next(a for a in answers if a["id"] == 3)["error"]["code"] == -32601


async def test_a_batch_is_refused_for_revisions_without_batches(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        wire = Wire(http, manifold.url, "2025-11-25")
        await opened(wire)
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}]
        async with http.post(manifold.url, data=orjson.dumps(batch), headers=wire.headers()) as response:
            assert response.status == 400
            body = orjson.loads(await response.read())
    assert body["error"]["code"] == -32600
    assert "2025-11-25" in body["error"]["message"]


def test_the_schemas_reject_what_they_should() -> None:
    # The check above is only worth something if a malformed message fails it.
    with pytest.raises(jsonschema.ValidationError):
        _validator("2025-11-25", "ListToolsResult")({"tools": [{"name": 3}]})


async def test_an_idle_session_is_forgotten_and_its_id_is_taken_over_again(tmp_path: Path) -> None:
    """Idleness frees what a session holds but revokes nothing: its signed id, presented again
    before it expires, is taken over as on any replica (a client whose requests come back to a
    replica that idled it out is not told 404). DELETE is what ends an id (test_session_end.py)."""
    config = {
        "sessions": {"idle_timeout": 1},
        "servers": {"alpha": fixture_server("alpha", tools=1, page_size=5)},
    }
    async with running_manifold(tmp_path, config) as manifold, aiohttp.ClientSession() as http:
        wire = Wire(http, manifold.url, "2025-11-25")
        await opened(wire)
        with anyio.fail_after(10):
            # Watching the log leaves the session alone: any request would keep it alive.
            while "expired after 1s idle" not in manifold.log():  # noqa: ASYNC110 - another process
                await anyio.sleep(0.2)
        ping = orjson.dumps({"jsonrpc": "2.0", "id": 5, "method": "ping"})
        async with http.post(manifold.url, data=ping, headers=wire.headers()) as response:
            status = response.status
    assert status == 200
    assert "expired after 1s idle" in manifold.log()
    assert "taken over from its signed id" in manifold.log()


async def test_delete_ends_the_session_and_stops_its_per_client_servers(tmp_path: Path) -> None:
    config = {
        "servers": {
            "solo": {
                "command": sys.executable,
                "args": [RELAY, "--name", "solo"],
                "era": "handshake",
                "session_mode": "per_client",
            }
        }
    }
    async with running_manifold(tmp_path, config) as manifold, aiohttp.ClientSession() as http:
        wire = Wire(http, manifold.url, "2025-11-25")
        await opened(wire)
        answer = await wire.request("prompts/get", {"name": "solo.greet", "arguments": {"name": "x"}})
        assert "result" in answer
        started = manifold.log().count("server solo: started pid")
        assert started == 2  # the shared one (for the lists) and this session's own
        async with http.delete(manifold.url, headers=wire.headers()) as response:
            assert response.status == 200
        with anyio.fail_after(10):
            while manifold.log().count("server solo: process") < 1:  # noqa: ASYNC110 - "process N stopped"
                await anyio.sleep(0.1)
        async with http.post(
            manifold.url,
            data=orjson.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
            headers=wire.headers(),
        ) as gone:
            assert gone.status == 404
