"""End to end, as the attack: server log lines and log levels across identities, by policy.

Behind Manifold, the SDK fixture server with its log tools (``log`` sends a line about no
request, ``log_level`` says the level the server logs at): ``x`` over stdio and ``xs`` over
legacy SSE (transports that cannot tie a line to a request, so every line is the whole
connection's), ``lv`` over stdio for the level tests, ``z`` over stdio ``per_client``, and a
plain ``y``. ``ann`` (staff) sees every server, ``bob`` only ``y``, and ``ops`` sees every server
and is the one identity the policy lets change a shared server's log level. The clients are the
official SDK's, at 2025-11-25 (``logging/setLevel`` is of the handshake era).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

from tests.fixtures.spawn import fixture_command, free_port, running_http_process
from tests.interaction.harness import RunningManifold, running_manifold

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

KEYS = {  # identity -> (API key, roles)
    "ann": ("mfd_ann-staff-key-0123456789abcdefghijklmnopqrst", ["staff"]),
    "bob": ("mfd_bob-outsider-key-0123456789abcdefghijklmnopq", ["outsider"]),
    "ops": ("mfd_ops-operator-key-0123456789abcdefghijklmnopq", ["ops"]),
}
POLICY = """\
version: 1
default: deny
rules:
  - id: staff-and-ops-see-everything
    effect: allow
    match: {roles: [staff, ops]}
  - id: bob-sees-y
    effect: allow
    match: {identities: [bob], servers: [y]}
  - id: ops-set-log-levels
    effect: allow
    match: {roles: [ops], log_levels: ["*"]}
"""
_names = itertools.count()


def _stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def _logging(name: str, **options: Any) -> list[str]:
    return [*fixture_command(name, tools=1, **options), "--log-tools"]


def _stdio(command: list[str], **entry: Any) -> dict[str, Any]:
    return {"command": command[0], "args": command[1:], "era": "handshake", **entry}


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp_path = tmp_path_factory.mktemp("server-logs")
    (tmp_path / "policy.yaml").write_text(POLICY)
    port = free_port()
    async with running_http_process(_logging("xs", transport="sse", port=port), port):
        config = {
            "auth": {"api_keys": [{"name": n, "key": _stored(k), "roles": r} for n, (k, r) in KEYS.items()]},
            "policy": {"files": ["policy.yaml"]},
            "servers": {
                "x": _stdio(_logging("x")),
                "xs": {"url": f"http://127.0.0.1:{port}/sse", "transport": "sse", "era": "handshake"},
                "lv": _stdio(_logging("lv")),
                "z": _stdio(_logging("z"), session_mode="per_client"),
                "y": _stdio(fixture_command("y", tools=1)),
            },
        }
        async with running_manifold(tmp_path, config) as running:
            yield running


class Heard:
    """What one client was told unprompted, in order: log lines' data and list changes."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if method == "notifications/message":
            self.messages.append(str(message.params.data))
        elif method == "notifications/tools/list_changed":
            self.messages.append("<tools changed>")
        else:
            return
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, predicate: Callable[[list[str]], bool]) -> None:
        with anyio.fail_after(15):
            while not predicate(self.messages):
                await self._changed.wait()

    async def heard(self, entry: str) -> None:
        await self.until(lambda messages: entry in messages)


@asynccontextmanager
async def connect(
    manifold: RunningManifold, identity: str, heard: Heard | None = None
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {KEYS[identity][0]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(
            streamable_http_client(manifold.url, http_client=http),
            mode="legacy",
            message_handler=heard or Heard(),
        ) as client,
    ):
        yield client


async def text(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> str:
    result = await client.call_tool(tool, arguments or {})
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@pytest.mark.parametrize("server", ["x", "xs"], ids=["stdio", "legacy-sse"])
async def test_an_identity_denied_a_server_never_hears_its_log_lines(
    manifold: RunningManifold, server: str
) -> None:
    ann_heard, bob_heard = Heard(), Heard()
    secret = f"{server}: what ann's call did"
    async with connect(manifold, "ann", ann_heard) as ann, connect(manifold, "bob", bob_heard) as bob:
        await ann.set_logging_level("debug")
        await bob.set_logging_level("debug")  # bob asks for everything a server says
        assert await text(ann, f"{server}.log", {"level": "error", "data": secret}) == "logged"
        await ann_heard.heard(secret)
        # A change every session is told of, caused after the line: on bob's stream it comes
        # after the line, had the line been sent there.
        assert (await text(ann, f"{server}.add_tool", {"name": f"t{next(_names)}"})).startswith("added")
        await bob_heard.heard("<tools changed>")
    assert bob_heard.messages == ["<tools changed>"]


async def test_only_an_identity_the_policy_lets_changes_a_shared_servers_log_level(
    manifold: RunningManifold,
) -> None:
    ann_heard = Heard()
    async with (
        connect(manifold, "ann", ann_heard) as ann,
        connect(manifold, "bob") as bob,
        connect(manifold, "ops") as ops,
    ):
        assert await text(ann, "lv.log_level") == "warning"
        await ann.set_logging_level("debug")  # answered: it filters what ann receives
        await bob.set_logging_level("debug")
        assert await text(ann, "lv.log_level") == "warning"
        # So nobody gets the server's debug lines, ann included.
        assert await text(ann, "lv.log", {"level": "debug", "data": "debug 1"}) == "filtered"

        await ops.set_logging_level("info")
        assert await text(ann, "lv.log_level") == "info"
        assert await text(ann, "lv.log", {"level": "debug", "data": "debug 2"}) == "filtered"
        assert await text(ann, "lv.log", {"level": "info", "data": "info 1"}) == "logged"
        await ann_heard.heard("info 1")

        # Ann's own level still filters what she receives from what the server sends.
        await ann.set_logging_level("error")
        assert await text(ann, "lv.log_level") == "info"
        assert await text(ann, "lv.log", {"level": "warning", "data": "warning 1"}) == "logged"
        assert await text(ann, "lv.log", {"level": "error", "data": "error 1"}) == "logged"
        await ann_heard.heard("error 1")
    assert ann_heard.messages == ["info 1", "error 1"]


async def test_a_per_client_connection_logs_at_its_own_sessions_level(manifold: RunningManifold) -> None:
    async with connect(manifold, "ann") as ann, connect(manifold, "bob") as bob:
        await bob.set_logging_level("emergency")
        await ann.set_logging_level("debug")  # before ann's own process starts: told when it does
        assert await text(ann, "z.log_level") == "debug"
        await ann.set_logging_level("error")  # while it runs
        assert await text(ann, "z.log_level") == "error"
