"""The MCP server the conformance suite 0.2 expects, for both protocol eras, on the official SDK.

    python -m tests.conformance_modern.fixture_server --port N            # Streamable HTTP, 127.0.0.1:N/mcp
    python -m tests.conformance_modern.fixture_server --transport stdio   # for Manifold to front
    ... --era legacy    # refuse the 2026-07-28 wire: only the initialize handshake (2024-11-05 … 2025-11-25)

Run it from the repository root (it imports ``tests.conformance.fixture_server``, the 0.1 fixture,
and extends it). By default it is *dual-era*, as the SDK's ``Server`` is: a request carrying the
2026-07-28 ``_meta`` envelope is served statelessly, ``initialize`` selects the handshake era. What
it adds to the 0.1 fixture, for the 2026-07-28 server scenarios (see README.md in this folder):

- the SEP-2322 multi round-trip tools ``test_input_required_result_{elicitation,sampling,list_roots,
  request_state,multiple_inputs,multi_round,tampered_state,capabilities}`` and the prompt
  ``test_input_required_result_prompt``. On the modern wire they answer ``input_required`` and
  complete on the retry carrying ``inputResponses`` (and an HMAC-sealed ``requestState`` where the
  scenario wants one); on a handshake connection they ask the client with real
  ``elicitation/create`` / ``sampling/createMessage`` / ``roots/list`` requests and then complete,
  so a gateway in front can bridge the two;
- the SEP-2575 diagnostic tools ``test_missing_capability`` (-32021 unless the client declared
  ``sampling``), ``test_streaming_elicitation``, ``test_logging_tool`` (logs only when the request
  opted in with ``io.modelcontextprotocol/logLevel``), ``test_trigger_tool_change`` and
  ``test_trigger_prompt_change`` (toggle ``test_dynamic_tool`` / ``test_dynamic_prompt`` and
  announce it: on ``subscriptions/listen`` streams, and as a list_changed notification to a
  handshake-era caller);
- the 0.1 fixture's interactive tools (``test_sampling``, ``test_elicitation``,
  ``test_elicitation_sep1034_defaults``, ``test_elicitation_sep1330_enums``) and
  ``test_tool_with_logging`` on the modern wire too (``input_required`` and per-request log
  levels), so that a gateway reaching this fixture as a 2026-07-28 server can still pass the
  2025-11-25 scenarios by bridging;
- ``subscriptions/listen`` (the SDK's ``ListenHandler``), caching hints on every cacheable list,
  ``-32602`` for an unknown resource on the modern wire (SEP-2164), a tool with an
  ``x-mcp-header`` parameter (``test_custom_headers``) and the SEP-2106 schema for
  ``json_schema_2020_12_tool``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import logging
import secrets
import socket
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import mcp_types as types
import uvicorn
from mcp.server import Server
from mcp.server.caching import CacheHint, validate_cache_hints
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from tests.conformance import fixture_server as legacy

__all__ = ["build_server", "main"]

log = logging.getLogger("conformance-fixture-modern")

HOST: Final = legacy.HOST
Ctx = legacy.Ctx
LOG_LEVEL_META_KEY: Final = "io.modelcontextprotocol/logLevel"
MISSING_REQUIRED_CLIENT_CAPABILITY: Final = -32021
STATE_TTL: Final = 600.0  # seconds a sealed requestState stays good

# What each input-request method needs the client to have declared.
NEEDS: Final = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
CAPABILITY_PROBES: Final = {
    "elicitation": types.ClientCapabilities(elicitation=types.ElicitationCapability()),
    "sampling": types.ClientCapabilities(sampling=types.SamplingCapability()),
    "roots": types.ClientCapabilities(roots=types.RootsCapability()),
}
REQUEST_MODELS: Final[dict[str, tuple[type[BaseModel], type[BaseModel]]]] = {
    "elicitation/create": (types.ElicitRequest, types.ElicitResult),
    "sampling/createMessage": (types.CreateMessageRequest, types.CreateMessageResult),
    "roots/list": (types.ListRootsRequest, types.ListRootsResult),
}


def _elicit(message: str, properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": schema}}


def _sample(text: str, max_tokens: int) -> dict[str, Any]:
    message = {"role": "user", "content": {"type": "text", "text": text}}
    return {"method": "sampling/createMessage", "params": {"messages": [message], "maxTokens": max_tokens}}


ROOTS: Final = {"method": "roots/list", "params": {}}
_STRING: Final = {"type": "string"}

# -- multi round-trip plans -----------------------------------------------------------------------

Answers = dict[str, Any]
Round = dict[str, dict[str, Any]]  # input-request key -> {"method", "params"}


def _content(answers: Answers, key: str) -> dict[str, Any]:
    content = (answers.get(key) or {}).get("content")
    return content if isinstance(content, dict) else {}


def _sampled_text(answers: Answers, key: str) -> str:
    content = (answers.get(key) or {}).get("content")
    blocks = content if isinstance(content, list) else [content]
    return " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))


def _roots(answers: Answers, key: str) -> str:
    roots = (answers.get(key) or {}).get("roots") or []
    return ", ".join(str(r.get("uri")) for r in roots if isinstance(r, dict)) or "(none)"


@dataclass(frozen=True)
class Plan:
    """One multi round-trip tool: the rounds of input it asks for, and its answer once it has them all."""

    rounds: tuple[Round, ...]
    finish: Callable[[Answers], str]
    sealed: bool = False  # carry an HMAC-sealed requestState from round to round


PLANS: Final[dict[str, Plan]] = {
    "test_input_required_result_elicitation": Plan(
        ({"user_name": _elicit("What is your name?", {"name": _STRING})},),
        lambda a: f"Hello, {_content(a, 'user_name').get('name', 'stranger')}!",
    ),
    "test_input_required_result_sampling": Plan(
        ({"capital_question": _sample("What is the capital of France?", 100)},),
        lambda a: f"LLM response: {_sampled_text(a, 'capital_question')}",
    ),
    "test_input_required_result_list_roots": Plan(
        ({"client_roots": ROOTS},),
        lambda a: f"Client roots: {_roots(a, 'client_roots')}",
    ),
    "test_input_required_result_request_state": Plan(
        ({"confirm": _elicit("Please confirm", {"ok": {"type": "boolean"}})},),
        lambda a: f"state-ok: confirmed={_content(a, 'confirm').get('ok')}",
        sealed=True,
    ),
    "test_input_required_result_multiple_inputs": Plan(
        (
            {
                "user_name": _elicit("What is your name?", {"name": _STRING}),
                "greeting": _sample("Generate a greeting", 50),
                "client_roots": ROOTS,
            },
        ),
        lambda a: (
            f"name={_content(a, 'user_name').get('name')}, greeting={_sampled_text(a, 'greeting')}, "
            f"roots={_roots(a, 'client_roots')}"
        ),
        sealed=True,
    ),
    "test_input_required_result_multi_round": Plan(
        (
            {"step1": _elicit("Step 1: What is your name?", {"name": _STRING})},
            {"step2": _elicit("Step 2: What is your favorite color?", {"color": _STRING})},
        ),
        lambda a: f"{_content(a, 'step1').get('name')} likes {_content(a, 'step2').get('color')}",
        sealed=True,
    ),
    "test_input_required_result_tampered_state": Plan(
        ({"confirm": _elicit("Please confirm", {"ok": {"type": "boolean"}})},),
        lambda a: "state-ok",
        sealed=True,
    ),
    "test_streaming_elicitation": Plan(
        ({"user_name": _elicit("Streaming elicitation: what is your name?", {"name": _STRING})},),
        lambda a: f"Hello, {_content(a, 'user_name').get('name', 'stranger')}!",
    ),
    # Not a tool: prompts/get (SEP-2322 on a request other than tools/call).
    "test_input_required_result_prompt": Plan(
        ({"user_context": _elicit("What context should the prompt use?", {"context": _STRING})},),
        lambda a: f"Use this context: {_content(a, 'user_context').get('context')}",
    ),
}
PROMPT_PLAN: Final = "test_input_required_result_prompt"
# Asks for what the client declared, and only that (sampling, elicitation, roots).
CAPABILITIES_TOOL: Final = "test_input_required_result_capabilities"
CAPABILITY_REQUESTS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "sampling": ("capital_question", _sample("What is the capital of France?", 100)),
    "elicitation": ("user_name", _elicit("What is your name?", {"name": _STRING})),
    "roots": ("client_roots", ROOTS),
}


def _elicitation_text(prefix: str, answers: Answers) -> str:
    answer = answers.get("form") or {}
    return f"{prefix}: action={answer.get('action')}, content={json.dumps(answer.get('content') or {})}"


def _form(message: str, schema: dict[str, Any]) -> Round:
    return {
        "form": {"method": "elicitation/create", "params": {"message": message, "requestedSchema": schema}}
    }


def legacy_tool_plan(name: str, arguments: dict[str, Any]) -> Plan | None:
    """The 0.1 fixture's interactive tools, as multi round-trip plans for the modern wire.

    Same questions, same answer text: a gateway that reaches this fixture on 2026-07-28 turns the
    ``input_required`` back into real requests to its handshake-era client (the 2025-11-25 scenarios
    tools-call-sampling, tools-call-elicitation, elicitation-sep1034-defaults, -sep1330-enums).
    """
    if name == "test_sampling":
        ask = {"sampling": _sample(str(arguments.get("prompt", "")), 100)}
        return Plan((ask,), lambda a: f"LLM response: {_sampled_text(a, 'sampling')}")
    if name == "test_elicitation":
        form = _form(str(arguments.get("message", "")), legacy.ELICITATION_SCHEMA)
        return Plan((form,), lambda a: _elicitation_text("User response", a))
    if name == "test_elicitation_sep1034_defaults":
        form = _form("Please review and update the form fields with defaults", legacy.SEP1034_SCHEMA)
        return Plan((form,), lambda a: _elicitation_text("Elicitation completed", a))
    if name == "test_elicitation_sep1330_enums":
        form = _form("Please select options from the enum fields", legacy.SEP1330_SCHEMA)
        return Plan((form,), lambda a: _elicitation_text("Elicitation completed", a))
    return None


class StateSeal:
    """``requestState`` the client cannot forge: an HMAC over the tool, the round, the answers so far
    and an expiry. Anything that fails the check is refused with -32602."""

    def __init__(self, key: bytes | None = None, clock: Callable[[], float] = time.time) -> None:
        self._key = key or secrets.token_bytes(32)
        self._clock = clock

    def seal(self, tool: str, round_index: int, answers: Answers) -> str:
        body = {"t": tool, "r": round_index, "a": answers, "x": int(self._clock() + STATE_TTL)}
        payload = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        mac = hmac.new(self._key, payload, hashlib.sha256).digest()
        return f"{_b64(payload)}.{_b64(mac)}"

    def open(self, tool: str, token: str) -> tuple[int, Answers]:
        """Raises: MCPError (-32602) when the token is malformed, forged, expired or for another tool."""
        try:
            encoded, _, tag = token.partition(".")
            payload = _unb64(encoded)
            if not hmac.compare_digest(_unb64(tag), hmac.new(self._key, payload, hashlib.sha256).digest()):
                raise ValueError("bad mac")
            body = json.loads(payload)
            if body["t"] != tool or body["x"] < self._clock():
                raise ValueError("wrong tool or expired")
            return int(body["r"]), dict(body["a"])
        except (ValueError, KeyError, TypeError) as exc:
            raise MCPError(types.INVALID_PARAMS, "requestState failed its integrity check") from exc


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _modern(ctx: Ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _client_can(ctx: Ctx, capability: str) -> bool:
    return ctx.session.check_client_capability(CAPABILITY_PROBES[capability])


def _dump(model: BaseModel) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def _input_required(requests: Round, state: str | None) -> types.InputRequiredResult:
    return types.InputRequiredResult.model_validate(
        {"resultType": "input_required", "inputRequests": requests, "requestState": state}
    )


async def _ask_client(ctx: Ctx, request: dict[str, Any]) -> dict[str, Any]:
    """Handshake era: one real server-to-client request, on the calling request's stream."""
    request_model, result_model = REQUEST_MODELS[request["method"]]
    outgoing: Any = request_model.model_validate(request, by_name=False)
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    answer = await ctx.session.send_request(outgoing, result_model, metadata=metadata)
    return _dump(answer)


@dataclass
class Mrtr:
    """Runs the multi round-trip plans in either era."""

    seal: StateSeal = field(default_factory=StateSeal)

    async def run(self, name: str, plan: Plan, ctx: Ctx, params: types.InputResponseRequestParams) -> Any:
        """The plan's text, or an ``InputRequiredResult`` for the round still unanswered (modern era).

        Raises:
            MCPError: a tampered ``requestState`` (-32602), or a client that refused a request.
        """
        if not _modern(ctx):
            answers: Answers = {}

            async def ask(key: str, request: dict[str, Any]) -> None:
                answers[key] = await _ask_client(ctx, request)

            for requested in plan.rounds:  # a round's questions at once, as a modern round asks them
                async with anyio.create_task_group() as tg:
                    for key, request in requested.items():
                        tg.start_soon(ask, key, request)
            return plan.finish(answers)
        round_index, answers = 0, {}
        if plan.sealed and params.request_state is not None:
            round_index, answers = self.seal.open(name, params.request_state)
        responses = {k: _dump(v) for k, v in (params.input_responses or {}).items()}
        while round_index < len(plan.rounds):
            wanted = plan.rounds[round_index]
            if not all(key in responses for key in wanted):
                # Missing answers are asked for again rather than refused (SEP-2322 SHOULD).
                state = self.seal.seal(name, round_index, answers) if plan.sealed else None
                return _input_required(wanted, state)
            answers |= {key: responses[key] for key in wanted}  # extra keys are ignored
            round_index += 1
            responses = {}  # each round's answers come on their own retry
        return plan.finish(answers)

    async def capabilities(self, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        """Asks only for what the client declared; a refused question is left out (handshake era)."""
        declared = [c for c in CAPABILITY_REQUESTS if _client_can(ctx, c)]
        if not declared:
            return "The client declared none of sampling, elicitation, roots: nothing to ask"
        if not _modern(ctx):
            got = []
            for capability in declared:
                key, request = CAPABILITY_REQUESTS[capability]
                try:
                    await _ask_client(ctx, request)
                    got.append(key)
                except MCPError as exc:
                    log.info("the client refused %s: %s", request["method"], exc)
            return f"Answered: {', '.join(got) or '(nothing)'}"
        wanted = dict(CAPABILITY_REQUESTS[c] for c in declared)
        responses = params.input_responses or {}
        if all(key in responses for key in wanted):
            return f"Answered: {', '.join(sorted(wanted))}"
        return _input_required(wanted, None)


# -- the server ----------------------------------------------------------------------------------

SEP2106_SCHEMA: Final = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": _STRING, "city": _STRING},
        }
    },
    "properties": {
        "name": _STRING,
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": _STRING,
        "email": _STRING,
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


def _tool(name: str, description: str, schema: dict[str, Any] | None = None) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema or legacy._schema())


MODERN_TOOLS: Final = [
    *(_tool(name, f"SEP-2322 multi round-trip test tool ({name})") for name in PLANS if name != PROMPT_PLAN),
    _tool(CAPABILITIES_TOOL, "Asks only for the input kinds the client declared (SEP-2322)"),
    _tool("test_missing_capability", "Needs the client's sampling capability (-32021 without it)"),
    _tool("test_logging_tool", "Logs three lines, only when the request opted in with a logLevel"),
    _tool("test_trigger_tool_change", "Adds or removes test_dynamic_tool and announces the change"),
    _tool("test_trigger_prompt_change", "Adds or removes test_dynamic_prompt and announces the change"),
    _tool(
        "test_custom_headers",
        "Echoes a parameter mirrored into the Mcp-Param-Region header (SEP-2243)",
        legacy._schema({"region": {"type": "string", "description": "A region", "x-mcp-header": "Region"}}),
    ),
]
DYNAMIC_TOOL: Final = _tool("test_dynamic_tool", "Present only between two test_trigger_tool_change calls")
MODERN_PROMPTS: Final = [types.Prompt(name=PROMPT_PLAN, description="A prompt that needs elicited context")]
DYNAMIC_PROMPT: Final = types.Prompt(
    name="test_dynamic_prompt", description="Toggled by test_trigger_prompt_change"
)
LOG_LINES: Final = ("Tool execution started", "Tool processing data", "Tool execution completed")
CACHE_HINTS: Final = {
    "tools/list": CacheHint(ttl_ms=60_000, scope="public"),
    "prompts/list": CacheHint(ttl_ms=60_000, scope="public"),
    "resources/list": CacheHint(ttl_ms=30_000, scope="public"),
    "resources/templates/list": CacheHint(ttl_ms=60_000, scope="public"),
    "resources/read": CacheHint(ttl_ms=5_000, scope="private"),
}


@dataclass
class Toggles:
    tool: bool = False
    prompt: bool = False


async def _modern_log(ctx: Ctx, level: types.LoggingLevel, message: str) -> None:
    """2026-07-28: a log line only for a request that opted in, at or above the level it named."""
    meta = (ctx.params or {}).get("_meta") or {}
    wanted = meta.get(LOG_LEVEL_META_KEY) if isinstance(meta, dict) else None
    if wanted not in legacy.LOG_LEVELS or legacy.LOG_LEVELS.index(level) < legacy.LOG_LEVELS.index(wanted):
        return
    notification = types.LoggingMessageNotification(
        params=types.LoggingMessageNotificationParams(level=level, data=message, logger="conformance-fixture")
    )
    await ctx.session.send_notification(notification, related_request_id=ctx.request_id)


def build_server(state: legacy.State | None = None) -> Server[Any]:
    """The 0.1 fixture with the 2026-07-28 additions; ``state`` is shared by every connection."""
    st = state if state is not None else legacy.State()
    server = legacy.build_server(st)
    server.cache_hints = validate_cache_hints(CACHE_HINTS)
    mrtr = Mrtr()
    toggles = Toggles()
    bus = InMemorySubscriptionBus()
    base_tools = [t for t in legacy.TOOLS if t.name != "json_schema_2020_12_tool"]
    base_tools.append(
        _tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", SEP2106_SCHEMA)
    )

    def handler(method: str) -> Callable[[Ctx, Any], Awaitable[Any]]:
        entry = server.get_request_handler(method)
        assert entry is not None, method
        return entry.handler

    legacy_call, legacy_prompt, legacy_read = (
        handler("tools/call"),
        handler("prompts/get"),
        handler("resources/read"),
    )

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[*base_tools, *MODERN_TOOLS, *([DYNAMIC_TOOL] if toggles.tool else [])]
        )

    async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        dynamic = [DYNAMIC_PROMPT] if toggles.prompt else []
        return types.ListPromptsResult(prompts=[*legacy.PROMPTS, *MODERN_PROMPTS, *dynamic])

    async def changed(ctx: Ctx, kind: str) -> str:
        if kind == "tools":
            toggles.tool = not toggles.tool
            await bus.publish(ToolsListChanged())
            notification: Any = types.ToolListChangedNotification()
        else:
            toggles.prompt = not toggles.prompt
            await bus.publish(PromptsListChanged())
            notification = types.PromptListChangedNotification()
        if not _modern(ctx):
            await ctx.session.send_notification(notification)
        return f"{kind} list changed"

    async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        name = params.name
        if name in PLANS and name != PROMPT_PLAN:
            outcome = await mrtr.run(name, PLANS[name], ctx, params)
        elif name == CAPABILITIES_TOOL:
            outcome = await mrtr.capabilities(ctx, params)
        elif name == "test_missing_capability":
            if not _client_can(ctx, "sampling"):
                data: dict[str, Any] = {"requiredCapabilities": {"sampling": {}}}
                raise MCPError(MISSING_REQUIRED_CLIENT_CAPABILITY, "Missing required client capability", data)
            outcome = await mrtr.run(
                name, Plan(({"answer": _sample("Say hello", 20)},), lambda a: "sampled"), ctx, params
            )
        elif name == "test_logging_tool":
            for line in LOG_LINES:
                if _modern(ctx):
                    await _modern_log(ctx, "info", line)
                else:
                    await legacy._log(st, ctx, "info", line)
            outcome = "Logging tool done"
        elif name in ("test_trigger_tool_change", "test_trigger_prompt_change"):
            outcome = await changed(ctx, "tools" if name == "test_trigger_tool_change" else "prompts")
        elif name == "test_custom_headers":
            outcome = f"region={(params.arguments or {}).get('region')}"
        elif name == "test_dynamic_tool" and toggles.tool:
            outcome = "dynamic tool called"
        elif _modern(ctx) and (plan := legacy_tool_plan(name, dict(params.arguments or {}))) is not None:
            kind = "sampling" if name == "test_sampling" else "elicitation"
            if not _client_can(ctx, kind):
                return legacy._result(legacy._text(f"The client does not support {kind}"), is_error=True)
            outcome = await mrtr.run(name, plan, ctx, params)
        elif _modern(ctx) and name == "test_tool_with_logging":
            for index, line in enumerate(LOG_LINES):
                if index:
                    await anyio.sleep(0.05)
                await _modern_log(ctx, "info", line)
            outcome = "Tool with logging executed successfully"
        else:
            return await legacy_call(ctx, params)
        if isinstance(outcome, str):
            return legacy._result(legacy._text(outcome))
        return outcome

    async def get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> Any:
        if params.name == PROMPT_PLAN:
            outcome = await mrtr.run(params.name, PLANS[params.name], ctx, params)
            if isinstance(outcome, str):
                return types.GetPromptResult(messages=[legacy._user(legacy._text(outcome))])
            return outcome
        if params.name == "test_dynamic_prompt" and toggles.prompt:
            return types.GetPromptResult(messages=[legacy._user(legacy._text("dynamic prompt"))])
        return await legacy_prompt(ctx, params)

    async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> Any:
        try:
            return await legacy_read(ctx, params)
        except MCPError as exc:
            # 2026-07-28 retired -32002: an unknown resource is -32602 with the uri (SEP-2164).
            if exc.error.code != legacy.RESOURCE_NOT_FOUND or not _modern(ctx):
                raise
            raise MCPError(types.INVALID_PARAMS, exc.error.message, {"uri": str(params.uri)}) from exc

    server.add_request_handler("tools/list", types.PaginatedRequestParams, list_tools)
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    server.add_request_handler("prompts/list", types.PaginatedRequestParams, list_prompts)
    server.add_request_handler("prompts/get", types.GetPromptRequestParams, get_prompt)
    server.add_request_handler("resources/read", types.ReadResourceRequestParams, read_resource)
    server.add_request_handler(
        "subscriptions/listen", types.SubscriptionsListenRequestParams, ListenHandler(bus)
    )
    return server


# -- transports ----------------------------------------------------------------------------------

NOTIFICATIONS: Final = NotificationOptions(prompts_changed=True, resources_changed=False, tools_changed=True)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def legacy_only(app: ASGIApp) -> ASGIApp:
    """Answer a 2026-07-28 request as a handshake-only server does: 400, and no modern error in the body."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {bytes(k).lower(): bytes(v).decode("latin-1") for k, v in scope["headers"]}
            version = headers.get(b"mcp-protocol-version")
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                error = {
                    "code": types.INVALID_REQUEST,
                    "message": f"Bad Request: Unsupported protocol version: {version}",
                }
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
                head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 400, "headers": head})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


async def _serve_stdio(server: Server[Any], era: str) -> None:
    options = server.create_initialization_options(NOTIFICATIONS)
    async with stdio_server() as (read_stream, write_stream):
        if era == "dual":
            await server.run(read_stream, write_stream, options)
            return
        # Handshake only: anything before initialize (a server/discover probe) is an error.
        async with server.lifespan(server) as lifespan_state:
            await serve_loop(
                server, read_stream, write_stream, lifespan_state=lifespan_state, init_options=options
            )


async def _serve_http(server: Server[Any], port: int, era: str) -> None:
    app: Any = server.streamable_http_app(
        event_store=legacy.MemoryEventStore(), retry_interval=100, host=HOST
    )
    if era == "legacy":
        app = legacy_only(app)
    sock = socket.create_server((HOST, port))
    print(f"conformance fixture listening on http://{HOST}:{sock.getsockname()[1]}/mcp", file=sys.stderr)
    sys.stderr.flush()
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
    await uvicorn.Server(config).serve(sockets=[sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="MCP conformance fixture server, both eras (official SDK)")
    parser.add_argument("--transport", choices=["streamable-http", "stdio"], default="streamable-http")
    parser.add_argument(
        "--port", type=int, default=3001, help="streamable-http: port on 127.0.0.1 (0: any free one)"
    )
    parser.add_argument(
        "--era",
        choices=["dual", "legacy"],
        default="dual",
        help="dual: serve 2026-07-28 and the handshake revisions (default); legacy: the handshake only",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = build_server()
    if args.transport == "stdio":
        anyio.run(_serve_stdio, server, args.era)
    else:
        anyio.run(_serve_http, server, args.port, args.era)


if __name__ == "__main__":
    main()
