"""``session_mode: per_client`` in both eras, attacked by one identity against another: the official
SDK client (2026-07-28 stateless, and 2025-11-25 sessions) ↔ a real ``manifold serve`` ↔ real npm
servers, each ``per_client``:

- ``fs``: ``@modelcontextprotocol/server-filesystem``, started with no directory of its own: each
  process may use only what its client's roots name;
- ``ev``: ``server-everything``, which lists ``get-roots-list`` only to a client that declared roots;
- ``nt``: the relay fixture, whose ``touch`` tells its subscribers of a resource change.

Alice and Bob (API keys) each declare their own directory as their root. Each must read and write
only inside it, whatever the other did, and see the tools its own server process lists to it.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated
from mcp.types import ListRootsResult, Root, TextContent

from proxy.protocol import versions
from tests.interaction.harness import NPM_BIN, REPO, RunningManifold, everything_server, running_manifold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
KEYS = {
    "alice": "mfd_alice-per-identity-key-0123456789abcdefghijk",
    "bob": "mfd_bob-per-identity-key-0123456789abcdefghijklmn",
}


@dataclass
class Served:
    manifold: RunningManifold
    users: Path  # users/alice, users/bob: each one's root


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("per-identity")
    users = tmp / "users"
    for name in KEYS:
        (users / name).mkdir(parents=True)
        (users / name / "diary.txt").write_text(f"{name}'s secret")
    config = {
        "auth": {
            "api_keys": [
                {"name": name, "key": f"sha256:{hashlib.sha256(key.encode()).hexdigest()}", "roles": []}
                for name, key in KEYS.items()
            ]
        },
        "servers": {
            # No directory of its own: each process may use only its client's roots.
            "fs": {"command": str(NPM_BIN / "mcp-server-filesystem"), "session_mode": "per_client"},
            "ev": {**everything_server(), "session_mode": "per_client"},
            "nt": {
                "command": sys.executable,
                "args": [str(REPO / "tests" / "fixtures" / "relay_server.py"), "--name", "nt"],
                "era": "handshake",
                "session_mode": "per_client",
            },
        },
    }
    async with running_manifold(tmp, config) as running:
        yield Served(running, users)


@asynccontextmanager
async def client(served: Served, name: str, mode: str) -> AsyncIterator[Client]:
    """``name``'s SDK client, at ``mode``, declaring ``users/<name>`` as its only root; yielded
    once its server process has taken the root in."""
    root = served.users / name

    async def roots(context: ClientRequestContext) -> ListRootsResult:
        return ListRootsResult(roots=[Root.model_validate({"uri": root.as_uri(), "name": name})])

    timeout = httpx2.Timeout(30, read=120)
    async with (
        httpx2.AsyncClient(headers={"X-API-Key": KEYS[name]}, timeout=timeout) as http,
        Client(
            streamable_http_client(served.manifold.url, http_client=http),
            mode=mode,
            list_roots_callback=roots,
            cache=None,
        ) as session,
    ):
        # The server checks roots on disk before it uses them, in its own time, with nothing to
        # wait on: until then it allows nothing (no directory of its own). Asked, bounded.
        with anyio.fail_after(20):
            taken = (False, f"Allowed directories:\n{root}")
            while await call(session, "fs.list_allowed_directories") != taken:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        yield session


async def call(session: Client, tool: str, **arguments: Any) -> tuple[bool, str]:
    """Whether the call failed (``isError``), and its text."""
    result = await session.call_tool(tool, arguments)
    text = "".join(block.text for block in result.content if isinstance(block, TextContent))
    return bool(result.is_error), text


async def served_text(session: Client, tool: str, **arguments: Any) -> str:
    failed, text = await call(session, tool, **arguments)
    assert not failed, text
    return text


async def refusal(session: Client, tool: str, **arguments: Any) -> str:
    failed, text = await call(session, tool, **arguments)
    assert failed, text
    return text


MODES = [pytest.param(V, id="2026-07-28"), pytest.param("legacy", id="2025-11-25")]


@pytest.mark.parametrize("mode", MODES)
async def test_each_identity_reads_only_inside_its_own_root(served: Served, mode: str) -> None:
    users = served.users
    async with client(served, "alice", mode) as alice, client(served, "bob", mode) as bob:
        assert await served_text(alice, "fs.read_text_file", path=str(users / "alice" / "diary.txt")) == (
            "alice's secret"
        )
        assert await served_text(bob, "fs.read_text_file", path=str(users / "bob" / "diary.txt")) == (
            "bob's secret"
        )
        # The attack: each reads the other's file, through the same configured server.
        text = await refusal(alice, "fs.read_text_file", path=str(users / "bob" / "diary.txt"))
        assert "Access denied" in text
        assert "bob's secret" not in text
        text = await refusal(bob, "fs.read_text_file", path=str(users / "alice" / "diary.txt"))
        assert "Access denied" in text
        assert "alice's secret" not in text
        # Each server process knows its own client's root, and only it.
        assert (
            await served_text(alice, "fs.list_allowed_directories")
            == f"Allowed directories:\n{users / 'alice'}"
        )
        assert (
            await served_text(bob, "fs.list_allowed_directories") == f"Allowed directories:\n{users / 'bob'}"
        )


@pytest.mark.parametrize("mode", MODES)
async def test_what_one_identity_writes_the_other_cannot_list_or_read(served: Served, mode: str) -> None:
    users = served.users
    note = users / "alice" / f"plan-{mode}.txt"
    async with client(served, "alice", mode) as alice, client(served, "bob", mode) as bob:
        await served_text(alice, "fs.write_file", path=str(note), content="the plan")
        assert note.name not in await refusal(bob, "fs.list_directory", path=str(users / "alice"))
        assert note.name not in await refusal(bob, "fs.search_files", path=str(users), pattern="plan")
        assert "the plan" not in await refusal(bob, "fs.read_text_file", path=str(note))
        assert "the plan" not in await refusal(
            bob, "fs.read_text_file", path=f"{users}/bob/../alice/{note.name}"
        )
        # Alice's own process sees her file; Bob's own directory stays his.
        assert note.name in await served_text(alice, "fs.list_directory", path=str(users / "alice"))
        assert note.name not in await served_text(bob, "fs.list_directory", path=str(users / "bob"))


@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_listed_only_to_a_client_with_roots_is_listed_and_callable(
    served: Served, mode: str
) -> None:
    async with client(served, "alice", mode) as alice:
        names = {tool.name for tool in (await alice.list_tools()).tools}
        assert "ev.get-roots-list" in names, sorted(names)
        text = await served_text(alice, "ev.get-roots-list")
        assert (served.users / "alice").as_uri() in text, text
        assert (served.users / "bob").as_uri() not in text, text


async def test_an_identitys_listen_stream_hears_only_its_own_process(served: Served) -> None:
    uri, marker = "note://nt/static", "note://nt/marker"
    async with (
        client(served, "alice", V) as alice,
        client(served, "bob", V) as bob,
        alice.listen(resource_subscriptions=[uri]) as alices,
        bob.listen(resource_subscriptions=[uri, marker]) as bobs,
    ):
        assert await served_text(alice, "nt.touch", uri=uri) == f"touched {uri}: told its subscriber"
        with anyio.fail_after(10):
            assert await anext(alices) == ResourceUpdated(uri=uri)
        # Bob watches the same URI, on his own process: Alice's change is not his to hear. His
        # stream's updates come in order, so one of Alice's would be in before his marker.
        assert await served_text(bob, "nt.touch", uri=marker) == f"touched {marker}: told its subscriber"
        with anyio.fail_after(10):
            assert await anext(bobs) == ResourceUpdated(uri=marker)
