"""The MCP server the official conformance suite expects, built on the official SDK.

    python tests/conformance/fixture_server.py --port N            # Streamable HTTP, 127.0.0.1:N/mcp
    python tests/conformance/fixture_server.py --transport stdio   # for Manifold to front

It offers exactly what the server scenarios of ``@modelcontextprotocol/conformance`` 0.1.16 call
(see README.md in this folder for the scenario → feature table):

- tools ``test_simple_text``, ``test_image_content``, ``test_audio_content``,
  ``test_embedded_resource``, ``test_multiple_content_types``, ``test_tool_with_logging`` (three
  ``notifications/message`` at ``info``, 50 ms apart), ``test_tool_with_progress`` (progress
  0, 50, 100 of 100, 50 ms apart), ``test_error_handling`` (``isError: true``), ``test_sampling``
  (``sampling/createMessage``), ``test_elicitation``, ``test_elicitation_sep1034_defaults``,
  ``test_elicitation_sep1330_enums`` (``elicitation/create``), ``json_schema_2020_12_tool``
  (``$schema``/``$defs``/``additionalProperties`` kept verbatim) and ``test_reconnection`` (closes
  its own SSE stream before answering, so the client resumes with ``Last-Event-ID``);
- resources ``test://static-text``, ``test://static-binary``, ``test://watched-resource``
  (subscribable) and the template ``test://template/{id}/data``;
- prompts ``test_simple_prompt``, ``test_prompt_with_arguments``,
  ``test_prompt_with_embedded_resource``, ``test_prompt_with_image``;
- ``completion/complete``, ``logging/setLevel``, ``resources/subscribe``/``unsubscribe``.

The lowlevel ``Server`` is used, not ``MCPServer``: the suite checks raw JSON Schemas (2020-12
keywords, SEP-1330 enum shapes) that must reach the wire exactly as written. Server-to-client
requests and log notifications go through ``ServerSession.send_request``/``send_notification``
rather than the SDK's ``create_message``/``send_log_message`` helpers, which warn that sampling
and logging are deprecated in the 2026-07-28 revision; this fixture speaks 2025-11-25.
HTTP binds to 127.0.0.1 only, with the SDK's DNS-rebinding protection on.
"""

from __future__ import annotations

import argparse
import base64
import io
import itertools
import json
import logging
import socket
import sys
import wave
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import mcp_types as types
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from starlette.requests import Request

__all__ = ["build_server", "main"]

log = logging.getLogger("conformance-fixture")

HOST: Final = "127.0.0.1"
# A 1x1 red PNG.
PNG_BASE64: Final = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
# The spec's JSON-RPC code for an unknown resource in 2025-11-25 (later revisions retire it).
RESOURCE_NOT_FOUND: Final = -32002
LOG_LEVELS: Final[tuple[types.LoggingLevel, ...]] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
Ctx = ServerRequestContext[Any]


def _wav_base64() -> str:
    """A valid 8 kHz mono 16-bit WAV holding one silent sample."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\x00\x00")
    return base64.b64encode(buffer.getvalue()).decode()


WAV_BASE64: Final = _wav_base64()


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _result(*content: types.ContentBlock, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), is_error=is_error)


def _schema(properties: dict[str, Any] | None = None, required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if required:
        schema["required"] = required
    return schema


_STRING = {"type": "string"}

# -- tools ---------------------------------------------------------------------------------------

TOOLS: Final = [
    types.Tool(name="test_simple_text", description="Returns simple text content", input_schema=_schema()),
    types.Tool(name="test_image_content", description="Returns a PNG image", input_schema=_schema()),
    types.Tool(name="test_audio_content", description="Returns a WAV clip", input_schema=_schema()),
    types.Tool(
        name="test_embedded_resource", description="Returns an embedded text resource", input_schema=_schema()
    ),
    types.Tool(
        name="test_multiple_content_types",
        description="Returns text, image and resource content",
        input_schema=_schema(),
    ),
    types.Tool(
        name="test_tool_with_logging",
        description="Sends three log notifications while it runs",
        input_schema=_schema(),
    ),
    types.Tool(
        name="test_tool_with_progress",
        description="Reports progress 0, 50 and 100 of 100",
        input_schema=_schema(),
    ),
    types.Tool(name="test_error_handling", description="Always fails with isError", input_schema=_schema()),
    types.Tool(
        name="test_sampling",
        description="Asks the client's LLM (sampling/createMessage)",
        input_schema=_schema({"prompt": {**_STRING, "description": "The prompt to send"}}, ["prompt"]),
    ),
    types.Tool(
        name="test_elicitation",
        description="Asks the user (elicitation/create)",
        input_schema=_schema({"message": {**_STRING, "description": "The message to show"}}, ["message"]),
    ),
    types.Tool(
        name="test_elicitation_sep1034_defaults",
        description="Elicitation with defaults for every primitive type (SEP-1034)",
        input_schema=_schema(),
    ),
    types.Tool(
        name="test_elicitation_sep1330_enums",
        description="Elicitation with the five enum schema shapes (SEP-1330)",
        input_schema=_schema(),
    ),
    types.Tool(
        name="json_schema_2020_12_tool",
        description="Tool with JSON Schema 2020-12 features",
        input_schema={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "type": "object",
                    "properties": {"street": _STRING, "city": _STRING},
                }
            },
            "properties": {"name": _STRING, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="test_reconnection",
        description="Closes its own SSE stream before answering (SEP-1699)",
        input_schema=_schema(),
    ),
]

SEP1034_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
}

SEP1330_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}

ELICITATION_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}

# -- resources and prompts -----------------------------------------------------------------------

STATIC_TEXT: Final = "This is the content of the static text resource."
RESOURCES: Final = [
    types.Resource(
        uri="test://static-text",
        name="static-text",
        description="A static text resource",
        mime_type="text/plain",
    ),
    types.Resource(
        uri="test://static-binary",
        name="static-binary",
        description="A static binary resource (a PNG)",
        mime_type="image/png",
    ),
    types.Resource(
        uri="test://watched-resource",
        name="watched-resource",
        description="A resource clients can subscribe to",
        mime_type="text/plain",
    ),
]
TEMPLATE_PREFIX: Final = "test://template/"
TEMPLATE_SUFFIX: Final = "/data"
TEMPLATES: Final = [
    types.ResourceTemplate(
        uri_template="test://template/{id}/data",
        name="template-data",
        description="Data for one id; the id is substituted into the content",
        mime_type="application/json",
    )
]

PROMPTS: Final = [
    types.Prompt(name="test_simple_prompt", description="A prompt without arguments"),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two required arguments",
        arguments=[
            types.PromptArgument(name="arg1", description="First test argument", required=True),
            types.PromptArgument(name="arg2", description="Second test argument", required=True),
        ],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt embedding a resource",
        arguments=[types.PromptArgument(name="resourceUri", description="URI to embed", required=True)],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt with an image"),
]
ARG1_COMPLETIONS: Final = ("paris", "park", "party", "test", "testing", "tested")


def _user(content: types.ContentBlock) -> types.PromptMessage:
    return types.PromptMessage(role="user", content=content)


@dataclass
class State:
    """What the fixture remembers: per-connection log levels and resource subscriptions."""

    log_levels: dict[str, types.LoggingLevel] = field(default_factory=dict)
    subscriptions: dict[str, set[str]] = field(default_factory=dict)


def _connection_key(ctx: Ctx) -> str:
    """The HTTP session id, or "" on stdio (one connection per process)."""
    if isinstance(ctx.request, Request):
        return ctx.request.headers.get("mcp-session-id", "")
    return ""


async def _log(state: State, ctx: Ctx, level: types.LoggingLevel, message: str) -> None:
    """Send ``notifications/message`` on the request's own stream, honouring ``logging/setLevel``."""
    threshold = state.log_levels.get(_connection_key(ctx), "debug")
    if LOG_LEVELS.index(level) < LOG_LEVELS.index(threshold):
        return
    notification = types.LoggingMessageNotification(
        params=types.LoggingMessageNotificationParams(level=level, data=message, logger="conformance-fixture")
    )
    await ctx.session.send_notification(notification, related_request_id=ctx.request_id)


def _client_can(ctx: Ctx, capability: types.ClientCapabilities) -> bool:
    return ctx.session.check_client_capability(capability)


async def _elicit(ctx: Ctx, message: str, schema: dict[str, Any]) -> types.ElicitResult:
    request = types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    return await ctx.session.send_request(request, types.ElicitResult, metadata=metadata)


def _elicitation_text(prefix: str, result: types.ElicitResult) -> str:
    return f"{prefix}: action={result.action}, content={json.dumps(result.content or {})}"


ToolHandler = Callable[[State, Ctx, dict[str, Any]], Awaitable[types.CallToolResult]]


async def _simple_text(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    return _result(_text("This is a simple text response for testing."))


async def _image(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    return _result(types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png"))


async def _audio(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    return _result(types.AudioContent(type="audio", data=WAV_BASE64, mime_type="audio/wav"))


async def _embedded(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    resource = types.TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return _result(types.EmbeddedResource(type="resource", resource=resource))


async def _mixed(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    resource = types.TextResourceContents(
        uri="test://mixed-content-resource", mime_type="application/json", text='{"test":"data","value":123}'
    )
    return _result(
        _text("Multiple content types test:"),
        types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png"),
        types.EmbeddedResource(type="resource", resource=resource),
    )


async def _with_logging(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    await _log(state, ctx, "info", "Tool execution started")
    await anyio.sleep(0.05)
    await _log(state, ctx, "info", "Tool processing data")
    await anyio.sleep(0.05)
    await _log(state, ctx, "info", "Tool execution completed")
    return _result(_text("Tool with logging executed successfully"))


async def _with_progress(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    # report_progress is a no-op when the request carried no progressToken.
    await ctx.session.report_progress(0, 100, "started")
    await anyio.sleep(0.05)
    await ctx.session.report_progress(50, 100, "half way")
    await anyio.sleep(0.05)
    await ctx.session.report_progress(100, 100, "done")
    token = ctx.meta.get("progress_token") if ctx.meta else None
    return _result(_text(f"Tool with progress executed successfully (progressToken={token})"))


async def _error(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    return _result(_text("This tool intentionally returns an error for testing"), is_error=True)


async def _sampling(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    if not _client_can(ctx, types.ClientCapabilities(sampling=types.SamplingCapability())):
        return _result(_text("The client does not support sampling"), is_error=True)
    request = types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=_text(str(args.get("prompt", ""))))],
            max_tokens=100,
        )
    )
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    answer = await ctx.session.send_request(request, types.CreateMessageResult, metadata=metadata)
    content = answer.content
    text = content.text if isinstance(content, types.TextContent) else f"<{content.type} content>"
    return _result(_text(f"LLM response: {text}"))


async def _elicitation(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    if not _client_can(ctx, types.ClientCapabilities(elicitation=types.ElicitationCapability())):
        return _result(_text("The client does not support elicitation"), is_error=True)
    answer = await _elicit(ctx, str(args.get("message", "")), ELICITATION_SCHEMA)
    return _result(_text(_elicitation_text("User response", answer)))


async def _sep1034(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    answer = await _elicit(ctx, "Please review and update the form fields with defaults", SEP1034_SCHEMA)
    return _result(_text(_elicitation_text("Elicitation completed", answer)))


async def _sep1330(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    answer = await _elicit(ctx, "Please select options from the enum fields", SEP1330_SCHEMA)
    return _result(_text(_elicitation_text("Elicitation completed", answer)))


async def _json_schema(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    return _result(_text(f"Received: {json.dumps(args, sort_keys=True)}"))


async def _reconnection(state: State, ctx: Ctx, args: dict[str, Any]) -> types.CallToolResult:
    # Offered by the SDK only on Streamable HTTP with an event store and a 2025-11-25 client;
    # the answer below is then stored and replayed when the client resumes with Last-Event-ID.
    if ctx.close_sse_stream is not None:
        await ctx.close_sse_stream()
    return _result(_text("Reconnection test completed successfully"))


TOOL_HANDLERS: Final[dict[str, ToolHandler]] = {
    "test_simple_text": _simple_text,
    "test_image_content": _image,
    "test_audio_content": _audio,
    "test_embedded_resource": _embedded,
    "test_multiple_content_types": _mixed,
    "test_tool_with_logging": _with_logging,
    "test_tool_with_progress": _with_progress,
    "test_error_handling": _error,
    "test_sampling": _sampling,
    "test_elicitation": _elicitation,
    "test_elicitation_sep1034_defaults": _sep1034,
    "test_elicitation_sep1330_enums": _sep1330,
    "json_schema_2020_12_tool": _json_schema,
    "test_reconnection": _reconnection,
}
assert set(TOOL_HANDLERS) == {tool.name for tool in TOOLS}


def _read(uri: str) -> types.TextResourceContents | types.BlobResourceContents:
    """Raises: MCPError (-32002) for an unknown URI."""
    if uri == "test://static-text":
        return types.TextResourceContents(uri=uri, mime_type="text/plain", text=STATIC_TEXT)
    if uri == "test://static-binary":
        return types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG_BASE64)
    if uri == "test://watched-resource":
        return types.TextResourceContents(uri=uri, mime_type="text/plain", text="Watched resource content")
    if uri.startswith(TEMPLATE_PREFIX) and uri.endswith(TEMPLATE_SUFFIX):
        item_id = uri[len(TEMPLATE_PREFIX) : -len(TEMPLATE_SUFFIX)]
        if item_id and "/" not in item_id:
            text = json.dumps({"id": item_id, "templateTest": True, "data": f"Data for ID: {item_id}"})
            return types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
    raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}", {"uri": uri})


def _prompt(name: str, args: dict[str, str]) -> types.GetPromptResult:
    """Raises: MCPError (-32602) for an unknown prompt or a missing argument."""
    if name == "test_simple_prompt":
        return types.GetPromptResult(messages=[_user(_text("This is a simple prompt for testing."))])
    if name == "test_prompt_with_arguments":
        missing = [a for a in ("arg1", "arg2") if a not in args]
        if missing:
            raise MCPError(types.INVALID_PARAMS, f"Missing required arguments: {', '.join(missing)}")
        text = f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'"
        return types.GetPromptResult(messages=[_user(_text(text))])
    if name == "test_prompt_with_embedded_resource":
        if "resourceUri" not in args:
            raise MCPError(types.INVALID_PARAMS, "Missing required argument: resourceUri")
        resource = types.TextResourceContents(
            uri=args["resourceUri"], mime_type="text/plain", text="Embedded resource content for testing."
        )
        return types.GetPromptResult(
            messages=[
                _user(types.EmbeddedResource(type="resource", resource=resource)),
                _user(_text("Please process the embedded resource above.")),
            ]
        )
    if name == "test_prompt_with_image":
        return types.GetPromptResult(
            messages=[
                _user(types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")),
                _user(_text("Please analyze the image above.")),
            ]
        )
    raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {name}")


def build_server(state: State | None = None) -> Server[Any]:
    """The fixture as an SDK ``Server``; ``state`` is shared by every connection."""
    st = state if state is not None else State()

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        handler = TOOL_HANDLERS.get(params.name)
        if handler is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        return await handler(st, ctx, dict(params.arguments or {}))

    async def list_resources(
        ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=RESOURCES)

    async def list_templates(
        ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=TEMPLATES)

    async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return types.ReadResourceResult(contents=[_read(str(params.uri))])

    async def subscribe(ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        st.subscriptions.setdefault(_connection_key(ctx), set()).add(str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        st.subscriptions.get(_connection_key(ctx), set()).discard(str(params.uri))
        return types.EmptyResult()

    async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=PROMPTS)

    async def get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        return _prompt(params.name, dict(params.arguments or {}))

    async def complete(ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        values: list[str] = []
        ref, argument = params.ref, params.argument
        if isinstance(ref, types.PromptReference) and (ref.name, argument.name) == (
            "test_prompt_with_arguments",
            "arg1",
        ):
            values = [v for v in ARG1_COMPLETIONS if v.startswith(argument.value)]
        return types.CompleteResult(
            completion=types.Completion(values=values, total=len(values), has_more=False)
        )

    async def set_level(ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        st.log_levels[_connection_key(ctx)] = params.level
        return types.EmptyResult()

    server: Server[Any] = Server(
        "manifold-conformance-fixture",
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
    )
    # Registered here rather than as on_set_logging_level, which warns that logging is
    # deprecated in 2026-07-28; the capability is still derived from the handler.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    return server


class MemoryEventStore(EventStore):
    """Keeps every event so a client can resume a stream with ``Last-Event-ID`` (SEP-1699)."""

    def __init__(self) -> None:
        self._events: list[tuple[EventId, StreamId, types.JSONRPCMessage | None]] = []
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: types.JSONRPCMessage | None) -> EventId:
        event_id = str(next(self._ids))
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        position = next((i for i, (eid, _, _) in enumerate(self._events) if eid == last_event_id), None)
        if position is None:
            return None
        stream_id = self._events[position][1]
        for event_id, sid, message in self._events[position + 1 :]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


async def _serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def _serve_http(server: Server[Any], port: int) -> None:
    app = server.streamable_http_app(event_store=MemoryEventStore(), retry_interval=100, host=HOST)
    # Bound here, not by uvicorn, so `--port 0` works and the printed URL is exact: a runner may
    # connect as soon as it reads the line (the backlog holds connections until uvicorn accepts).
    sock = socket.create_server((HOST, port))
    print(f"conformance fixture listening on http://{HOST}:{sock.getsockname()[1]}/mcp", file=sys.stderr)
    sys.stderr.flush()
    # A short graceful-shutdown bound: open SSE streams would otherwise hold SIGTERM up.
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="MCP conformance fixture server (official SDK)")
    parser.add_argument("--transport", choices=["streamable-http", "stdio"], default="streamable-http")
    parser.add_argument(
        "--port", type=int, default=3001, help="streamable-http: port on 127.0.0.1 (0: any free one)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = build_server()
    if args.transport == "stdio":
        anyio.run(_serve_stdio, server)
    else:
        anyio.run(_serve_http, server, args.port)


if __name__ == "__main__":
    main()
