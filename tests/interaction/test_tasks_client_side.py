"""Tasks the other way round, end to end: ``server-everything``'s ``trigger-elicitation-request-async``
and ``trigger-sampling-request-async`` through a real ``manifold serve`` (Streamable HTTP) and
``manifold stdio``, driven by the official Python SDK client (an elicitation and a sampling
callback) and by the TypeScript SDK client (``tests/npm/tasks_driver.mjs``).

Manifold declares ``tasks.requests.{elicitation.create,sampling.createMessage}`` to the server, so
it lists the two tools; their task-augmented request is answered by Manifold with a task of its
own, the client is asked plainly, and the server's ``tasks/get`` and ``tasks/result`` are answered
from what the client said. Both answers must come back to the caller in the tool's result.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp.types as t
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.tasks_driver import drive_tasks
from tests.interaction.harness import everything_server, running_manifold, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ELICIT = "everything.trigger-elicitation-request-async"
SAMPLE = "everything.trigger-sampling-request-async"


class Asked:
    """The Python SDK client's callbacks: what the server's requests looked like on arrival."""

    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []

    async def elicit(self, context: Any, params: t.ElicitRequestParams) -> t.ElicitResult:
        self.params.append(params.model_dump(by_alias=True, exclude_none=True))
        return t.ElicitResult(action="accept", content={"name": "Grace", "favoriteColor": "Green"})

    async def sample(self, context: Any, params: t.CreateMessageRequestParams) -> t.CreateMessageResult:
        self.params.append(params.model_dump(by_alias=True, exclude_none=True))
        text = params.messages[0].content
        said = text.text if isinstance(text, t.TextContent) else "?"
        return t.CreateMessageResult(
            role="assistant", content=t.TextContent(type="text", text=f"echoed: {said}"), model="py-fixed"
        )


def _text(result: t.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, t.TextContent))


@asynccontextmanager
async def http_client(url: str, asked: Asked) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120)) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="legacy",
            elicitation_callback=asked.elicit,
            sampling_callback=asked.sample,
        ) as client,
    ):
        yield client


@asynccontextmanager
async def everything_behind(transport: str, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """Where a client reaches server-everything through Manifold: ``{"url": …}`` (a running
    ``manifold serve``) or ``{"stdio": […]}`` (the ``manifold stdio`` command to spawn)."""
    config = {"servers": {"everything": everything_server()}}
    if transport == "http":
        async with running_manifold(tmp_path, config) as manifold:
            yield {"url": manifold.url}
    else:
        path = write_config(tmp_path / "m.yaml", config)
        yield {"stdio": [sys.executable, "-m", "proxy.cli", "stdio", "--config", str(path)]}


@asynccontextmanager
async def python_client(where: dict[str, Any], asked: Asked) -> AsyncIterator[Client]:
    if "url" in where:
        async with http_client(where["url"], asked) as client:
            yield client
        return
    command, *args = where["stdio"]
    server = StdioServerParameters(command=command, args=args)
    async with Client(
        server, mode="legacy", elicitation_callback=asked.elicit, sampling_callback=asked.sample
    ) as client:
        yield client


TRANSPORTS = pytest.mark.parametrize("transport", ["http", "stdio"])


async def _both_tools_answer(client: Client, asked: Asked) -> None:
    names = {tool.name for tool in (await client.list_tools()).tools}
    assert {ELICIT, SAMPLE} <= names, sorted(names)

    elicited = _text(await client.call_tool(ELICIT, {}))
    assert "[COMPLETED] User provided the requested information!" in elicited, elicited
    assert "- Name: Grace" in elicited, elicited
    assert "- Favorite Color: Green" in elicited, elicited

    sampled = _text(await client.call_tool(SAMPLE, {"prompt": "tides", "maxTokens": 10}))
    assert "[COMPLETED] Async sampling completed!" in sampled, sampled
    assert "echoed: Resource trigger-sampling-request-async context: tides" in sampled, sampled
    # The client was asked plainly: it declared no tasks, so no task reached it.
    assert len(asked.params) == 2
    assert all("task" not in params for params in asked.params), asked.params


GUARDED = """\
version: 1
default: allow
guardrails:
  words:
    forbidden: [zebra]
  rules:
    - id: no-zebras-to-the-model
      effect: deny
      match: {directions: [sampling_requests], detectors: ["custom:forbidden"]}
    - id: no-keys-back-to-servers
      effect: redact
      match: {directions: [sampling_results], detectors: [aws_access_key]}
"""
AWS_KEY = "AKIAQ3EGRT5VXMPL7ZQW"


class Leaky(Asked):
    """A model that answers with a credential in its text."""

    async def sample(self, context: Any, params: t.CreateMessageRequestParams) -> t.CreateMessageResult:
        self.params.append(params.model_dump(by_alias=True, exclude_none=True))
        return t.CreateMessageResult(
            role="assistant", content=t.TextContent(type="text", text=f"use {AWS_KEY}"), model="leaky"
        )


async def test_guardrails_apply_to_a_held_tasks_question_and_answer(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(GUARDED)
    config = {
        "servers": {"everything": everything_server()},
        "policy": {"files": [str(tmp_path / "policy.yaml")], "pins": {"mode": "off"}},
    }
    async with running_manifold(tmp_path, config) as manifold:
        asked = Leaky()
        async with http_client(manifold.url, asked) as client:
            redacted = _text(await client.call_tool(SAMPLE, {"prompt": "tides", "maxTokens": 10}))
            assert "[COMPLETED]" in redacted, redacted
            assert AWS_KEY not in redacted, redacted
            assert "[REDACTED:aws_access_key]" in redacted, redacted
            assert len(asked.params) == 1

            denied = _text(await client.call_tool(SAMPLE, {"prompt": "a zebra", "maxTokens": 10}))
            assert "[FAILED]" in denied, denied
            assert "no-zebras-to-the-model" in denied, denied
            assert len(asked.params) == 1  # the client was never asked


ASYNC = ("elicitation_async", "sampling_async")


def _driver_saw_both(report: dict[str, Any]) -> None:
    s = report["scenarios"]
    elicited = "\n".join(s["elicitation_async"]["result"]["texts"])
    assert "[COMPLETED]" in elicited, s["elicitation_async"]
    assert "- Name: Ada" in elicited, s["elicitation_async"]
    sampled = "\n".join(s["sampling_async"]["result"]["texts"])
    assert "[COMPLETED]" in sampled, s["sampling_async"]
    assert "a fixed sampled answer" in sampled, s["sampling_async"]
    # Asked plainly: Manifold held the task; the client's own task store was not used.
    asked = [(r["method"], r["task"]) for r in report["requests"]]
    assert asked == [("elicitation/create", False), ("sampling/createMessage", False)], asked


@TRANSPORTS
async def test_the_python_sdk_client_answers_both_async_tools(transport: str, tmp_path: Path) -> None:
    asked = Asked()
    async with everything_behind(transport, tmp_path) as where, python_client(where, asked) as client:
        await _both_tools_answer(client, asked)


@TRANSPORTS
async def test_the_typescript_sdk_client_answers_both_async_tools(transport: str, tmp_path: Path) -> None:
    async with everything_behind(transport, tmp_path) as where:
        _driver_saw_both(await drive_tasks(**where, prefix="everything.", only=ASYNC))
