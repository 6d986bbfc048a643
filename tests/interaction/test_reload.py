"""End to end: a config reload in a real ``manifold serve``, driven by the SDK client.

A changed config file (watched) or SIGHUP adds, removes and restarts servers and endpoints
while clients stay connected: another client's calls to an untouched server keep succeeding
throughout, a call in flight to a removed server fails naming it, clients hear one
``list_changed``. A broken file (a parse error, an invalid setting, a server that cannot start, a
link to ``/dev/zero``, a huge file) is refused and everything keeps working; a file flipped
back and forth is read once it settles.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.processes import children
from tests.interaction.harness import RunningManifold, fixture_server, running_manifold, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CALLS_AT_MOST = 5000  # the other client's loop is bounded, whatever happens


def config(servers: dict[str, Any], **rest: Any) -> dict[str, Any]:
    return {"servers": servers, **rest}


def numbered(name: str, tools: int) -> dict[str, Any]:
    return fixture_server(name, tools=tools)


class ToolsChanged:
    """A message handler that counts ``notifications/tools/list_changed``."""

    def __init__(self) -> None:
        self.count = 0
        self._event = anyio.Event()

    def expect(self) -> anyio.Event:
        """A fresh event, set by the next notification; take it *before* causing the change."""
        self._event = anyio.Event()
        return self._event

    async def __call__(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.count += 1
            self._event.set()


@asynccontextmanager
async def connect(url: str, **options: Any) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy", **options) as client,
    ):
        yield client


async def tool_names(client: Client) -> set[str]:
    names: set[str] = set()
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        names |= {tool.name for tool in page.tools}
        cursor = page.next_cursor
        if cursor is None:
            return names


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def metric(manifold: RunningManifold, name: str, **labels: str) -> float:
    async with (
        aiohttp.ClientSession() as http,
        http.get(manifold.url.replace("/mcp", "/metrics")) as response,
    ):
        text = await response.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


async def until(check: Callable[[], Any], timeout: float = 30) -> None:
    """Wait (bounded) until ``await check()`` is true: another process, seen from outside."""
    with anyio.fail_after(timeout):
        while not await check():  # noqa: ASYNC110 (another process: nothing to wait on)
            await anyio.sleep(0.05)


async def reloads(manifold: RunningManifold, outcome: str) -> float:
    return await metric(manifold, "manifold_config_reloads_total", outcome=outcome)


def config_path(tmp_path: Path) -> Path:
    return tmp_path / "manifold.yaml"  # where running_manifold writes it


class Caller:
    """Another client calling a tool of an untouched server in a loop, until told to stop."""

    def __init__(self, url: str, tool: str) -> None:
        self.url, self.tool = url, tool
        self.answered = 0
        self.failures: list[str] = []
        self.stop = anyio.Event()
        self.started = anyio.Event()
        self.finished = anyio.Event()

    async def run(self) -> None:
        try:
            await self._calls()
        finally:
            self.finished.set()

    async def _calls(self) -> None:
        async with connect(self.url) as client:
            for _ in range(CALLS_AT_MOST):
                try:
                    result = await client.call_tool(self.tool, {})
                    if result.is_error:
                        self.failures.append(text_of(result))
                    else:
                        self.answered += 1
                except MCPError as exc:
                    self.failures.append(str(exc))
                self.started.set()
                if self.stop.is_set():
                    return


async def test_a_changed_file_adds_removes_and_restarts_servers_while_another_client_keeps_calling(
    tmp_path: Path,
) -> None:
    before = config(
        {"steady": numbered("steady", 2), "old": numbered("old", 1), "changer": numbered("changer", 1)}
    )
    after = config(
        {"steady": numbered("steady", 2), "changer": numbered("changer", 3), "fresh": numbered("fresh", 2)}
    )
    notices = ToolsChanged()
    async with (
        running_manifold(tmp_path, before) as manifold,
        connect(manifold.url, message_handler=notices) as client,
        anyio.create_task_group() as tg,
    ):
        names = await tool_names(client)
        assert {"old.tool_000", "changer.tool_000"} <= names
        assert "changer.tool_002" not in names

        slow: list[BaseException | str] = []

        async def call_slow() -> None:
            try:
                slow.append(text_of(await client.call_tool("old.slow", {"seconds": 120})))
            except MCPError as exc:
                slow.append(exc)

        tg.start_soon(call_slow)
        await until(lambda: _in_flight(manifold))
        caller = Caller(manifold.url, "steady.tool_000")
        tg.start_soon(caller.run)
        with anyio.fail_after(30):
            await caller.started.wait()

        changed = notices.expect()
        write_config(config_path(tmp_path), after)
        with anyio.fail_after(30):
            await changed.wait()
        await until(lambda: _has(slow))

        failure = slow[0]
        assert isinstance(failure, MCPError), failure
        assert failure.error.code == -32000
        assert "'old'" in failure.error.message
        assert "removed from the config" in failure.error.message

        names = await tool_names(client)
        assert not any(name.startswith("old.") for name in names)
        assert {"fresh.tool_000", "fresh.tool_001", "changer.tool_002", "steady.tool_001"} <= names
        assert text_of(await client.call_tool("fresh.tool_001", {})) == "fresh:tool_001"
        assert text_of(await client.call_tool("changer.tool_002", {})) == "changer:tool_002"
        unknown = await _error_of(client, "old.tool_000")
        assert unknown.error.code == -32602

        caller.stop.set()
        with anyio.fail_after(30):
            await caller.finished.wait()
        assert caller.failures == []
        assert caller.answered > 0
        assert notices.count == 1  # one for the whole reload, not one per server
        assert await reloads(manifold, "applied") == 1
        assert "servers added: fresh; servers removed: old; servers restarted: changer" in manifold.log()
        tg.cancel_scope.cancel()


async def test_sighup_reloads_the_config_and_a_restart_only_setting_keeps_its_value(tmp_path: Path) -> None:
    notices = ToolsChanged()
    async with (
        running_manifold(tmp_path, config({"steady": numbered("steady", 1)})) as manifold,
        connect(manifold.url, message_handler=notices) as client,
    ):
        write_config(
            config_path(tmp_path),
            config(
                {"steady": numbered("steady", 1), "added": numbered("added", 1)},
                limits={"max_sessions": 5},
                sessions={"secret": "a-new-secret-that-is-long-enough-0123456789"},
            ),
        )
        changed = notices.expect()
        manifold.process.send_signal(signal.SIGHUP)
        with anyio.fail_after(30):
            await changed.wait()
        assert "added.tool_000" in await tool_names(client)
        assert text_of(await client.call_tool("added.tool_000", {})) == "added:tool_000"
        log = manifold.log()
        assert "needs a restart, the old value stays: sessions.secret, limits.max_sessions" in log
        assert "a-new-secret" not in log
        # The session survived the reload: the secret that signs it did not change.
        assert text_of(await client.call_tool("steady.tool_000", {})) == "steady:tool_000"
        assert notices.count == 1


class ListsChanged:
    """A message handler that counts each kind of ``notifications/*/list_changed``, and lets a
    test wait for the next one of tools."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._tools = anyio.Event()

    def expect(self) -> anyio.Event:
        self._tools = anyio.Event()
        return self._tools

    async def __call__(self, message: Any) -> None:
        method = getattr(message, "method", None) or ""
        if method.endswith("/list_changed"):
            kind = method.removeprefix("notifications/").removesuffix("/list_changed")
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if kind == "tools":
                self._tools.set()


async def _barrier(
    tmp_path: Path, manifold: RunningManifold, heard: ListsChanged, servers: dict[str, Any]
) -> None:
    """A reload that adds a server: its tools ``list_changed`` comes after anything an earlier
    reload sent on the same stream, so once it is in, nothing more of those is on its way."""
    told = heard.expect()
    write_config(config_path(tmp_path), config({**servers, "late": numbered("late", 1)}))
    manifold.process.send_signal(signal.SIGHUP)
    with anyio.fail_after(30):
        await told.wait()


@pytest.mark.slow
async def test_sighup_with_nothing_changed_tells_nobody_and_logs_no_policy_reload(tmp_path: Path) -> None:
    servers = {"steady": numbered("steady", 1)}
    heard = ListsChanged()
    async with (
        running_manifold(tmp_path, config(servers, endpoints={"e": {"servers": ["steady"]}})) as manifold,
        connect(manifold.url, message_handler=heard) as client,
        connect(manifold.url + "/e", message_handler=heard) as on_endpoint,
    ):
        assert "steady.tool_000" in await tool_names(client)
        assert "steady.tool_000" in await tool_names(on_endpoint)
        manifold.process.send_signal(signal.SIGHUP)
        await until(lambda: _at_least(manifold, "unchanged", 1))
        await _barrier(tmp_path, manifold, heard, servers)
        assert heard.counts == {"tools": 1}  # the barrier's, on /mcp; /mcp/e does not show "late"
        assert "policy reloaded" not in manifold.log()


@pytest.mark.slow
async def test_a_server_restarted_by_a_reload_that_lists_the_same_tells_nobody(tmp_path: Path) -> None:
    heard = ListsChanged()
    before = {"steady": numbered("steady", 2)}
    after = {"steady": {**numbered("steady", 2), "env": {"SOMETHING": "else"}}}
    async with (
        running_manifold(tmp_path, config(before)) as manifold,
        connect(manifold.url, message_handler=heard) as client,
    ):
        assert "steady.tool_001" in await tool_names(client)
        write_config(config_path(tmp_path), config(after))
        manifold.process.send_signal(signal.SIGHUP)
        await until(lambda: _at_least(manifold, "applied", 1))
        assert "servers restarted: steady" in manifold.log()
        await _barrier(tmp_path, manifold, heard, after)
        assert heard.counts == {"tools": 1}  # the barrier's only
        assert text_of(await client.call_tool("steady.tool_001", {})) == "steady:tool_001"


BROKEN = {
    "a parse error": ("servers: [unclosed\n", "invalid yaml"),
    "an invalid setting": ("servers:\n  x:\n    command: a\n    request_timeout: -1\n", "request_timeout"),
    "a server that cannot start": (
        "servers:\n  nope:\n    command: /nonexistent/manifold-test-server\n",
        "servers.nope.command",
    ),
}


async def test_a_broken_file_is_refused_and_the_old_config_stays_whole(tmp_path: Path) -> None:
    async with (
        running_manifold(tmp_path, config({"steady": numbered("steady", 1)})) as manifold,
        connect(manifold.url) as client,
    ):
        before = await tool_names(client)
        path = config_path(tmp_path)
        for refused, (text, named) in enumerate(BROKEN.values(), start=1):
            path.write_text(text)
            manifold.process.send_signal(signal.SIGHUP)
            await until(functools.partial(_at_least, manifold, "refused", refused))
            last = manifold.log().split("config reload (SIGHUP) refused")[-1]
            assert named in last.lower()
            assert await tool_names(client) == before
            assert text_of(await client.call_tool("steady.tool_000", {})) == "steady:tool_000"
        assert await reloads(manifold, "applied") == 0


async def test_a_link_to_dev_zero_or_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    async with (
        running_manifold(tmp_path, config({"steady": numbered("steady", 1)})) as manifold,
        connect(manifold.url) as client,
    ):
        path = config_path(tmp_path)
        path.unlink()
        path.symlink_to("/dev/zero")
        manifold.process.send_signal(signal.SIGHUP)
        await until(lambda: _at_least(manifold, "refused", 1))
        assert "not a regular file" in manifold.log()

        path.unlink()
        with path.open("w") as file:  # 8 MiB of comments: valid YAML, too big to read
            file.write(("#" * 1023 + "\n") * 8192)
        manifold.process.send_signal(signal.SIGHUP)
        await until(lambda: _at_least(manifold, "refused", 2))
        assert "larger than 4194304 bytes" in manifold.log()
        assert text_of(await client.call_tool("steady.tool_000", {})) == "steady:tool_000"


async def test_a_file_flipped_back_and_forth_is_read_once_it_settles(tmp_path: Path) -> None:
    one = config({"steady": numbered("steady", 1), "a": numbered("a", 1)})
    two = config({"steady": numbered("steady", 1), "b": numbered("b", 1)})
    async with (
        running_manifold(tmp_path, one) as manifold,
        connect(manifold.url) as client,
    ):
        path = config_path(tmp_path)
        for flip in range(60):  # three seconds of a file that never stays the same
            write_config(path, two if flip % 2 == 0 else one)
            await anyio.sleep(0.05)  # the attack's pace, not a wait for anything
        write_config(path, two)

        async def settled() -> bool:
            names = await tool_names(client)
            return "b.tool_000" in names and "a.tool_000" not in names

        await until(settled)
        assert await reloads(manifold, "applied") <= 2  # debounced: never one per write


async def test_endpoints_are_added_changed_and_removed_by_a_reload(tmp_path: Path) -> None:
    servers = {"steady": numbered("steady", 1), "other": numbered("other", 1)}
    async with running_manifold(tmp_path, config(servers, endpoints={"gone": {}})) as manifold:
        path = config_path(tmp_path)
        write_config(path, config(servers, endpoints={"narrow": {"servers": ["steady"]}}))
        manifold.process.send_signal(signal.SIGHUP)
        await until(lambda: _at_least(manifold, "applied", 1))
        async with connect(f"{manifold.url}/narrow") as narrow:
            names = await tool_names(narrow)
            assert "steady.tool_000" in names
            assert "other.tool_000" not in names
            assert text_of(await narrow.call_tool("steady.tool_000", {})) == "steady:tool_000"

            write_config(path, config(servers, endpoints={"narrow": {"servers": ["other"]}}))
            manifold.process.send_signal(signal.SIGHUP)
            await until(lambda: _at_least(manifold, "applied", 2))
            names = await tool_names(narrow)  # the same session, the endpoint's new view
            assert "other.tool_000" in names
            assert "steady.tool_000" not in names
        async with aiohttp.ClientSession() as http, http.post(f"{manifold.url}/gone", json={}) as response:
            assert response.status == 404


async def test_a_removed_per_client_server_stops_every_client_connection_and_fails_its_calls(
    tmp_path: Path,
) -> None:
    mine = {**numbered("mine", 1), "session_mode": "per_client"}
    steady = numbered("steady", 1)
    async with (
        running_manifold(tmp_path, config({"steady": steady, "mine": mine})) as manifold,
        connect(manifold.url) as client,
        anyio.create_task_group() as tg,
    ):
        assert text_of(await client.call_tool("mine.tool_000", {})) == "mine:tool_000"
        assert len(children(manifold.process.pid, "--name mine")) == 2  # the shared one and its own
        slow: list[BaseException | str] = []

        async def call_slow() -> None:
            try:
                slow.append(text_of(await client.call_tool("mine.slow", {"seconds": 120})))
            except MCPError as exc:
                slow.append(exc)

        tg.start_soon(call_slow)
        await until(lambda: _in_flight(manifold))
        write_config(config_path(tmp_path), config({"steady": steady}))
        manifold.process.send_signal(signal.SIGHUP)
        await until(lambda: _has(slow))
        failure = slow[0]
        assert isinstance(failure, MCPError), failure
        assert failure.error.code == -32000
        assert "'mine'" in failure.error.message
        assert "removed from the config" in failure.error.message

        async def stopped() -> bool:
            return not children(manifold.process.pid, "--name mine")

        await until(stopped)
        assert not any(name.startswith("mine.") for name in await tool_names(client))
        assert text_of(await client.call_tool("steady.tool_000", {})) == "steady:tool_000"


async def _in_flight(manifold: RunningManifold) -> bool:
    return await metric(manifold, "manifold_requests_in_flight") >= 1


async def _has(items: list[Any]) -> bool:
    return bool(items)


async def _at_least(manifold: RunningManifold, outcome: str, count: int) -> bool:
    return await reloads(manifold, outcome) >= count


async def _error_of(client: Client, name: str) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await client.call_tool(name, {})
    return caught.value
