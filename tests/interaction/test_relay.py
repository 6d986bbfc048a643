"""End to end, the full relay: SDK clients ↔ ``manifold serve`` ↔ SDK servers using every feature.

Behind Manifold: ``r1`` (stdio, shared connection), ``r2`` (Streamable HTTP, shared connection)
and ``r3`` (stdio, ``per_client``), all running tests/fixtures/relay_server.py. The clients speak
the handshake era (``mode="legacy"``): questions from a server reach a 2026-07-28 client only as
``input_required``, and changes only on ``subscriptions/listen``, neither served yet.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.subscriptions import ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    LoggingMessageNotificationParams,
    PromptReference,
    ResourceTemplateReference,
    Root,
    TextContent,
    TextResourceContents,
)
from pydantic import FileUrl

from proxy.protocol import versions
from tests.fixtures.spawn import free_port, running_http_process
from tests.interaction.harness import REPO, RunningManifold, running_manifold

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

RELAY = str(REPO / "tests" / "fixtures" / "relay_server.py")


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    port = free_port()
    r2 = [sys.executable, RELAY, "--name", "r2", "--transport", "streamable-http", "--port", str(port)]
    async with running_http_process(r2, port):
        config = {
            "servers": {
                "r1": {"command": sys.executable, "args": [RELAY, "--name", "r1"], "era": "handshake"},
                "r2": {
                    "url": f"http://127.0.0.1:{port}/mcp",
                    "transport": "streamable-http",
                    "era": "handshake",
                },
                "r3": {
                    "command": sys.executable,
                    "args": [RELAY, "--name", "r3"],
                    "session_mode": "per_client",
                    "era": "handshake",
                },
            }
        }
        async with running_manifold(tmp_path_factory.mktemp("relay"), config) as running:
            yield running


async def answer_sampling(
    context: ClientRequestContext, params: CreateMessageRequestParams
) -> CreateMessageResult:
    asked = params.messages[0].content
    assert isinstance(asked, TextContent)
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text=f"reply to {asked.text}"), model="test"
    )


def answer_elicitation(name: str) -> Any:
    async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"name": name})

    return answer


async def test_prompts_from_every_server_are_listed_and_each_goes_to_its_server(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode="legacy") as client:
        names = [prompt.name for prompt in (await client.list_prompts()).prompts]
        assert names == ["r1.greet", "r2.greet", "r3.greet"]
        for server in ("r1", "r2", "r3"):
            result = await client.get_prompt(f"{server}.greet", {"name": "Ada"})
            content = result.messages[0].content
            assert isinstance(content, TextContent)
            assert content.text == f"Hello from {server}, Ada!"
        with pytest.raises(MCPError) as caught:
            await client.get_prompt("r9.greet", {"name": "x"})
        assert caught.value.error.code == -32602


async def test_resources_keep_their_uris_and_reads_route_by_uri_and_template(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode="legacy") as client:
        uris = [str(resource.uri) for resource in (await client.list_resources()).resources]
        assert uris == ["note://r1/static", "note://r2/static", "note://r3/static"]
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        assert templates == ["note://r1/{topic}", "note://r2/{topic}", "note://r3/{topic}"]
        for uri, text in [
            ("note://r2/static", "static note of r2"),
            ("note://r1/cats", "r1 note about cats"),
        ]:
            contents = (await client.read_resource(uri)).contents[0]
            assert isinstance(contents, TextResourceContents)
            assert contents.text == text
        with pytest.raises(MCPError) as caught:
            await client.read_resource("note://nowhere/x")
        assert caught.value.error.code == -32002


async def test_completions_route_by_prompt_name_and_by_template(manifold: RunningManifold) -> None:
    async with Client(manifold.url, mode="legacy") as client:
        prompt = PromptReference(type="ref/prompt", name="r2.greet")
        by_prompt = await client.complete(prompt, {"name": "name", "value": "Al"})
        assert by_prompt.completion.values == ["Alan"]
        ref = ResourceTemplateReference(type="ref/resource", uri="note://r3/{topic}")
        by_template = await client.complete(ref, {"name": "topic", "value": "b"})
        assert by_template.completion.values == ["beta"]


async def test_progress_from_a_shared_connection_reaches_only_the_client_that_asked(
    manifold: RunningManifold,
) -> None:
    # Both sessions number requests (and so progress tokens) the same way.
    seen: dict[str, list[float]] = {"a": [], "b": []}

    async def call(who: str, server: str, steps: int) -> None:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen[who].append(progress)

        async with Client(manifold.url, mode="legacy") as client:
            result = await client.call_tool(
                f"{server}.progress", {"steps": steps}, progress_callback=on_progress
            )
            assert _text(result) == f"{server}: {steps} steps"

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "a", "r1", 3)
            tg.start_soon(call, "b", "r1", 5)
    assert seen == {"a": [1, 2, 3], "b": [1, 2, 3, 4, 5]}


async def test_sampling_reaches_the_calling_client_and_a_client_without_it_gets_an_error(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode="legacy", sampling_callback=answer_sampling) as client:
        for server in ("r1", "r2", "r3"):
            assert (
                _text(await client.call_tool(f"{server}.sample", {"prompt": server}))
                == f"sampled: reply to {server}"
            )
    async with Client(manifold.url, mode="legacy") as client:
        with pytest.raises(MCPError, match="did not declare the capability sampling"):
            await client.call_tool("r1.sample", {"prompt": "x"})


async def test_two_clients_sampling_at_once_on_a_shared_stdio_server_are_told_what_happened(
    manifold: RunningManifold,
) -> None:
    """Alice's call on r1 (shared stdio) is being sampled when Bob's call on r1 asks too: stdio
    does not say whose call a request is about, so Manifold must not guess (it could hand
    Alice's prompt to Bob's model). It refuses, and says why, not -32601 "method not found"."""
    alice_asked, bob_done = anyio.Event(), anyio.Event()

    async def alice_samples(
        context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult:
        alice_asked.set()
        await bob_done.wait()  # Alice's call stays in flight, asking, while Bob's asks too
        return await answer_sampling(context, params)

    async def alice() -> None:
        async with Client(manifold.url, mode="legacy", sampling_callback=alice_samples) as client:
            result = await client.call_tool("r1.sample", {"prompt": "alice"})
            assert _text(result) == "sampled: reply to alice"

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(alice)
            await alice_asked.wait()
            try:
                async with Client(manifold.url, mode="legacy", sampling_callback=answer_sampling) as bob:
                    with pytest.raises(MCPError) as refused:
                        await bob.call_tool("r1.sample", {"prompt": "bob"})
            finally:
                bob_done.set()
    error = refused.value.error
    assert error.code == -32603  # not -32601: the method exists, the asker could not be told apart
    assert "Method not found" not in error.message
    assert error.message.startswith(
        "Manifold cannot tell which client sampling/createMessage from server 'r1' is for: "
        "2 client sessions have calls in flight on its shared connection"
    )
    assert "session_mode: per_client" in error.message


async def test_two_clients_sharing_an_http_server_each_answer_their_own_elicitation(
    manifold: RunningManifold,
) -> None:
    answers: dict[str, str] = {}

    async def ask(name: str, server: str) -> None:
        async with Client(
            manifold.url, mode="legacy", elicitation_callback=answer_elicitation(name)
        ) as client:
            answers[f"{server}/{name}"] = _text(await client.call_tool(f"{server}.ask", {"question": "who?"}))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for name in ("alice", "bob"):
                tg.start_soon(ask, name, "r2")  # shared: told apart by the request's own stream
                tg.start_soon(ask, name, "r3")  # per_client: a connection each
    assert answers == {f"{s}/{n}": f"accept: {n}" for s in ("r2", "r3") for n in ("alice", "bob")}


async def test_roots_are_asked_of_the_client_behind_a_per_client_connection(
    manifold: RunningManifold,
) -> None:
    async def roots(context: ClientRequestContext) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=FileUrl("file:///srv/project"))])

    async with Client(manifold.url, mode="legacy", list_roots_callback=roots) as client:
        assert _text(await client.call_tool("r3.roots", {})) == "file:///srv/project"
        assert _text(await client.call_tool("r1.roots", {})) == "file:///srv/project"


async def test_log_lines_reach_clients_that_asked_for_that_level(manifold: RunningManifold) -> None:
    received: dict[str, list[str]] = {"listener": [], "quiet": []}
    unrelated_arrived = anyio.Event()

    def collect(who: str) -> Any:
        async def on_log(params: LoggingMessageNotificationParams) -> None:
            received[who].append(str(params.data))
            if params.data == "unrelated: hi":
                unrelated_arrived.set()

        return on_log

    async with (
        Client(manifold.url, mode="legacy", logging_callback=collect("listener")) as listener,
        Client(manifold.url, mode="legacy", logging_callback=collect("quiet")) as quiet,
    ):
        await listener.set_logging_level("error")
        await quiet.set_logging_level("emergency")
        assert _text(await listener.call_tool("r1.log", {"message": "hi"})) == "logged"
        with anyio.fail_after(10):
            await unrelated_arrived.wait()  # the standalone stream delivers it asynchronously
    assert "unrelated: hi" in received["listener"]
    assert received["quiet"] == []


async def test_a_cancelled_call_is_cancelled_at_the_server_and_the_other_client_goes_on(
    manifold: RunningManifold, tmp_path: Path
) -> None:
    marker = tmp_path / "cancelled"
    async with (
        Client(manifold.url, mode="legacy") as first,
        Client(manifold.url, mode="legacy") as second,
    ):
        with pytest.raises(MCPError):
            await first.call_tool("r1.wait", {"seconds": 30, "marker": str(marker)}, read_timeout_seconds=1)
        result = await second.call_tool("r1.wait", {"seconds": 0.1, "marker": str(tmp_path / "unused")})
        assert _text(result) == "waited"
    with anyio.fail_after(10):
        while not marker.exists():  # noqa: ASYNC110 - another process writes it; no event reaches us
            await anyio.sleep(0.05)
    assert marker.read_text() == "cancelled"
    assert not (tmp_path / "unused").exists()


async def test_resource_updates_reach_only_subscribed_sessions(manifold: RunningManifold) -> None:
    updates: dict[str, list[str]] = {"subscriber": [], "other": []}
    subscriber_told = anyio.Event()

    def collect(who: str) -> Any:
        async def on_message(message: Any) -> None:
            if getattr(message, "method", None) == "notifications/resources/updated":
                updates[who].append(str(message.params.uri))
                if who == "subscriber":
                    subscriber_told.set()

        return on_message

    async with (
        Client(manifold.url, mode="legacy", message_handler=collect("subscriber")) as subscriber,
        Client(manifold.url, mode="legacy", message_handler=collect("other")) as other,
    ):
        await subscriber.subscribe_resource("note://r1/static")
        await other.call_tool("r1.touch", {"uri": "note://r1/static"})
        with anyio.fail_after(10):
            await subscriber_told.wait()
    assert updates == {"subscriber": ["note://r1/static"], "other": []}


async def test_a_session_that_ends_releases_its_subscription_at_the_server(
    manifold: RunningManifold,
) -> None:
    async with Client(manifold.url, mode="legacy") as observer:
        async with Client(manifold.url, mode="legacy") as subscriber:
            await subscriber.subscribe_resource("note://r2/static")
            told = await observer.call_tool("r2.touch", {"uri": "note://r2/static"})
            assert _text(told) == "touched note://r2/static: told its subscriber"
        # The subscriber's client closed its session (DELETE): nobody wants the URI any more.
        told = await observer.call_tool("r2.touch", {"uri": "note://r2/static"})
        assert _text(told) == "touched note://r2/static: nobody subscribed"


async def test_each_per_client_session_subscribes_on_its_own_connection(manifold: RunningManifold) -> None:
    """r3 runs one process per session: a URI another session subscribed to is no reason to
    skip this session's own process."""
    updated = anyio.Event()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/resources/updated":
            updated.set()

    async with (
        Client(manifold.url, mode="legacy") as first,
        Client(manifold.url, mode="legacy", message_handler=on_message) as second,
    ):
        await first.subscribe_resource("note://r3/static")
        await second.subscribe_resource("note://r3/static")
        told = await second.call_tool("r3.touch", {"uri": "note://r3/static"})
        assert _text(told) == "touched note://r3/static: told its subscriber"
        with anyio.fail_after(10):
            await updated.wait()
        await second.unsubscribe_resource("note://r3/static")
        told = await second.call_tool("r3.touch", {"uri": "note://r3/static"})
        assert _text(told) == "touched note://r3/static: nobody subscribed"
        told = await first.call_tool("r3.touch", {"uri": "note://r3/static"})
        assert _text(told) == "touched note://r3/static: told its subscriber"


async def test_a_per_client_session_hears_its_own_process_not_the_shared_one(
    manifold: RunningManifold,
) -> None:
    """A 2026-07-28 caller's listen stream watches r3's resource on its identity's own process,
    where its calls go too; a per_client session subscribed to the same URI on its own process
    hears only that process."""
    heard: list[str] = []
    marker_heard = anyio.Event()
    uri, marker = "note://r3/static", "note://r3/marker"

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/resources/updated":
            heard.append(str(message.params.uri))
            if heard[-1] == marker:
                marker_heard.set()

    async with (
        Client(manifold.url, mode="legacy", message_handler=on_message) as session,
        Client(manifold.url, mode=versions.LATEST_STATELESS, cache=None) as stateless,
        stateless.listen(resource_subscriptions=[uri]) as stream,
    ):
        await session.subscribe_resource(uri)
        await session.subscribe_resource(marker)
        told = await stateless.call_tool("r3.touch", {"uri": uri})  # its identity's own process
        assert _text(told) == f"touched {uri}: told its subscriber"
        with anyio.fail_after(10):
            assert await anext(stream) == ResourceUpdated(uri=uri)
        # Then the session's own process tells of the marker: the session's notifications come in
        # order, so anything another process' update sent it would be in before the marker.
        await session.call_tool("r3.touch", {"uri": marker})
        with anyio.fail_after(10):
            await marker_heard.wait()
    assert heard == [marker]
