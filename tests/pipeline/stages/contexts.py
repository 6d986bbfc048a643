"""What a middleware stage sees, built in one place: call contexts, a small catalog and its policy.

:func:`call_context` is the only code in these tests that knows how a :class:`CallContext` names
its caller; when that changes, only it changes. The rest builds real objects (an
:class:`~proxy.enforce.access.Access` loaded from a policy file, a catalog merged by the naming codec),
not mocks, so the stages decide exactly as they do in the gateway.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from prometheus_client import CollectorRegistry

from proxy.catalog.merge import Entry, ServerSlice, build_catalog
from proxy.catalog.naming import NamingCodec
from proxy.clients.session import ClientSession, InboundRequest
from proxy.config.model import ServerConfig
from proxy.config.policy import PinSettings, PolicySettings
from proxy.enforce.access import Access, ServedTools
from proxy.pipeline.context import CallContext
from proxy.policy.engine import Subject
from proxy.policy.model import Identity
from proxy.protocol.jsonrpc import RequestId

__all__ = [
    "ALICE",
    "BOB",
    "POLICY",
    "TOOLS",
    "Recorder",
    "access_for",
    "call_context",
    "cancelled_mid_call",
    "identity_of",
    "served_tools",
    "sample",
    "ticks",
    "tool_context",
]

ALICE = Identity("alice", frozenset({"reader"}), "api_key")
BOB = Identity("bob", frozenset({"reader"}), "jwt")

# Server "gh" is trusted, so its declared annotations are the effective ones.
TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": "get_issue",
        "description": "Read one issue",
        "inputSchema": {
            "type": "object",
            "properties": {"number": {"type": "integer"}},
            "required": ["number"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"title": {"type": "string"}},
            "required": ["title"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "create_issue",
        "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}}},
        "annotations": {"readOnlyHint": False, "destructiveHint": False},
    },
    {"name": "delete_repo", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": False}},
    {"name": "secret_dump", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
)

POLICY = """\
version: 1
default: deny
rules:
  - id: readers-read
    effect: allow
    description: readers may use read-only tools
    match: {roles: [reader], annotations: {readOnly: true}}
  - id: readers-prompts-and-docs
    effect: allow
    match: {roles: [reader], prompts: ["*"], resources: ["file:///docs/*"]}
  - id: admins-all
    effect: allow
    match: {roles: [admin]}
  - id: no-deleting
    effect: deny
    description: nobody deletes repositories
    match: {tools: ["gh.delete_*"], prompts: ["gh.delete_*"]}
    show: true
  - id: hide-secrets
    effect: deny
    match: {tools: ["gh.secret_*"], prompts: ["gh.secret_*"], resources: ["file:///docs/secret*"]}
limits:
  - id: per-user
    rate: 1/minute
    burst: 2
    per: [identity]
    match: {servers: [gh]}
    methods: [tools/call, resources/read]
"""


def call_context(
    *,
    identity: Identity = ALICE,
    method: str = "tools/call",
    server_id: str = "gh",
    name: str = "gh.get_issue",
    params: Mapping[str, Any] | None = None,
    entry: Entry | None = None,
    subject: Subject | None = None,
    request_id: RequestId = 7,
) -> CallContext:
    """One request from ``identity``, as the router would hand it to the pipeline."""
    session = ClientSession("session-1", "http", identity=identity)
    return CallContext(
        InboundRequest(session),
        request_id,
        method,
        server_id,
        name,
        {} if params is None else params,
        entry,
        subject,
    )


async def cancelled_mid_call(
    run: Callable[[Callable[[CallContext], Awaitable[Any]]], Awaitable[Any]],
) -> list[str]:
    """Cancel a call while ``call_next`` is under way; what reached the caller of ``run``.

    ``run`` calls the stage under test with the ``call_next`` it is given, which waits forever.
    """
    started = anyio.Event()
    reached_the_caller: list[str] = []

    async def call_next(ctx: CallContext) -> Any:
        started.set()
        await anyio.Event().wait()  # only cancellation ends this

    async def caller() -> None:
        try:
            await run(call_next)
        except anyio.get_cancelled_exc_class():
            reached_the_caller.append("cancelled")
            raise
        reached_the_caller.append("returned")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await started.wait()
            tg.cancel_scope.cancel()
    return reached_the_caller


def identity_of(ctx: CallContext) -> Identity:
    """Who made the request ``ctx`` carries."""
    return ctx.caller.identity


def tool_context(
    served: ServedTools,
    name: str,
    *,
    identity: Identity = ALICE,
    arguments: Mapping[str, Any] | None = None,
) -> CallContext:
    """A ``tools/call`` of the catalog tool ``name``, with its entry and policy subject."""
    entry = served.catalog.by_name[name]
    params: dict[str, Any] = {"name": entry.original_name}
    if arguments is not None:
        params["arguments"] = dict(arguments)
    return call_context(
        identity=identity,
        server_id=entry.server_id,
        name=name,
        params=params,
        entry=entry,
        subject=served.subject(name),
    )


def access_for(
    tmp_path: Path,
    policy: str | None = POLICY,
    *,
    dry_run: bool = False,
) -> Access:
    """An :class:`Access` loaded from ``policy`` (``None``: no policy files), pins off, with
    server ``gh`` trusted (its declared annotations are the effective ones)."""
    files: tuple[str, ...] = ()
    if policy is not None:
        path = tmp_path / "policy.yaml"
        path.write_text(policy)
        files = (str(path),)
    settings = PolicySettings(files=files, dry_run=dry_run, pins=PinSettings(mode="off"))
    gh = ServerConfig.model_validate({"id": "gh", "command": "gh-server", "trusted": True})
    access = Access(settings, {"gh": gh})
    access.load()
    return access


def served_tools(access: Access, items: Sequence[Mapping[str, Any]] = TOOLS) -> ServedTools:
    """``items`` as server ``gh`` lists them, merged under the prefix ``gh``, served by ``access``."""
    return access.serve_tools(build_catalog([ServerSlice("gh", "gh", items)], NamingCodec()))


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """One sample's value, or None when the registry has no such sample."""
    return registry.get_sample_value(name, labels)


def ticks(*readings: float) -> Callable[[], float]:
    """A clock that reads ``readings`` in turn (a stage reads it when a call starts and ends)."""
    values = iter(readings)
    return lambda: next(values)


class Recorder:
    """A fake ``call_next``: records each context it is given and answers with ``result``."""

    def __init__(self, result: Any = None, *, raises: BaseException | None = None) -> None:
        self.result: Any = {"content": [{"type": "text", "text": "done"}]} if result is None else result
        self.raises = raises
        self.seen: list[CallContext] = []

    async def __call__(self, ctx: CallContext) -> Any:
        self.seen.append(ctx)
        if self.raises is not None:
            raise self.raises
        return self.result
