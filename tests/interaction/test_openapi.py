"""End to end: a REST API of ours (FastAPI, its generated OpenAPI document) served as tools by a
real ``manifold serve``, driven by the official SDK client in both protocol eras.

The API runs under uvicorn on loopback; Manifold reads the document the API generated (a file,
copied from ``/openapi.json``) and calls the API with each user's own secret (``credentials``
mode ``secret``, stored with ``manifold credentials set``). The hostile half: path parameters
that try to leave their segment, a response past ``max_response_bytes``, a gzip bomb, a
response that lies about its content type, one that never comes in time, a redirect to another
origin: each ends that one call with an error result, and the next call is served.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import BlobResourceContents, EmbeddedResource, TextContent

from proxy.credentials.sealing import new_key
from proxy.protocol import versions
from tests.fixtures.spawn import free_port, running_http_process
from tests.interaction.harness import REPO, RunningManifold, running_manifold, write_config
from tests.interaction.test_credentials import keep
from tests.interaction.test_policy import ListChanged

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
ERAS = ["legacy", V]
KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-9876543210"}
API = REPO / "tests" / "fixtures" / "rest_api.py"


@dataclass
class Served:
    manifold: RunningManifold
    document: Path
    api_port: int
    www: Path  # what the static server serves: the "live" server's document at a URL


def api_keys() -> list[dict[str, Any]]:
    return [
        {"name": name, "key": f"sha256:{hashlib.sha256(key.encode()).hexdigest()}", "roles": []}
        for name, key in KEYS.items()
    ]


async def fetch_document(port: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/openapi.json") as response:
        document: dict[str, Any] = await response.json()
    return document


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("openapi")
    port, other, docs = free_port(), free_port(), free_port()
    command = [sys.executable, str(API), "--port", str(port), "--other-origin", f"http://127.0.0.1:{other}"]
    (tmp / "www").mkdir()
    # A document at a URL (a plain static file server): watched, as the file one is.
    static = [
        sys.executable,
        "-m",
        "http.server",
        "--bind",
        "127.0.0.1",
        "--directory",
        str(tmp / "www"),
        str(docs),
    ]
    async with running_http_process(command, port), running_http_process(static, docs):
        document = tmp / "pets.json"
        document.write_text(json.dumps(await fetch_document(port)))
        (tmp / "www" / "pets.json").write_text(document.read_text())
        config: dict[str, Any] = {
            "auth": {"api_keys": api_keys()},
            "credentials": {"store": "file", "path": str(tmp / "credentials.json"), "key": new_key()},
            "servers": {
                "pets": {
                    "url": f"http://127.0.0.1:{port}",
                    "openapi": {"document": str(document), "max_response_bytes": 1024 * 1024},
                    "headers": {"Authorization": "Bearer token-lister"},
                    "credentials": {"mode": "secret", "template": "Bearer token-{secret}"},
                    "request_timeout": 3,
                },
                "live": {
                    "url": f"http://127.0.0.1:{port}",
                    "openapi": {
                        "document": f"http://127.0.0.1:{docs}/pets.json",
                        "include": {"tags": ["auth"]},
                        "refresh_interval": 0.3,
                    },
                },
            },
        }
        config_path = write_config(tmp / "for-cli.yaml", config)
        for name in KEYS:
            await keep(config_path, "pets", name, name)
        async with running_manifold(tmp, config) as running:
            yield Served(running, document, port, tmp / "www")


@asynccontextmanager
async def client(url: str, name: str, mode: str, **options: Any) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"X-API-Key": KEYS[name]}, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, cache=None, **options) as session,
    ):
        yield session


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


async def tools_of(session: Client) -> dict[str, Any]:
    found: dict[str, Any] = {}
    cursor: str | None = None
    while True:
        page = await session.list_tools(cursor=cursor, cache_mode="bypass")
        found.update({tool.name: tool for tool in page.tools})
        if (cursor := page.next_cursor) is None:
            return found


@pytest.mark.parametrize("era", ERAS)
async def test_operations_are_listed_as_tools_with_schemas_and_hints_from_http(
    served: Served, era: str
) -> None:
    async with client(served.manifold.url, "alice", era) as session:
        tools = await tools_of(session)
    assert {"pets.listPets", "pets.getPet", "pets.createPet", "pets.deletePet", "pets.whoami"} <= set(tools)
    get = tools["pets.getPet"]
    assert get.input_schema["required"] == ["pet_id"]
    assert get.input_schema["properties"]["pet_id"]["type"] == "integer"
    assert get.output_schema is not None
    assert "owner" in get.output_schema["properties"]
    assert get.annotations.read_only_hint is True
    assert get.annotations.idempotent_hint is True
    delete = tools["pets.deletePet"]
    assert delete.annotations.destructive_hint is True
    assert delete.annotations.read_only_hint is False
    create = tools["pets.createPet"]
    assert create.input_schema["required"] == ["body"]
    assert create.input_schema["properties"]["body"]["properties"]["name"]["type"] == "string"
    # A list answer is not an object: its schema is wrapped, as structuredContent is.
    assert tools["pets.listPets"].output_schema["properties"]["result"]["type"] == "array"


@pytest.mark.parametrize("era", ERAS)
async def test_calls_reach_the_api_as_the_calling_user_with_structured_results(
    served: Served, era: str
) -> None:
    for name in KEYS:
        async with client(served.manifold.url, name, era) as session:
            who = await session.call_tool("pets.whoami", {})
            assert not who.is_error, text_of(who)
            assert who.structured_content == {"user": name}
            created = await session.call_tool(
                "pets.createPet", {"body": {"name": f"{name}-{era}", "tag": era}}
            )
            assert not created.is_error, text_of(created)
            assert created.structured_content is not None
            assert created.structured_content["owner"] == name
            pet_id = created.structured_content["id"]
            got = await session.call_tool("pets.getPet", {"pet_id": pet_id})
            assert got.structured_content == created.structured_content
            assert json.loads(text_of(got)) == created.structured_content
    async with client(served.manifold.url, "alice", era) as session:
        listed = await session.call_tool("pets.listPets", {"tag": [era], "limit": 50})
        assert listed.structured_content is not None
        assert sorted(p["name"] for p in listed.structured_content["result"]) == [
            f"alice-{era}",
            f"bob-{era}",
        ]
        missing = await session.call_tool("pets.getPet", {"pet_id": 999999})
        assert missing.is_error
        assert "HTTP 404" in text_of(missing)
        assert "no pet 999999" in text_of(missing)


async def test_bad_arguments_are_refused_before_the_api_is_called(served: Served) -> None:
    async with client(served.manifold.url, "alice", "legacy") as session:
        result = await session.call_tool("pets.getPet", {"pet_id": "not a number"})
        assert result.is_error
        assert "pet_id" in text_of(result)


@pytest.mark.parametrize(
    ("segment", "raw"),
    [("../whoami", "/echo/..%2Fwhoami"), ("a%2Fb", "/echo/a%252Fb"), ("a/b?c#d", "/echo/a%2Fb%3Fc%23d")],
)
async def test_a_path_parameter_stays_in_its_segment(served: Served, segment: str, raw: str) -> None:
    async with client(served.manifold.url, "alice", "legacy") as session:
        result = await session.call_tool("pets.echo_path", {"segment": segment})
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    assert result.structured_content["raw_path"] == raw


@pytest.mark.parametrize("era", ERAS)
async def test_parameters_named_like_mcps_own_fields_are_plain_arguments(served: Served, era: str) -> None:
    sent = {"_meta": "m", "name": "n", "arguments": "a", "progressToken": "p", "cursor": "c"}
    async with client(served.manifold.url, "alice", era) as session:
        tools = await tools_of(session)
        assert set(tools["pets.named_like_ours"].input_schema["properties"]) == set(sent)
        result = await session.call_tool("pets.named_like_ours", sent)
    assert result.structured_content == sent


@pytest.mark.parametrize("era", ERAS)
async def test_a_multipart_body_sends_base64_arguments_as_files(served: Served, era: str) -> None:
    photo, other = bytes(range(256)) * 3, b"\x00\r\n--not-a-boundary\r\n"
    async with client(served.manifold.url, "alice", era) as session:
        tools = await tools_of(session)
        schema = tools["pets.uploadPhotos"].input_schema["properties"]["body"]["properties"]
        assert schema["photo"]["contentEncoding"] == "base64"
        sent = {
            "photo": base64.b64encode(photo).decode(),
            "extra": [base64.b64encode(other).decode()],
            "caption": "at the beach",
        }
        result = await session.call_tool("pets.uploadPhotos", {"pet_id": 3, "body": sent})
        assert not result.is_error, text_of(result)
        bad = await session.call_tool("pets.uploadPhotos", {"pet_id": 3, "body": {"photo": "%%%"}})
    assert result.structured_content == {
        "pet_id": 3,
        "caption": "at the beach",
        "files": [
            {
                "filename": "photo",
                "type": "application/octet-stream",
                "sha256": hashlib.sha256(photo).hexdigest(),
            },
            {
                "filename": "extra",
                "type": "application/octet-stream",
                "sha256": hashlib.sha256(other).hexdigest(),
            },
        ],
    }
    assert bad.is_error
    assert "file field 'photo' is not valid base64" in text_of(bad)


async def test_bodies_that_are_not_json_are_text_or_resources_by_media_type(served: Served) -> None:
    async with client(served.manifold.url, "alice", V) as session:
        tools = await tools_of(session)
        assert tools["pets.report"].output_schema is None
        text = await session.call_tool("pets.report", {})
        blob = await session.call_tool("pets.archive", {})
    assert text_of(text) == "pet,count\nrex,1\n"
    resource = blob.content[0]
    assert isinstance(resource, EmbeddedResource)
    assert isinstance(resource.resource, BlobResourceContents)
    assert resource.resource.mime_type == "application/zip"
    assert base64.b64decode(resource.resource.blob) == b"PK\x03\x04 not really a zip"


@pytest.mark.parametrize("segment", ["..", "."])
async def test_a_path_parameter_that_is_a_dot_segment_is_refused(served: Served, segment: str) -> None:
    async with client(served.manifold.url, "alice", "legacy") as session:
        result = await session.call_tool("pets.echo_path", {"segment": segment})
    assert result.is_error
    assert "not a path segment" in text_of(result)


@pytest.mark.parametrize(
    ("tool", "said"),
    [
        ("pets.huge", "max_response_bytes"),
        ("pets.bomb", "max_response_bytes"),
        ("pets.lying", "not the JSON its document describes"),
        ("pets.elsewhere", "redirect"),
    ],
)
async def test_a_hostile_answer_ends_only_its_own_call(served: Served, tool: str, said: str) -> None:
    async with client(served.manifold.url, "alice", "legacy") as session:
        result = await session.call_tool(tool, {})
        assert result.is_error, text_of(result)
        assert said.lower() in text_of(result).lower(), text_of(result)
        assert (await session.call_tool("pets.whoami", {})).structured_content == {"user": "alice"}


async def test_a_slow_api_times_out_that_call_and_the_next_is_served(served: Served) -> None:
    async with client(served.manifold.url, "bob", "legacy") as session:
        with anyio.fail_after(20):
            with pytest.raises(Exception, match=r"timeout|did not answer"):
                await session.call_tool("pets.slow", {})
        assert (await session.call_tool("pets.whoami", {})).structured_content == {"user": "bob"}


async def test_a_changed_document_changes_the_tools_and_clients_hear_of_it(served: Served) -> None:
    original = served.document.read_text()
    document = json.loads(original)
    del document["paths"]["/whoami"]
    changed = ListChanged()
    try:
        async with client(served.manifold.url, "alice", "legacy", message_handler=changed) as session:
            assert "pets.whoami" in await tools_of(session)
            told = changed.expect()
            served.document.write_text(json.dumps(document))
            with anyio.fail_after(20):
                await told.wait()
                while "pets.whoami" in await tools_of(session):
                    await changed.expect().wait()
    finally:
        served.document.write_text(original)


async def test_a_document_at_a_url_is_watched_and_a_broken_one_keeps_the_tools(served: Served) -> None:
    path = served.www / "pets.json"
    original = path.read_text()
    document = json.loads(original)
    document["paths"]["/whoami"]["get"]["summary"] = "Who you are, as the API sees it"
    document["paths"]["/whoami"]["get"]["operationId"] = "whoAmI"
    changed = ListChanged()
    try:
        async with client(served.manifold.url, "alice", "legacy", message_handler=changed) as session:
            assert "live.whoami" in await tools_of(session)
            told = changed.expect()
            path.write_text(json.dumps(document))
            with anyio.fail_after(20):
                await told.wait()
                while "live.whoAmI" not in (tools := await tools_of(session)):
                    await changed.expect().wait()
            assert "live.whoami" not in tools
            # Broken or huge on the next fetches: logged, and the tools in force stay.
            for broken, said in (("{not json", "not JSON or YAML"), ('{"swagger": "2.0"}', "Swagger 2.0")):
                before = served.manifold.log().count(said)
                path.write_text(broken)
                with anyio.fail_after(20):
                    while served.manifold.log().count(said) == before:  # noqa: ASYNC110 (another process's log)
                        await anyio.sleep(0.1)
            assert "live.whoAmI" in await tools_of(session)
            result = await session.call_tool("live.whoAmI", {})
            assert "HTTP 401" in text_of(result)  # the API answered: the server is still served
    finally:
        path.write_text(original)
