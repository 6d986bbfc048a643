"""The OpenAPI link against a real loopback HTTP server: it answers the MCP requests a server
connection sends, makes each call as the document says, places the credential, and keeps each
failure on its own call."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.config.openapi import OpenApiSource
from proxy.outbound.over_openapi.transport import PAGE, OpenApiTransport
from proxy.outbound.transport import Link
from tests.openapi.documents import PETS
from tests.outbound.over_http.test_h1 import Peer, raw_server, response

pytestmark = pytest.mark.anyio


def pets(base: str, **extra: Any) -> dict[str, Any]:
    return {**PETS, "servers": [{"url": base}], **extra}


@asynccontextmanager
async def linked(tmp_path: Path, document: dict[str, Any], **options: Any) -> AsyncIterator[Link]:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(document))
    headers = options.pop("headers", None)
    transport = OpenApiTransport("api", OpenApiSource(document=str(path), **options), None, headers)
    async with transport.connect() as link:
        yield link


async def ask(
    link: Link, request_id: int, method: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    await link.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
    with anyio.fail_after(10):
        message, _ = await link.receive()
    assert isinstance(message, dict)
    return message


async def answering(peer: Peer) -> None:
    while True:
        request = await peer.request()
        body = json.dumps({"line": request.line, "headers": request.headers, "body": request.body.decode()})
        await peer.send(response(body.encode()))


async def test_initialize_and_tools_are_answered_from_the_document(tmp_path: Path) -> None:
    async with linked(tmp_path, pets("http://127.0.0.1:9")) as link:
        hello = await ask(link, 1, "initialize", {"protocolVersion": "2025-11-25"})
        assert hello["result"]["protocolVersion"] == "2025-11-25"
        assert hello["result"]["capabilities"] == {"tools": {"listChanged": True}}
        listed = await ask(link, 2, "tools/list")
        assert [t["name"] for t in listed["result"]["tools"]][:2] == ["listPets", "createPet"]
        assert "nextCursor" not in listed["result"]
        assert (await ask(link, 3, "server/discover"))["error"]["code"] == -32601
        assert (await ask(link, 4, "tools/list", {"cursor": "nonsense"}))["error"]["code"] == -32602
        assert (await ask(link, 5, "tools/call", {"name": "nope"}))["error"]["code"] == -32602


async def test_a_large_api_lists_in_pages(tmp_path: Path) -> None:
    paths = {f"/r{i}": {"get": {"operationId": f"op{i}"}} for i in range(PAGE * 2 + 5)}
    async with linked(tmp_path, {**pets("http://127.0.0.1:9"), "paths": paths}) as link:
        names: list[str] = []
        cursor = None
        for request_id in range(1, 10):
            page = (await ask(link, request_id, "tools/list", {"cursor": cursor} if cursor else {}))["result"]
            names += [t["name"] for t in page["tools"]]
            if (cursor := page.get("nextCursor")) is None:
                break
        assert names == [f"op{i}" for i in range(PAGE * 2 + 5)]


async def test_a_call_is_the_request_the_document_describes(tmp_path: Path) -> None:
    async with (
        raw_server(answering) as server,
        linked(tmp_path, pets(f"http://127.0.0.1:{server.port}/v1")) as link,
    ):
        found = await ask(
            link, 1, "tools/call", {"name": "createPet", "arguments": {"body": {"name": "rex"}}}
        )
        echoed = found["result"]["structuredContent"]
        assert echoed["line"] == "POST /v1/pets HTTP/1.1"
        assert echoed["headers"]["content-type"] == "application/json"
        assert json.loads(echoed["body"]) == {"name": "rex"}
        listed = await ask(
            link, 2, "tools/call", {"name": "listPets", "arguments": {"tag": ["a", "b"], "limit": 2}}
        )
        assert "GET /v1/pets?limit=2&tag=a&tag=b HTTP/1.1" in listed["result"]["content"][0]["text"]


async def test_a_query_key_credential_leaves_the_headers_for_the_query(tmp_path: Path) -> None:
    schemes = {"securitySchemes": {"k": {"type": "apiKey", "in": "query", "name": "api_key"}}}
    document = pets("http://127.0.0.1:9", components={**PETS["components"], **schemes})
    async with raw_server(answering) as server:
        document["servers"] = [{"url": f"http://127.0.0.1:{server.port}"}]
        async with linked(tmp_path, document, headers={"api_key": "s3cret"}) as link:
            found = await ask(link, 1, "tools/call", {"name": "getPet", "arguments": {"petId": 7}})
    text = found["result"]["content"][0]["text"]
    assert "GET /pets/7?api_key=s3cret HTTP/1.1" in text
    assert "s3cret" not in json.dumps(json.loads(text)["headers"])


async def test_a_cancelled_call_is_not_answered_and_the_next_one_is(tmp_path: Path) -> None:
    release, reached = anyio.Event(), anyio.Event()

    async def first_hangs(peer: Peer) -> None:
        request = await peer.request()
        if peer.number == 1:
            reached.set()
            await release.wait()
        await peer.send(response(json.dumps({"line": request.line}).encode()))

    async with (
        raw_server(first_hangs) as server,
        linked(tmp_path, pets(f"http://127.0.0.1:{server.port}")) as link,
    ):
        await link.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "getPet", "arguments": {"petId": 1}},
            }
        )
        with anyio.fail_after(10):
            await reached.wait()
        await link.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
        found = await ask(link, 2, "tools/call", {"name": "getPet", "arguments": {"petId": 2}})
        assert found["id"] == 2
        release.set()


async def test_an_unreachable_api_fails_the_call_with_a_result(tmp_path: Path) -> None:
    async with raw_server(answering) as server:
        port = server.port
    async with linked(tmp_path, pets(f"http://127.0.0.1:{port}")) as link:
        found = await ask(link, 1, "tools/call", {"name": "getPet", "arguments": {"petId": 1}})
    assert found["result"]["isError"] is True
    assert "the API could not be called" in found["result"]["content"][0]["text"]


async def test_a_response_past_the_limit_is_refused(tmp_path: Path) -> None:
    async def big(peer: Peer) -> None:
        await peer.request()
        await peer.send(response(b'{"x": "' + b"y" * 5000 + b'"}'))

    async with (
        raw_server(big) as server,
        linked(tmp_path, pets(f"http://127.0.0.1:{server.port}"), max_response_bytes=1000) as link,
    ):
        found = await ask(link, 1, "tools/call", {"name": "getPet", "arguments": {"petId": 1}})
    assert found["result"]["isError"] is True
    assert "max_response_bytes (1000 bytes)" in found["result"]["content"][0]["text"]


async def test_an_unexpected_failure_fails_only_its_own_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import proxy.outbound.over_openapi.transport as transport

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug")

    async with (
        raw_server(answering) as server,
        linked(tmp_path, pets(f"http://127.0.0.1:{server.port}")) as link,
    ):
        with monkeypatch.context() as patched:
            patched.setattr(transport, "build_request", broken)
            failed = await ask(link, 1, "tools/call", {"name": "getPet", "arguments": {"petId": 1}})
        assert failed["error"]["code"] == -32603
        served = await ask(link, 2, "tools/call", {"name": "getPet", "arguments": {"petId": 1}})
        assert "GET /pets/1 HTTP/1.1" in served["result"]["content"][0]["text"]


@pytest.mark.slow
async def test_a_url_document_is_watched_and_a_bad_refresh_keeps_the_tools(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Refetched with If-None-Match (a 304 changes nothing); a refresh that turns huge, invalid or
    unreachable is logged and the old tools stay; a real change is one list_changed."""
    first = json.dumps(pets("http://127.0.0.1:9")).encode()
    state: dict[str, Any] = {"answer": response(first, headers='ETag: "v1"\r\n')}
    seen: list[str | None] = []
    arrived = anyio.Event()

    async def serve(peer: Peer) -> None:
        nonlocal arrived
        while True:
            request = await peer.request()
            seen.append(request.headers.get("if-none-match"))
            await peer.send(state["answer"])
            arrived.set()
            arrived = anyio.Event()

    async def refreshes(count: int) -> None:
        with anyio.fail_after(10):
            for _ in range(count):
                await arrived.wait()

    async def nothing_said(link: Link) -> None:
        with anyio.move_on_after(0.1):
            message, _ = await link.receive()
            raise AssertionError(f"unexpected {message}")

    async with raw_server(serve) as server:
        url = f"http://127.0.0.1:{server.port}/api.json"
        source = OpenApiSource(document=url, refresh_interval=0.05, max_document_bytes=len(first) + 1000)
        async with OpenApiTransport("api", source, None).connect() as link:
            names = [t["name"] for t in (await ask(link, 1, "tools/list"))["result"]["tools"]]
            state["answer"] = response(b"", status="304 Not Modified")
            await refreshes(2)
            assert seen[-1] == '"v1"'
            await nothing_said(link)
            for bad in (b"x" * (len(first) + 2000), b"{not json", b'{"swagger": "2.0"}'):
                state["answer"] = response(bad)
                await refreshes(2)
                assert [t["name"] for t in (await ask(link, 2, "tools/list"))["result"]["tools"]] == names
                await nothing_said(link)
            paths = {**PETS["paths"], "/owners": {"get": {"operationId": "listOwners"}}}
            second = json.dumps(pets("http://127.0.0.1:9", paths=paths)).encode()
            state["answer"] = response(second, headers='ETag: "v2"\r\n')
            with anyio.fail_after(10):
                said, _ = await link.receive()
            assert said == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
            state["answer"] = response(b"", status="304 Not Modified")
            await refreshes(2)
            assert seen[-1] == '"v2"'
            await nothing_said(link)
            listed = (await ask(link, 3, "tools/list"))["result"]["tools"]
            assert [t["name"] for t in listed] == [*names, "listOwners"]
    logged = caplog.text
    assert "larger than max_document_bytes" in logged
    assert "not JSON or YAML" in logged
    assert "Swagger 2.0 is not served" in logged
