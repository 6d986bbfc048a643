"""2026-07-28 servers' own tasks (the ``io.modelcontextprotocol/tasks`` extension), relayed to
callers of both eras through the handshake-era relay (:mod:`proxy.tasks.relay`).

A 2026-07-28 server that declares the extension in ``server/discover`` may answer a
``tools/call`` with a task handle (``resultType: "task"``, ``taskId``, ``status``, ``ttlMs``,
``pollIntervalMs``) when the request declared the extension. Manifold declares it to the server
(:class:`Declaring`) on exactly the calls whose handle it can take for the caller: a 2026-07-28
caller that declared the extension, or a handshake-era caller's task-augmented call. Others go
out without it, and the server runs them plainly; a handle the server gives unasked is its
fault (:class:`~proxy.core.errors.ServerProtocolError`).

A handle is recorded exactly like a handshake-era server's ``CreateTaskResult``
(:meth:`~proxy.tasks.relay.Tasks.created`: Manifold's sealed id, per identity and endpoint, the
same store, limits, metrics and audit records), and what the relay asks of the task goes out in
the extension's words (:func:`ask`):

    relay asks        the 2026-07-28 server is sent
    tasks/get         tasks/get (the answer's ttlMs, pollIntervalMs renamed)
    tasks/result      tasks/get every pollIntervalMs (bounded) until the task ends, its outcome
                      inlined; inputRequests asked of the caller on its open tasks/result (the
                      task named in the related-task _meta), answered with tasks/update
    tasks/cancel      tasks/cancel (an acknowledgement), then tasks/get

A 2026-07-28 caller polling such a task (:func:`request`) also sees the server's
``inputRequests`` while it is ``input_required``, and its ``tasks/update`` reaches the server.
Either way the questions and the sampling answers pass the guardrails of the call that created
the task: the guard stage hands its checks to the :class:`Declaring` caller the call went out
with (:class:`~proxy.pipeline.stages.guard.Guardable`), and the relay keeps them with the task
(:meth:`Tasks.asked_of`).

A server's answers are checked: a ``tasks/get`` about another task than the one asked, a status
the extension does not define, more than :data:`MAX_INPUT_REQUESTS` input requests at once or
more than :data:`MAX_INPUT_ROUNDS` rounds of them in one wait fail that request (the server's
fault), never another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final, Protocol

import anyio

from proxy.core.errors import (
    INTERNAL_ERROR,
    InvalidParams,
    RemoteError,
    ServerProtocolError,
    ServerTimeout,
)
from proxy.core.identity import Identity
from proxy.core.keys import fingerprint
from proxy.outbound.connection import ServerConnection
from proxy.outbound.relay import RELATED_TASK
from proxy.pipeline.context import CallContext, Caller, Handler
from proxy.pipeline.stages.guard import asked_checked
from proxy.protocol import jsonrpc
from proxy.protocol.asks import ASKABLE
from proxy.protocol.extensions import TASKS, HoldingTasks
from proxy.tasks import modern
from proxy.tasks.ids import unknown_task
from proxy.tasks.store import TaskRecord

__all__ = [
    "MAX_INPUT_REQUESTS",
    "MAX_INPUT_ROUNDS",
    "MAX_POLL",
    "MIN_POLL",
    "Declaring",
    "ask",
    "calling",
    "declared",
    "is_handle",
    "request",
]

STATUSES: Final = frozenset({"working", "input_required", "completed", "failed", "cancelled"})
#: Input requests one ``tasks/get`` may carry; more fail the request that waits on it.
MAX_INPUT_REQUESTS: Final = 16
#: Rounds of input one ``tasks/result`` answers for a task before Manifold gives up on it.
MAX_INPUT_ROUNDS: Final = 32
#: Seconds between Manifold's polls of a task: the server's ``pollIntervalMs``, within these.
MIN_POLL: Final = 0.1
MAX_POLL: Final = 5.0
_DEFAULT_POLL: Final = 1.0
_MAX_TASK_ID: Final = 256
_MAX_KEY: Final = 128
# A 2026-07-28 Task's fields and their handshake-era names (the relay keeps the latter).
_HANDSHAKE: Final = {
    "status": "status",
    "statusMessage": "statusMessage",
    "createdAt": "createdAt",
    "lastUpdatedAt": "lastUpdatedAt",
    "ttlMs": "ttl",
    "pollIntervalMs": "pollInterval",
}


def declared(server_capabilities: Mapping[str, Any]) -> bool:
    """Whether a 2026-07-28 server declared the tasks extension."""
    extensions = server_capabilities.get("extensions")
    return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS), Mapping)


def is_handle(result: object) -> bool:
    """Whether a server's result is a task handle (``resultType: "task"``)."""
    return isinstance(result, Mapping) and result.get("resultType") == "task"


class Declaring:
    """A caller as a request goes out for it to a 2026-07-28 task server: the tasks extension
    declared (Manifold's own; it takes the task's handle, or asks about a task it holds); all the
    rest is the caller's."""

    __slots__ = ("_caller", "asked", "capabilities")

    def __init__(self, caller: Caller, asked: Any = None) -> None:
        self._caller = caller
        self.capabilities = HoldingTasks(caller.capabilities)
        self.asked = asked  # the guard stage's checks of the call's questions (Guardable)

    def guarded(self, asked: Any) -> Declaring:
        self.asked = asked  # kept for the task's questions, asked later (calling)
        return self

    @property
    def session_id(self) -> str:
        return self._caller.session_id

    @property
    def log_level(self) -> str | None:
        return self._caller.log_level

    @property
    def asleep(self) -> bool:
        return self._caller.asleep

    @property
    def identity(self) -> Identity:
        return self._caller.identity

    @property
    def stateless(self) -> bool:
        return self._caller.stateless

    def supports(self, method: str, params: dict[str, Any] | None) -> bool:
        return self._caller.supports(method, params)

    def notify(self, message: jsonrpc.Message) -> None:
        self._caller.notify(message)

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        return await asked_checked(self.asked, self.identity, method, params, self._caller.request)


class Tasks(modern.Tasks, Protocol):
    """The relay this hands its tasks to (:class:`proxy.tasks.relay.Tasks`)."""

    def remember(self, ctx: CallContext, client_id: str, asked: Any = None) -> None: ...

    def asked_of(self, record: TaskRecord) -> Any: ...

    async def record_of(self, inbound: Caller, endpoint: str, task_id: object) -> TaskRecord: ...

    async def connection_of(self, inbound: Caller, record: TaskRecord) -> ServerConnection: ...


def _handshake_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 Task's fields in handshake-era names (what the relay keeps and shows)."""
    shown = {old: task[new] for new, old in _HANDSHAKE.items() if new in task}
    for key in ("ttl", "pollInterval"):
        value = shown.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            del shown[key]
    return shown


def _created(handle: Mapping[str, Any], server_id: str) -> dict[str, Any]:
    """A server's task handle as the relay records a ``CreateTaskResult``.

    Raises:
        ServerProtocolError: no usable task id or status.
    """
    task_id, status = handle.get("taskId"), handle.get("status")
    if not isinstance(task_id, str) or not 0 < len(task_id) <= _MAX_TASK_ID:
        raise ServerProtocolError(server_id, "it answered with a task handle with no usable task id")
    if status not in STATUSES:
        raise ServerProtocolError(server_id, "it answered with a task handle with no usable status")
    return {"task": {"taskId": task_id, **_handshake_task(handle)}}


async def calling(tasks: Tasks, pipeline: Handler, ctx: CallContext, running: bool) -> Any:
    """A ``tools/call`` to a 2026-07-28 server (``running``: it declared the tasks extension).

    Raises:
        InvalidParams: a handshake-era ``task`` field that is not an object.
        LimitExceeded: the caller's identity, or Manifold, keeps as many tasks as it may.
        ServerProtocolError: an unusable task handle, or one the request did not ask for.
    """
    caller = ctx.caller
    asked = ctx.params.get("task")
    if not caller.stateless and asked is not None and not isinstance(asked, dict):
        raise InvalidParams('"task" must be an object (task-augmented tools/call)')
    plain = (  # a plain call is passed on as it came (no copy: it is every call's path)
        replace(ctx, params={k: v for k, v in ctx.params.items() if k != "task"})
        if "task" in ctx.params
        else ctx
    )
    holds = modern.declares(caller.capabilities) if caller.stateless else isinstance(asked, dict)
    if not (running and holds):
        result = await pipeline(plain)
        if is_handle(result):
            raise ServerProtocolError(ctx.server_id, "it answered with a task handle nobody asked for")
        return result
    await tasks.store.room(fingerprint(caller.identity))  # refused before the server is asked
    declaring = Declaring(caller)
    result = await pipeline(replace(plain, caller=declaring))
    if not is_handle(result):
        return result  # run plainly (or input_required, for a 2026-07-28 caller to answer)
    answer = await tasks.created(
        caller, ctx.endpoint, ctx.server_id, _created(result, ctx.server_id), name=ctx.name
    )
    task = answer["task"]
    tasks.remember(plain, task["taskId"], declaring.asked)
    return modern.handle(answer) if caller.stateless else answer


# ---- what the relay asks of a task ------------------------------------------------------------


async def _get(connection: ServerConnection, caller: Declaring, server_task: str) -> dict[str, Any]:
    """The server's ``tasks/get``, checked.

    Raises:
        ServerProtocolError: not a task, another task than asked, or no usable status.
        RemoteError: the server's refusal.
    """
    answer = await connection.request("tasks/get", {"taskId": server_task}, relay=caller)
    server_id = connection.server_id
    if not isinstance(answer, dict):
        raise ServerProtocolError(server_id, "it answered tasks/get with no task")
    if answer.get("taskId") != server_task:
        raise ServerProtocolError(server_id, "it answered tasks/get about another task than asked")
    if answer.get("status") not in STATUSES:
        raise ServerProtocolError(server_id, "it answered tasks/get with no usable status")
    return answer


def input_requests(task: Mapping[str, Any], server_id: str) -> dict[str, dict[str, Any]]:
    """A task's ``inputRequests``, checked and bounded (the server's task id taken out of any
    related-task ``_meta``: the caller knows the task by Manifold's).

    Raises:
        ServerProtocolError: not a map of askable requests, or over :data:`MAX_INPUT_REQUESTS`.
    """
    asked = task.get("inputRequests")
    if asked is None:
        return {}
    if not isinstance(asked, Mapping):
        raise ServerProtocolError(server_id, "it sent inputRequests that is not an object")
    if len(asked) > MAX_INPUT_REQUESTS:
        raise ServerProtocolError(
            server_id, f"it sent more than {MAX_INPUT_REQUESTS} inputRequests at once (MAX_INPUT_REQUESTS)"
        )
    checked: dict[str, dict[str, Any]] = {}
    for key, one in asked.items():
        method = one.get("method") if isinstance(one, Mapping) else None
        params = one.get("params") if isinstance(one, Mapping) else None
        if not isinstance(key, str) or len(key) > _MAX_KEY or method not in ASKABLE:
            raise ServerProtocolError(server_id, "it sent an input request Manifold cannot ask")
        if not isinstance(params, dict | None):
            raise ServerProtocolError(
                server_id, "it sent an input request with params that are not an object"
            )
        params = dict(params or {})
        meta = params.get("_meta")
        if isinstance(meta, dict) and RELATED_TASK in meta:
            params["_meta"] = {k: v for k, v in meta.items() if k != RELATED_TASK}
        checked[key] = {"method": method, "params": params}
    return checked


def _pause(task: Mapping[str, Any]) -> float:
    """Seconds until the next poll: the server's ``pollIntervalMs``, within bounds."""
    asked = task.get("pollIntervalMs")
    if not isinstance(asked, int | float) or isinstance(asked, bool):
        return _DEFAULT_POLL
    return min(max(float(asked) / 1000, MIN_POLL), MAX_POLL)


async def _outcome(
    connection: ServerConnection,
    caller: Declaring,
    server_task: str,
    task_id: str,
    heard: Callable[[Mapping[str, Any]], None],
) -> Any:
    """Poll until the task ends; its result, or its error raised. The caller is asked what the
    task asks meanwhile (it has ``tasks/result`` open), and its answers go back in ``tasks/update``.

    Raises:
        RemoteError: the task failed (its error) or was cancelled.
        ServerProtocolError: see :func:`_get`, :func:`input_requests`; over :data:`MAX_INPUT_ROUNDS`.
    """
    server_id = connection.server_id
    rounds = 0
    last: object = None
    while True:
        task = await _get(connection, caller, server_task)
        status = task["status"]
        if status != last:
            last = status
            heard(task)
        if status == "completed":
            result = task.get("result")
            if not isinstance(result, dict):
                raise ServerProtocolError(server_id, "it said a task completed without its result")
            return result
        if status == "failed":
            error = task.get("error")
            raise RemoteError(server_id, error if isinstance(error, dict) else {"code": INTERNAL_ERROR})
        if status == "cancelled":
            raise RemoteError(server_id, {"code": INTERNAL_ERROR, "message": "the task was cancelled"})
        asked = input_requests(task, server_id) if status == "input_required" else {}
        if not asked:
            await anyio.sleep(_pause(task))
            continue
        rounds += 1
        if rounds > MAX_INPUT_ROUNDS:
            raise ServerProtocolError(
                server_id, f"its task asked for input more than {MAX_INPUT_ROUNDS} times (MAX_INPUT_ROUNDS)"
            )
        answers: dict[str, Any] = {}
        for key, one in asked.items():  # one at a time, on the caller's one open tasks/result
            params = one["params"]
            meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
            params = {**params, "_meta": {**meta, RELATED_TASK: {"taskId": task_id}}}
            answers[key] = await caller.request(one["method"], params)
        update = {"taskId": server_task, "inputResponses": answers}
        await connection.request("tasks/update", update, relay=caller)


async def ask(
    connection: ServerConnection,
    inbound: Caller,
    method: str,
    server_task: str,
    task_id: str,
    *,
    timeout: float | None,
    heard: Callable[[Mapping[str, Any]], None],
    asked: Any = None,
) -> Any:
    """The relay's ``method`` (handshake-era words) about a 2026-07-28 server's task, answered in
    handshake-era words. ``heard``: told each new status :func:`_outcome` sees (for status
    notifications); ``asked``: the guardrails' checks of the task's questions (its call's).

    Raises:
        RemoteError: the server's refusal, or (``tasks/result``) the task's own error.
        ServerProtocolError: an answer Manifold cannot use.
        ServerTimeout: ``tasks/result``: the task did not end within ``timeout``.
    """
    caller = Declaring(inbound, asked)
    if method == "tasks/get":
        return _handshake_task(await _get(connection, caller, server_task))
    if method == "tasks/cancel":
        await connection.request("tasks/cancel", {"taskId": server_task}, relay=caller)
        shown = _handshake_task(await _get(connection, caller, server_task))
        if shown["status"] not in ("completed", "failed"):
            # Cancelling is the server's to finish; a handshake-era client is owed the status.
            shown["status"] = "cancelled"
        return shown
    wait = connection.request_timeout if timeout is None else timeout
    with anyio.move_on_after(wait):
        return await _outcome(connection, caller, server_task, task_id, heard)
    raise ServerTimeout(connection.server_id, "tasks/result", wait)


# ---- a 2026-07-28 caller ------------------------------------------------------------------------


async def request(
    tasks: Tasks, inbound: Caller, endpoint: str, method: str, params: Mapping[str, Any]
) -> Any:
    """A 2026-07-28 caller's ``tasks/*`` (:func:`proxy.tasks.modern.request`), and for a
    2026-07-28 server's task: ``inputRequests`` shown while it is ``input_required``, and
    ``tasks/update`` passed on to the server.

    Raises:
        as :func:`proxy.tasks.modern.request`; ServerProtocolError: see :func:`input_requests`.
    """
    answer = await modern.request(tasks, inbound, endpoint, method, params)
    wanted = method == "tasks/update" or (method == "tasks/get" and answer.get("status") == "input_required")
    if not wanted:
        return answer
    record = await tasks.record_of(inbound, endpoint, params.get("taskId"))
    if modern.held_task(record):  # Manifold's own: its questions are modern's (proxy.tasks.inputs)
        return answer
    connection = await tasks.connection_of(inbound, record)
    if not connection.stateless:
        return answer
    caller, asked = Declaring(inbound), tasks.asked_of(record)
    if method == "tasks/update":
        if asked is not None:  # the client's sampling answers, as a plain call's retry's
            params = await asked.responses(inbound.identity, params)
        update = {"taskId": record.server_task, "inputResponses": dict(params["inputResponses"])}
        try:
            await connection.request("tasks/update", update, relay=caller)
        except RemoteError:
            raise unknown_task() from None  # its words carry its ids
        return answer
    task = await _get(connection, caller, record.server_task)
    if task["status"] != "input_required":
        return answer  # answered meanwhile: the next poll tells
    shown = {**answer, "inputRequests": input_requests(task, connection.server_id)}
    return shown if asked is None else await asked.requests(inbound.identity, shown)
