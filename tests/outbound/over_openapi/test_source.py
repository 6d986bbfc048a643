"""Reading a document: from a file or a URL, bounded, with a base URL found or refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.config.openapi import OpenApiSource
from proxy.core.errors import ServerUnavailable
from proxy.openapi.schemas import DocumentProblem
from proxy.outbound.over_openapi.source import base_url_of, load
from tests.openapi.documents import PETS
from tests.outbound.over_http.test_h1 import Peer, raw_server, response

pytestmark = pytest.mark.anyio


async def test_a_file_past_max_document_bytes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(PETS))
    with pytest.raises(ServerUnavailable, match="larger than max_document_bytes"):
        await load("api", OpenApiSource(document=str(path), max_document_bytes=100), "http://x", 5)


async def test_a_missing_file_or_bad_document_makes_the_server_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ServerUnavailable, match="cannot be read"):
        await load("api", OpenApiSource(document=str(tmp_path / "none.json")), "http://x", 5)
    (tmp_path / "s.json").write_text('{"swagger": "2.0"}')
    with pytest.raises(ServerUnavailable, match=r"Swagger 2\.0 is not served"):
        await load("api", OpenApiSource(document=str(tmp_path / "s.json")), "http://x", 5)


async def test_a_document_at_a_url_is_fetched_and_its_relative_server_resolved() -> None:
    async def serve(peer: Peer) -> None:
        request = await peer.request()
        found = request.line.startswith("GET /specs/api.json ")
        await peer.send(
            response(json.dumps({**PETS, "servers": [{"url": "/v2"}]}).encode())
            if found
            else response(b"", status="404 Not Found")
        )

    async with raw_server(serve) as server:
        base = f"http://127.0.0.1:{server.port}"
        loaded = await load("api", OpenApiSource(document=f"{base}/specs/api.json"), None, 5)
        assert loaded.base_url == f"{base}/v2"
        assert len(loaded.tools) == 5
        with pytest.raises(ServerUnavailable, match="answered HTTP 404"):
            await load("api", OpenApiSource(document=f"{base}/other.json"), None, 5)


def test_a_base_url_from_the_servers_variables_or_refused() -> None:
    source = OpenApiSource(document="api.json")
    templated = {
        "servers": [{"url": "https://{host}/v1", "variables": {"host": {"default": "api.example.com"}}}]
    }
    assert base_url_of(templated, None, source) == "https://api.example.com/v1"
    assert base_url_of({}, "http://configured", source) == "http://configured"
    with pytest.raises(DocumentProblem, match="configure the server's 'url'"):
        base_url_of({"servers": [{"url": "/relative"}]}, None, source)
    with pytest.raises(DocumentProblem, match="names no servers"):
        base_url_of({}, None, source)


@pytest.mark.slow
async def test_a_50_mb_document_loads_and_one_past_the_bound_is_refused(tmp_path: Path) -> None:
    filler = "x" * 50_000
    paths = {f"/r{i}": {"get": {"operationId": f"op{i}", "description": filler}} for i in range(1000)}
    path = tmp_path / "big.json"
    path.write_text(json.dumps({**PETS, "paths": paths}))
    assert path.stat().st_size > 50_000_000
    loaded = await load("api", OpenApiSource(document=str(path)), "http://x", 5)
    assert len(loaded.tools) == 1000
    with pytest.raises(ServerUnavailable, match="max_document_bytes"):
        await load("api", OpenApiSource(document=str(path), max_document_bytes=10_000_000), "http://x", 5)


async def test_connections_from_the_same_settings_share_one_plan_until_the_file_changes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(PETS))
    source = OpenApiSource(document=str(path))
    first = await load("api", source, "http://x", 5)
    assert await load("api", source, "http://x", 5) is first
    assert await load("api", source, "http://other", 5) is not first
    path.write_text(json.dumps({**PETS, "paths": {}}) + " " * 10)  # another size: another stamp
    changed = await load("api", source, "http://x", 5)
    assert changed is not first
    assert changed.tools == []


async def test_allowed_remote_refs_are_fetched_and_others_refused_without_a_request() -> None:
    def operation(ref: str) -> dict[str, Any]:
        return {"requestBody": {"content": {"application/json": {"schema": {"$ref": ref}}}}}

    main = {
        **PETS,
        "servers": [{"url": "/v1"}],
        "paths": {
            "/pets": {"post": {"operationId": "make", **operation("shared/pet.json#/Pet")}},
            "/secrets": {"post": {"operationId": "leak", **operation("../private/secret.json#/X")}},
        },
    }
    files = {
        "/api/doc.json": main,
        "/api/shared/pet.json": {
            "Pet": {"type": "object", "properties": {"id": {"$ref": "common.json#/Id"}}}
        },
        "/api/shared/common.json": {"Id": {"type": "integer", "minimum": 1}},
        "/private/secret.json": {"X": {"type": "string"}},
    }
    asked: list[str] = []

    async def serve(peer: Peer) -> None:
        request = await peer.request()
        path = request.line.split(" ")[1]
        asked.append(path)
        found = files.get(path)
        await peer.send(
            response(json.dumps(found).encode()) if found else response(b"", status="404 Not Found")
        )

    async with raw_server(serve) as server:
        base = f"http://127.0.0.1:{server.port}"
        allow = (f"{base}/api/shared",)
        source = OpenApiSource(document=f"{base}/api/doc.json", allow_remote_refs=allow)
        loaded = await load("api", source, None, 5)
        assert [plan.tool["name"] for plan in loaded.tools] == ["make"]
        body = loaded.tools[0].tool["inputSchema"]["properties"]["body"]
        assert body["properties"]["id"] == {"type": "integer", "minimum": 1}
        assert [s.reason for s in loaded.skipped] == [
            f"$ref '{base}/private/secret.json#/X' is not within the document (remote references are refused)"
        ]
        assert "/private/secret.json" not in asked
        # As before when nothing is allowed: the operation is refused and nothing else fetched.
        asked.clear()
        plain = await load("api", OpenApiSource(document=f"{base}/api/doc.json"), None, 5)
        assert [s.operation for s in plain.skipped] == ["POST /pets", "POST /secrets"]
        assert asked == ["/api/doc.json"]
        # An allowed document that is missing, or too large together with the rest, stops the load.
        del files["/api/shared/common.json"]
        with pytest.raises(ServerUnavailable, match=r"\$ref '.*/api/shared/common.json' answered HTTP 404"):
            await load("api", source, None, 5)
        files["/api/shared/common.json"] = {"Id": {"type": "integer", "description": "x" * 5000}}
        small = source.model_copy(update={"max_document_bytes": 4000})
        with pytest.raises(
            ServerUnavailable, match="and its remote \\$refs are larger than max_document_bytes"
        ):
            await load("api", small, None, 5)
