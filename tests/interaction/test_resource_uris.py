"""Resource policy against every spelling of a URI, with a server that reads files as file servers do.

``files`` (tests/fixtures/files_server.py) reads ``file://`` URIs under a root the way a naive
file server does: scheme case ignored, ``localhost`` accepted, every escape decoded (``%2F``
too), ``\\`` a separator, ``..`` resolved. The policy denies ``file:///secret*`` to everyone but
staff. Carl (a contractor) attacks it with every spelling a server reads as the secret; each must
get the answer a missing resource gets, while his reads of what he may read still work, and the
server is asked for the URI the policy decided on. Completions of the files template leave out
what he may not read. A catch-all template of an earlier server does not swallow a URI a later
server lists, in any spelling.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import ResourceTemplateReference, TextResourceContents

from tests.interaction.harness import REPO, RunningManifold, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FILES = str(REPO / "tests" / "fixtures" / "files_server.py")
KEYS = {
    "sam": ("mfd_sam-staff-key-0123456789abcdefghijklmnopqrs", ["staff"]),
    "carl": ("mfd_carl-contractor-key-0123456789abcdefghijklm", ["contractor"]),
}
POLICY = """\
version: 1
default: allow
rules:
  - id: secrets-for-staff
    effect: deny
    match: {resources: ["file:///secret*"]}
    unless: {roles: [staff]}
"""
SECRET = "TOP SECRET"
# Spellings of file:///secret.txt (and of file:///secret/key.txt) that the files server reads.
EVASIONS = [
    "file:///secret.txt",
    "file:///allowed/../secret.txt",
    "file:///%73ecret.txt",
    "file:///%73%65%63%72%65%74.txt",
    "FILE:///secret.txt",
    "File:///allowed/../Secret/../secret.txt",
    "file://localhost/secret.txt",
    "file://LOCALHOST/allowed/../secret.txt",
    "file:///allowed/%2e%2e/secret.txt",
    "file:///allowed/%2E%2e/secret/key.txt",
    "file:///allowed/.%2E/secret/key.txt",
    "file:/secret.txt",
    "file:/allowed/../secret/key.txt",
    "file:///allowed//..//secret.txt",
    "file:///./secret.txt",
]
# Spellings no normalization makes safe: refused for everyone (-32602), naming the problem.
REFUSED = {
    "file:///allowed%2F..%2Fsecret.txt": "encoded '/' (%2F)",
    "file:///allowed%2f..%2fsecret%2fkey.txt": "encoded '/' (%2F)",
    "file:///allowed/..%5Csecret.txt": "encoded '\\' (%5C)",
    "file:///allowed\\..\\secret.txt": "may not hold '\\'",
    "file:///secret.txt%00": "encoded NUL (%00)",
    "file:///%zzsecret.txt": "invalid percent-encoding",
}


def stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def tree(root: Path) -> Path:
    (root / "allowed").mkdir(parents=True)
    (root / "secret").mkdir()
    (root / "allowed" / "readme.txt").write_text("public text")
    (root / "secret.txt").write_text(SECRET)
    (root / "secret" / "key.txt").write_text(SECRET)
    return root


def files_config(tmp_path: Path, *args: str) -> dict[str, Any]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    root = tree(tmp_path / "root")
    return {
        "auth": {"api_keys": [{"name": n, "key": stored(k), "roles": r} for n, (k, r) in KEYS.items()]},
        "policy": {"files": ["policy.yaml"], "audit": {"path": "audit.jsonl"}},
        "servers": {
            "files": {
                "command": sys.executable,
                "args": [FILES, "--root", str(root), "--template", "file:///{+path}", *args],
                "era": "handshake",
            }
        },
    }


@asynccontextmanager
async def connect(url: str, identity: str, **options: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {KEYS[identity][0]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(url, http_client=http), **options) as client,
    ):
        yield client


async def text(client: Client, uri: str) -> tuple[str, str]:
    """What a read of ``uri`` answers: the URI the server was asked for, and the text."""
    contents = (await client.read_resource(uri)).contents[0]
    assert isinstance(contents, TextResourceContents)
    return contents.uri, contents.text


async def refusal(client: Client, uri: str) -> Any:
    with pytest.raises(MCPError) as refused:
        await client.read_resource(uri)
    return refused.value.error


def audit(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


async def audited(path: Path, at_least: int) -> list[dict[str, Any]]:
    with anyio.fail_after(10):
        while len(records := audit(path)) < at_least:  # noqa: ASYNC110 (a file has no event to wait on)
            await anyio.sleep(0.02)
    return records


@pytest.fixture
async def manifold(tmp_path: Path) -> AsyncIterator[RunningManifold]:
    async with running_manifold(tmp_path, files_config(tmp_path)) as running:
        yield running


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_every_spelling_of_a_denied_uri_is_answered_as_a_missing_resource(
    manifold: RunningManifold, mode: str
) -> None:
    async with connect(manifold.url, "carl", mode=mode) as carl:
        missing = await refusal(carl, "nowhere://x/secret.txt")
        for uri in EVASIONS:
            hidden = await refusal(carl, uri)
            assert hidden.code == missing.code, uri
            assert hidden.message.startswith("resource not found: file:///secret"), (uri, hidden.message)
            assert hidden.message == missing.message.replace("nowhere://x/secret.txt", hidden.data["uri"])
            assert SECRET not in str(hidden)
        # What he may read still reads, in any spelling, and the server is asked for one URI.
        assert await text(carl, "file:///allowed/readme.txt") == ("file:///allowed/readme.txt", "public text")
        assert await text(carl, "FILE://localhost/allowed/./%72eadme.txt") == (
            "file:///allowed/readme.txt",
            "public text",
        )
    async with connect(manifold.url, "sam", mode=mode) as sam:  # staff: the server reads the normal form
        assert await text(sam, "file:///allowed/../%73ecret.txt") == ("file:///secret.txt", SECRET)


async def test_what_no_normalization_makes_safe_is_refused_naming_the_problem(
    manifold: RunningManifold,
) -> None:
    for identity in ("carl", "sam"):  # refused for everyone alike: it says nothing of the policy
        async with connect(manifold.url, identity, mode="legacy") as client:
            for uri, says in REFUSED.items():
                error = await refusal(client, uri)
                assert error.code == -32602, uri
                assert says in error.message, (uri, error.message)
                assert SECRET not in str(error)


async def test_the_audit_records_the_uri_the_policy_decided_on(manifold: RunningManifold) -> None:
    async with connect(manifold.url, "carl", mode="legacy") as carl:
        await refusal(carl, "FILE://localhost/allowed/%2e%2e/secret.txt")
        await text(carl, "file:///allowed/%72eadme.txt")
    records = await audited(manifold.log_path.parent / "audit.jsonl", 2)
    assert [(r["name"], r["effect"], r["outcome"]) for r in records] == [
        ("file:///secret.txt", "deny", "denied"),
        ("file:///allowed/readme.txt", "allow", "ok"),
    ]


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_subscription_to_a_spelling_of_a_denied_uri_is_refused_as_a_missing_one(
    manifold: RunningManifold,
) -> None:
    async with connect(manifold.url, "carl", mode="legacy") as carl:
        with pytest.raises(MCPError) as missing:
            await carl.subscribe_resource("nowhere://x/secret.txt")
        for uri in ("file:///secret.txt", "file:///allowed/../secret.txt", "FILE://localhost/%73ecret.txt"):
            with pytest.raises(MCPError) as hidden:
                await carl.subscribe_resource(uri)
            assert hidden.value.error.code == missing.value.error.code == -32002
            assert hidden.value.error.data == {"uri": "file:///secret.txt"}
            with pytest.raises(MCPError) as hidden:
                await carl.unsubscribe_resource(uri)
            assert hidden.value.error.code == -32002
        await carl.subscribe_resource("file:///allowed/%72eadme.txt")
        await carl.unsubscribe_resource("FILE:///allowed/readme.txt")


async def completions(client: Client, template: str, value: str, **chosen: str) -> list[str]:
    ref = ResourceTemplateReference(type="ref/resource", uri=template)
    answer = await client.complete(ref, {"name": "path", "value": value}, context_arguments=chosen or None)
    return list(answer.completion.values)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_completions_of_a_template_leave_out_the_values_that_address_what_may_not_be_read(
    manifold: RunningManifold, mode: str
) -> None:
    async with connect(manifold.url, "sam", mode=mode) as sam:
        assert await completions(sam, "file:///{+path}", "") == ["allowed/", "secret/", "secret.txt"]
        assert await completions(sam, "file:///{+path}", "secret/") == ["secret/key.txt"]
    async with connect(manifold.url, "carl", mode=mode) as carl:
        assert await completions(carl, "file:///{+path}", "") == ["allowed/"]
        assert await completions(carl, "file:///{+path}", "secret/") == []
        assert await completions(carl, "file:///{+path}", "s") == []
        assert await completions(carl, "file:///{+path}", "allowed/") == ["allowed/readme.txt"]


async def test_a_template_no_server_lists_cannot_be_completed(manifold: RunningManifold) -> None:
    """A made-up template string the catch-all would route is a missing template, not a way
    to make the server complete paths under another name."""
    async with connect(manifold.url, "carl", mode="legacy") as carl:
        with pytest.raises(MCPError) as unlisted:
            await completions(carl, "file:///{+anything}", "secret/")
        assert unlisted.value.error.code == -32002
        assert unlisted.value.error.message == "resource not found: file:///{+anything}"


async def test_a_template_every_expansion_of_which_is_denied_is_hidden_and_cannot_be_completed(
    tmp_path: Path,
) -> None:
    config = files_config(tmp_path, "--template", "file:///secret/{+name}")
    async with running_manifold(tmp_path, config) as running:
        async with connect(running.url, "carl", mode="legacy") as carl:
            templates = (await carl.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["file:///{+path}"]
            with pytest.raises(MCPError) as hidden:
                await completions(carl, "file:///secret/{+name}", "")
            with pytest.raises(MCPError) as missing:
                await completions(carl, "file:///nothing/{+name}", "")
        async with connect(running.url, "sam", mode="legacy") as sam:
            assert await completions(sam, "file:///secret/{+name}", "") == [
                "allowed/",
                "secret/",
                "secret.txt",
            ]
    assert hidden.value.error.code == missing.value.error.code == -32002


async def test_an_earlier_servers_catch_all_template_does_not_swallow_what_a_later_server_lists(
    tmp_path: Path,
) -> None:
    config = {
        "servers": {
            "greedy": {
                "command": sys.executable,
                "args": [FILES, "--name", "greedy", "--template", "{+anything}"],
            },
            "notes": {
                "command": sys.executable,
                "args": [
                    FILES,
                    "--name",
                    "notes",
                    "--resource",
                    "note://notes/a%7eb",
                    "--resource",
                    "note://notes/c",
                ],
            },
        }
    }
    async with running_manifold(tmp_path, config) as running, Client(running.url, mode="legacy") as client:
        for uri in ("note://notes/a%7eb", "note://notes/a~b", "NOTE://Notes/a%7Eb", "note://notes/x/../a~b"):
            read = (await client.read_resource(uri)).contents[0]
            assert isinstance(read, TextResourceContents)
            assert read.text == "notes read note://notes/a%7eb", uri  # asked in its own spelling
        for uri in ("note://notes/c", "NOTE://notes/c"):
            read = (await client.read_resource(uri)).contents[0]
            assert isinstance(read, TextResourceContents)
            assert read.text == "notes read note://notes/c"
        other = (await client.read_resource("note://notes/other")).contents[0]
        assert isinstance(other, TextResourceContents)
        assert other.text == "greedy read note://notes/other"


async def test_a_listen_stream_does_not_watch_a_spelling_of_a_denied_uri(manifold: RunningManifold) -> None:
    """2026-07-28: resourceSubscriptions are normalized and decided on like reads; a hidden
    one is left out of the acknowledgement like an unknown one, and what is honoured is named
    in its normal form (as updates will name it)."""
    async with connect(manifold.url, "carl", mode="2026-07-28", cache=None) as carl:
        watched = [
            "file:///allowed/../secret.txt",
            "FILE://localhost/%73ecret/key.txt",
            "nowhere://x",
            "file:///allowed/%72eadme.txt",
        ]
        async with carl.listen(resource_subscriptions=watched) as subscription:
            assert subscription.honored.resource_subscriptions == ["file:///allowed/readme.txt"]
