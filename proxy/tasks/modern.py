"""Tasks for 2026-07-28 callers: the ``io.modelcontextprotocol/tasks`` extension, bridged onto
the handshake-era relay (:mod:`proxy.tasks.relay`).

A 2026-07-28 client declares the extension in its request's capabilities; Manifold declares it in
``server/discover`` when a server the identity sees runs tasks. Then:

- ``tools/call`` of a tool its handshake-era server runs as a task (``execution.taskSupport``
  ``required`` or ``optional``) is task-augmented by Manifold, unasked (the extension has no
  per-request opt-in), and answered with a task handle (``resultType: "task"``) carrying
  Manifold's own sealed id. A client without the extension calling a ``required`` tool gets
  "missing capability" naming the extension, not the server's refusal.
- ``tasks/get`` polls: the handshake-era ``tasks/get`` and, once the task ended, its blocking
  ``tasks/result`` (which answers at once), inlined as ``result`` (``completed``) or ``error``
  (``failed``). A tool result with ``isError`` is ``completed``, as the extension says.
- ``input_required``: the server's questions, asked on a ``tasks/result`` Manifold opens itself,
  are the task's ``inputRequests``; ``tasks/update``'s ``inputResponses`` answer them
  (:mod:`proxy.tasks.inputs`: a key the task is not waiting on, or a malformed answer, is
  refused, and nothing reaches the server).
- ``tasks/cancel`` and ``tasks/update`` acknowledge with an empty result (``tasks/cancel`` of a
  task that already ended too: cancelling is idempotent).
- ``tasks/*`` of a request that did not declare the extension: "missing capability".
- ``tasks/result`` and ``tasks/list`` do not exist in the extension: "method not found".

Ids are opened exactly as for handshake-era callers (identity and endpoint), so an id of another
identity, endpoint or era's caller is "unknown task".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final, Protocol

from proxy.core.errors import InvalidParams, MethodNotFound, MissingCapability, RemoteError
from proxy.core.keys import fingerprint
from proxy.outbound.connection import ServerConnection
from proxy.outbound.relay import RELATED_TASK
from proxy.pipeline.context import CallContext, Caller, Handler
from proxy.protocol.extensions import TASKS
from proxy.protocol.results import OwnResultType
from proxy.tasks.inputs import TaskQuestions
from proxy.tasks.store import TaskRecord, TaskStore

__all__ = [
    "EXTENSION",
    "MODERN_METHODS",
    "calling",
    "declares",
    "discovered",
    "handle",
    "request",
    "task_support",
]

EXTENSION: Final = TASKS
MODERN_METHODS: Final = ("tasks/get", "tasks/update", "tasks/cancel")
_ENDED: Final = frozenset({"completed", "failed", "cancelled"})
_RUNS_AS_TASK: Final = frozenset({"required", "optional"})
# A held task's "server task id" (proxy.tasks.held.HELD; imported from there it would cycle).
_HELD: Final = "held:"
_READ_TTL: Final = 3600.0  # seconds a task's held tasks/result may stay open, when it has no ttl
# A handshake-era Task's fields and their 2026-07-28 names.
_RENAMED: Final = {"ttl": "ttlMs", "pollInterval": "pollIntervalMs"}


class Tasks(Protocol):
    """The handshake-era relay (:class:`proxy.tasks.relay.Tasks`) this bridges onto."""

    store: TaskStore
    questions: TaskQuestions

    def key_of(self, inbound: Caller, endpoint: str, task_id: object) -> str: ...

    async def failed(self, inbound: Caller, endpoint: str, task_id: str, error: dict[str, Any]) -> None: ...

    async def record_of(self, inbound: Caller, endpoint: str, task_id: object) -> TaskRecord: ...

    async def connection_of(self, inbound: Caller, record: TaskRecord) -> ServerConnection: ...

    async def created(
        self, inbound: Caller, endpoint: str, server_id: str, result: Any, *, name: str = ""
    ) -> Any: ...

    async def request(
        self, inbound: Caller, endpoint: str, method: str, params: Mapping[str, Any]
    ) -> Any: ...


def declares(capabilities: Mapping[str, Any]) -> bool:
    """Whether a caller's capabilities declare the tasks extension."""
    declared = capabilities.get("extensions")
    return isinstance(declared, Mapping) and isinstance(declared.get(EXTENSION), Mapping)


def discovered(result: Mapping[str, Any]) -> dict[str, Any]:
    """A ``server/discover`` result declaring the tasks extension."""
    capabilities = dict(result.get("capabilities") or {})
    shown = capabilities.get("extensions")
    capabilities["extensions"] = {**(shown if isinstance(shown, Mapping) else {}), EXTENSION: {}}
    return {**result, "capabilities": capabilities}


def task_support(ctx: CallContext) -> str:
    """The called tool's ``execution.taskSupport`` (``forbidden`` when it says nothing usable)."""
    definition = ctx.entry.definition if ctx.entry is not None else {}
    execution = definition.get("execution")
    support = execution.get("taskSupport") if isinstance(execution, Mapping) else None
    return support if isinstance(support, str) else "forbidden"


def _modern(task: Mapping[str, Any]) -> dict[str, Any]:
    return {_RENAMED.get(k, k): v for k, v in task.items()}


async def calling(tasks: Tasks, pipeline: Handler, ctx: CallContext, running: bool) -> Any:
    """A 2026-07-28 caller's ``tools/call``: run as a task where its server runs the tool as one
    and the caller declared the extension (``running``: the server declared task-augmented calls).

    Raises:
        MissingCapability: the tool runs only as a task and the caller lacks the extension.
    """
    params = {k: v for k, v in ctx.params.items() if k != "task"}  # no such 2026-07-28 field
    ctx = replace(ctx, params=params)
    support = task_support(ctx)
    if not running or support not in _RUNS_AS_TASK:
        return await pipeline(ctx)
    if not declares(ctx.caller.capabilities):
        if support == "required":
            raise MissingCapability(
                f"this tool runs only as a task: declare the {EXTENSION} extension",
                required={"extensions": {EXTENSION: {}}},
            )
        return await pipeline(ctx)
    await tasks.store.room(fingerprint(ctx.caller.identity))
    result = await pipeline(replace(ctx, params={**params, "task": {}}))
    return handle(await tasks.created(ctx.caller, ctx.endpoint, ctx.server_id, result, name=ctx.name))


def handle(created: Any) -> Any:
    """A ``CreateTaskResult`` as the extension's task handle (``resultType: "task"``, the Task's
    fields renamed); anything else (the call ran plainly) as it is."""
    if isinstance(created, dict) and isinstance(created.get("task"), dict):
        return OwnResultType({**_modern(created["task"]), "resultType": "task"})
    return created


async def request(
    tasks: Tasks, inbound: Caller, endpoint: str, method: str, params: Mapping[str, Any]
) -> Any:
    """Answer one ``tasks/*`` request of a 2026-07-28 caller.

    Raises:
        MethodNotFound: ``tasks/result``, ``tasks/list`` (not in the extension).
        MissingCapability: the request did not declare the extension.
        InvalidParams: an unknown task (or another's); ``tasks/update`` without ``inputResponses``,
            or with an answer to no question the task waits on, or a malformed one.
    """
    if method not in MODERN_METHODS:
        raise MethodNotFound("Method not found", data=method)
    if not declares(inbound.capabilities):
        raise MissingCapability(
            f"{method} needs the {EXTENSION} extension declared", required={"extensions": {EXTENSION: {}}}
        )
    if method == "tasks/update":
        if not isinstance(params.get("inputResponses"), Mapping):
            raise InvalidParams('tasks/update needs "inputResponses" (an object)')
        await tasks.request(inbound, endpoint, "tasks/get", params)  # opened: its owner's, known
        if await _asks_on_result(tasks, inbound, endpoint, params.get("taskId")):
            key = tasks.key_of(inbound, endpoint, params.get("taskId"))
            tasks.questions.answer(key, params["inputResponses"])
        return {}
    if method == "tasks/cancel":
        try:
            await tasks.request(inbound, endpoint, "tasks/cancel", params)
        except InvalidParams:  # an unknown task, or one that already ended: that is acknowledged
            if (await tasks.request(inbound, endpoint, "tasks/get", params)).get("status") not in _ENDED:
                raise
        return {}
    shown = _modern(await tasks.request(inbound, endpoint, "tasks/get", params))
    if shown.get("status") not in ("completed", "failed"):
        if not await _asks_on_result(tasks, inbound, endpoint, params.get("taskId")):
            return shown  # a 2026-07-28 server's: its own inputRequests (proxy.tasks.modern_servers)
        key = tasks.key_of(inbound, endpoint, params.get("taskId"))
        ttl = shown["ttlMs"] / 1000 if isinstance(shown.get("ttlMs"), int) else _READ_TTL
        return await tasks.questions.shown(tasks, inbound, endpoint, key, shown, ttl)
    try:
        result = await tasks.request(inbound, endpoint, "tasks/result", params)
    except RemoteError as exc:
        return {**shown, "status": "failed", "error": dict(exc.error)}
    if isinstance(result, dict) and isinstance(result.get("_meta"), dict):
        # The task's id is the answer's own: no related-task key on the inlined result.
        meta = {k: v for k, v in result["_meta"].items() if k != RELATED_TASK}
        result = {k: v for k, v in result.items() if k != "_meta"} | ({"_meta": meta} if meta else {})
    return {**shown, "status": "completed", "result": result}


async def _asks_on_result(tasks: Tasks, inbound: Caller, endpoint: str, task_id: object) -> bool:
    """Whether the task's questions come on a ``tasks/result`` (Manifold holds one open for a
    2026-07-28 owner): a handshake-era server's task, or one Manifold holds itself."""
    record = await tasks.record_of(inbound, endpoint, task_id)
    if held_task(record):
        return True
    return not (await tasks.connection_of(inbound, record)).stateless


def held_task(record: TaskRecord) -> bool:
    """Whether Manifold runs the record's task itself (a gateway-held call), not its server."""
    return record.server_task.startswith(_HELD)
