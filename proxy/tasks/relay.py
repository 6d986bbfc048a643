"""Tasks relayed through Manifold (handshake era): ids rewritten, owners enforced, status routed.

A client that augments ``tools/call`` with ``task`` gets the server's ``CreateTaskResult`` with
the task id replaced by one Manifold issued (:mod:`proxy.tasks.ids`) and the task recorded
(:mod:`proxy.tasks.store`). From then on, Manifold answers ``tasks/*`` itself:

- ``tasks/get``, ``tasks/result``, ``tasks/cancel``: the id is opened for this caller's identity
  and endpoint (a guessed, altered or foreign id is "unknown task", never forwarded: the server
  behind echoes ids and dumps internals into its errors), then the request goes to the task's
  server with the server's id; the answer comes back with Manifold's id, and what a server says
  about a task Manifold does not know it by is never relayed.
- ``tasks/result``: the final outcome is kept (``limits.max_task_result_bytes``) so another
  session or replica of the same identity reads it within the task's ttl without its server.
- ``tasks/list``: the identity's tasks on this endpoint, from the store, in Manifold's pages.
- ``notifications/tasks/status``: to the session that created the task only, with Manifold's
  id; a status for an id the server never created through Manifold is dropped and logged.

A server's requests during a task (elicitation, sampling) travel on the ``tasks/result`` the
client has open: they go back through that request like any server request about a call.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import anyio
import orjson

from proxy.catalog.cursors import CursorCodec, paginate
from proxy.clients.session import ClientSession
from proxy.config.sections import LimitsConfig
from proxy.core.errors import (
    INTERNAL_ERROR,
    InvalidParams,
    LimitExceeded,
    MethodNotFound,
    ProtocolError,
    RemoteError,
    ServerProtocolError,
    ServerUnavailable,
)
from proxy.core.keys import fingerprint
from proxy.observe.metrics import Metrics
from proxy.outbound.connection import ServerConnection
from proxy.outbound.relay import RELATED_TASK
from proxy.pipeline.context import CallContext, Caller, Handler
from proxy.protocol import jsonrpc
from proxy.tasks import modern, modern_servers
from proxy.tasks.ids import TaskIds, scope_of, unknown_task
from proxy.tasks.inputs import TaskQuestions
from proxy.tasks.store import TaskRecord, TaskStore

__all__ = ["RELATED_TASK", "TASK_METHODS", "Tasks", "capability"]

logger = logging.getLogger("proxy.tasks.relay")

TASK_METHODS: Final = ("tasks/get", "tasks/result", "tasks/cancel", "tasks/list")
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
_STATUSES: Final = frozenset({"working", "input_required", *TERMINAL})
# The fields of a Task a client is shown (a server's other keys are not relayed).
_TASK_FIELDS: Final = ("status", "statusMessage", "createdAt", "lastUpdatedAt", "pollInterval")
_MAX_SERVER_TASK_ID: Final = 256  # a server's task id longer than this is not kept
_PAGE: Final = 100
_FETCH: Final = 10.0  # seconds to read a finished task's result when tasks/get sees it end
_SWEEP: Final = 60.0  # seconds between looks for expired tasks of this replica's


def capability(server_capabilities: Mapping[str, Any]) -> bool:
    """Whether a server runs tools as tasks: it declared task-augmented ``tools/call``
    (``tasks.requests.tools.call``), or the 2026-07-28 tasks extension."""
    tasks = server_capabilities.get("tasks")
    requests = tasks.get("requests") if isinstance(tasks, dict) else None
    tools = requests.get("tools") if isinstance(requests, dict) else None
    return (isinstance(tools, dict) and isinstance(tools.get("call"), dict)) or modern_servers.declared(
        server_capabilities
    )


class Reach(Protocol):
    """Which connection a caller reaches a server on (:class:`proxy.servers.connections.Connections`)."""

    async def for_call(self, caller: Caller, server_id: str) -> ServerConnection: ...

    @property
    def shared(self) -> Mapping[str, ServerConnection]: ...


class Owners(Protocol):
    """The live sessions, by id (:class:`proxy.clients.sessions.Sessions`)."""

    def live(self, session_id: str) -> ClientSession | None: ...


class Tasks:
    def __init__(
        self,
        ids: TaskIds,
        store: TaskStore,
        connections: Reach,
        sessions: Owners,
        limits: LimitsConfig,
        metrics: Metrics,
        *,
        cursors: CursorCodec,
        audit: Callable[[dict[str, Any]], None] | None = None,
        clock: Callable[[], float] = time.time,
        questions: TaskQuestions | None = None,
    ) -> None:
        self._ids = ids
        # A handshake-era task's questions, held for its 2026-07-28 owner (:mod:`proxy.tasks.inputs`).
        self.questions = questions if questions is not None else TaskQuestions(None)
        self.store = self._store = store  # closed by its owner
        self._connections = connections
        self._sessions = sessions
        self._metrics = metrics
        self._max_ttl = limits.max_task_ttl
        self._max_result = limits.max_task_result_bytes
        self._cursors = cursors
        self._clock = clock
        self._audit = audit  # the audit log's write: a task's creation and how it ended
        # Tasks created through this replica's connections: (server, server's id) -> (client's
        # id, session, created, expiry). Status notifications are routed with it, at once.
        self._local: dict[tuple[str, str], tuple[str, str, float, float]] = {}
        self._max_local = limits.max_tasks
        # Tasks not yet seen to end: when created, and who created which (for the audit log).
        self._open: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._next_sweep = 0.0

    # ---- capabilities ---------------------------------------------------------------------

    #: The ``tasks`` capability declared to a client that sees a server running tasks: task-augmented
    #: ``tools/call``; Manifold itself lists and cancels.
    CAPABILITY: Final[Mapping[str, Any]] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}

    def running_tasks(self) -> set[str]:
        """The servers (shared connections) that declared task-augmented ``tools/call``."""
        return {
            sid for sid, connection in self._connections.shared.items() if capability(connection.capabilities)
        }

    # ---- creation -------------------------------------------------------------------------

    async def created(
        self, inbound: Caller, endpoint: str, server_id: str, result: Any, *, name: str = ""
    ) -> Any:
        """A task-augmented call's answer, with a task created by the server recorded and its id
        replaced. Anything else (the server ran it as a plain call) is returned as it is.

        Raises:
            LimitExceeded: the identity, or Manifold, keeps as many tasks as it may (the task is
                cancelled at its server).
            ServerProtocolError: the server's CreateTaskResult is unusable, or names a task id it
                gave before.
        """
        if not isinstance(result, dict) or not isinstance(result.get("task"), dict):
            return result
        task = result["task"]
        server_task = task.get("taskId")
        if not isinstance(server_task, str) or not 0 < len(server_task) <= _MAX_SERVER_TASK_ID:
            raise ServerProtocolError(server_id, "it answered a task-augmented call with no usable task id")
        if (server_id, server_task) in self._local:
            # One server task behind two of Manifold's would let two owners reach one task.
            raise ServerProtocolError(
                server_id, "it answered a task-augmented call with a task id it gave before"
            )
        identity = inbound.identity
        now = self._clock()
        client_id, key = self._ids.issue(scope_of(identity, endpoint))
        record = TaskRecord(
            key=key,
            owner=fingerprint(identity),
            endpoint=endpoint,
            server_id=server_id,
            server_task=server_task,
            session_id=inbound.session_id,
            created=now,
            expires=now + self._ttl(task.get("ttl")),
            task=_kept(task),
        )
        try:
            await self._store.add(record)
        except LimitExceeded:
            await self._cancel_at_server(inbound, server_id, server_task)
            raise
        if len(self._local) >= self._max_local or now >= self._next_sweep:
            self._forget_expired()
            self._next_sweep = now + _SWEEP
        if len(self._local) < self._max_local:
            self._local[(server_id, server_task)] = (client_id, inbound.session_id, now, record.expires)
            who = {
                "event": "task",
                "identity": identity.name,
                "source": identity.source,
                "issuer": identity.issuer,
                "subject": identity.subject,
                "server": server_id,
                "name": name,
                "task": client_id,
                **({"endpoint": endpoint} if endpoint else {}),
            }
            self._open[(server_id, server_task)] = (now, who)
            self._write({**who, "outcome": "created"})
        self._metrics.task_created(server_id)
        return {**result, "task": self._shown(record, client_id)}

    def creating(self, pipeline: Handler) -> Handler:
        """``pipeline`` with a task-augmented ``tools/call``'s task recorded as the server creates it."""

        shared = self._connections.shared

        async def call(ctx: CallContext) -> Any:
            if ctx.method == "tools/call" and (server := shared.get(ctx.server_id)) and server.stateless:
                running = modern_servers.declared(server.capabilities)
                return await modern_servers.calling(self, pipeline, ctx, running)
            if ctx.method == "tools/call" and ctx.caller.stateless:
                return await modern.calling(self, pipeline, ctx, ctx.server_id in self.running_tasks())
            if ctx.method != "tools/call" or "task" not in ctx.params:
                return await pipeline(ctx)
            if not isinstance(ctx.params["task"], dict):
                raise InvalidParams('"task" must be an object (task-augmented tools/call)')
            await self._store.room(fingerprint(ctx.caller.identity))  # refused before the server is asked
            result = await pipeline(ctx)
            return await self.created(ctx.caller, ctx.endpoint, ctx.server_id, result, name=ctx.name)

        return call

    def _ttl(self, asked: object) -> float:
        """Seconds Manifold keeps a task: the server's ttl (ms), at most ``limits.max_task_ttl``."""
        if isinstance(asked, int | float) and not isinstance(asked, bool) and asked > 0:
            return min(float(asked) / 1000, self._max_ttl)
        return self._max_ttl

    async def _cancel_at_server(self, inbound: Caller, server_id: str, server_task: str) -> None:
        """Best effort: a task Manifold refused to keep should not run on unseen."""
        with anyio.move_on_after(5):
            try:
                connection = await self._connections.for_call(inbound, server_id)
                if _declares(connection, "cancel"):
                    await connection.request("tasks/cancel", {"taskId": server_task}, relay=inbound)
            except (ServerUnavailable, RemoteError) as exc:  # it ends at its ttl
                logger.info("server %s: cancelling a task over the limit failed: %s", server_id, exc)

    # ---- tasks/* ----------------------------------------------------------------------------

    async def request(self, inbound: Caller, endpoint: str, method: str, params: Mapping[str, Any]) -> Any:
        """Answer one ``tasks/*`` request of ``inbound``'s client on ``endpoint``.

        Raises:
            InvalidParams: an unknown task (or another's), a bad cursor, a terminal task cancelled.
            MethodNotFound: the task's server does not support ``tasks/cancel``.
            ServerUnavailable, ServerTimeout, RemoteError: from the task's server.
        """
        if method == "tasks/list":
            return await self._list(inbound, endpoint, params.get("cursor"))
        task_id = params.get("taskId")
        record = await self.record_of(inbound, endpoint, task_id)
        assert isinstance(task_id, str)
        if method == "tasks/get":
            return await self._get(inbound, record, task_id)
        if method == "tasks/result":
            return await self._result(inbound, record, task_id)
        return await self._cancel(inbound, record, task_id)

    def key_of(self, inbound: Caller, endpoint: str, task_id: object) -> str:
        """The store key of ``inbound``'s task ``task_id`` on ``endpoint``.

        Raises:
            InvalidParams: not an id issued to this identity on this endpoint ("unknown task").
        """
        return self._ids.open(task_id, scope_of(inbound.identity, endpoint))

    async def failed(self, inbound: Caller, endpoint: str, task_id: str, error: dict[str, Any]) -> None:
        """Record ``inbound``'s task as failed with ``error``, unless it has an outcome already
        (its server went away while Manifold read its result on the owner's behalf)."""
        record = await self._store.get(self.key_of(inbound, endpoint, task_id))
        if record is not None and record.outcome is None:
            await self._finished(record, {"error": error})

    async def record_of(self, inbound: Caller, endpoint: str, task_id: object) -> TaskRecord:
        """The record ``task_id`` names, if it is a live task of ``inbound``'s identity on ``endpoint``.

        Raises:
            InvalidParams: anything else: always "unknown task".
        """
        key = self._ids.open(task_id, scope_of(inbound.identity, endpoint))
        record = await self._store.get(key)
        if record is None or record.owner != fingerprint(inbound.identity) or record.endpoint != endpoint:
            raise unknown_task()
        return record

    async def connection_of(self, inbound: Caller, record: TaskRecord) -> ServerConnection:
        """The connection ``inbound`` reaches the record's server on."""
        return await self._connections.for_call(inbound, record.server_id)

    def remember(self, ctx: CallContext, client_id: str, asked: Any = None) -> None:
        """Keep the call a task was created by, to check its result against when it is first read,
        and ``asked``, the guard stage's checks of its questions (:func:`asked_of`)
        (:class:`~proxy.tasks.held.HeldTasks` does; the bare relay checks nothing)."""
        self._remember(ctx, client_id, asked)

    def _remember(self, ctx: CallContext, client_id: object, asked: Any = None) -> None:
        return None

    def asked_of(self, record: TaskRecord) -> Any:
        """The guard stage's checks of the questions of the call that created ``record``'s task
        (:func:`proxy.pipeline.stages.guard.asked_checked`), if they were kept."""
        return None

    async def _get(self, inbound: Caller, record: TaskRecord, task_id: str) -> Any:
        if record.outcome is not None:
            return self._shown(record, task_id)
        answer = await self._ask(inbound, record, "tasks/get", task_id)
        record = await self._updated(record, answer)
        if record.task.get("status") in TERMINAL:
            record = await self._kept_outcome(inbound, record, task_id)
        return self._shown(record, task_id)

    async def _kept_outcome(self, inbound: Caller, record: TaskRecord, task_id: str) -> TaskRecord:
        """A task seen to end: its outcome read from its server at once and kept (if it fits), so
        another session or replica reads it without this replica's server. Best effort: it stays
        for ``tasks/result`` to read otherwise."""
        try:
            result = await self._ask(inbound, record, "tasks/result", task_id, timeout=_FETCH)
            outcome: dict[str, Any] = {"result": result}
        except RemoteError as exc:
            outcome = {"error": _scrubbed(exc.error, record.server_task, task_id)}
        except (ServerUnavailable, ProtocolError) as exc:
            logger.info("server %s: a finished task's result could not be read: %s", record.server_id, exc)
            return record
        outcome = await self._checked(record, outcome)
        if len(orjson.dumps(outcome)) > self._max_result:
            return record  # its first tasks/result reader gets it from the server
        return await self._finished(record, outcome)

    async def _result(self, inbound: Caller, record: TaskRecord, task_id: str) -> Any:
        if record.outcome is None:
            # Blocks until the task ends: as long as the task may live, not a call's timeout.
            wait = max(record.expires - self._clock(), 1.0)
            try:
                result = await self._ask(inbound, record, "tasks/result", task_id, timeout=wait)
                outcome = {"result": result}
            except RemoteError as exc:
                outcome = {"error": _scrubbed(exc.error, record.server_task, task_id)}
            outcome = await self._checked(record, outcome)
            record = await self._finished(record, outcome)
            return _answered(outcome, record.server_id, task_id)
        if record.outcome == _OVER_LIMIT:
            raise LimitExceeded(
                "this task's result was larger than Manifold keeps; it was given to the request "
                "that first read it",
                limit="max_task_result_bytes",
                maximum=self._max_result,
            )
        return _answered(orjson.loads(record.outcome), record.server_id, task_id)

    async def _cancel(self, inbound: Caller, record: TaskRecord, task_id: str) -> Any:
        status = record.task.get("status")
        if record.outcome is not None or status in TERMINAL:
            raise InvalidParams(f"Cannot cancel task: already in terminal status {status!r}")
        connection = await self._connections.for_call(inbound, record.server_id)
        if not connection.stateless and not _declares(connection, "cancel"):
            raise MethodNotFound(f"server {record.server_id!r} does not support tasks/cancel")
        answer = await self._ask(inbound, record, "tasks/cancel", task_id)
        record = await self._updated(record, answer)
        return self._shown(record, task_id)

    async def _ask(
        self, inbound: Caller, record: TaskRecord, method: str, task_id: str, *, timeout: float | None = None
    ) -> Any:
        """``method`` for the record's task at its server, under the server's id.

        Raises:
            InvalidParams: the server does not know the task (any more): "unknown task", never
                the server's own words (they carry its ids).
        """
        connection = await self._connections.for_call(inbound, record.server_id)
        # No related-task _meta: the spec says the taskId param alone names the task.
        params: dict[str, Any] = {"taskId": record.server_task}
        try:
            if connection.stateless:  # the tasks extension's words (tasks/result: polled)
                heard = functools.partial(self._heard, record.server_id, record.server_task)
                return await modern_servers.ask(
                    connection,
                    inbound,
                    method,
                    record.server_task,
                    task_id,
                    timeout=timeout,
                    heard=heard,
                    asked=self.asked_of(record),
                )
            return await connection.request(method, params, timeout=timeout, relay=inbound)
        except RemoteError as exc:
            if method == "tasks/result":
                raise  # the task's own outcome, or the server not knowing it: _result keeps it
            logger.info("server %s: %s refused: %s", record.server_id, method, exc.error.get("code"))
            raise unknown_task() from None

    async def _updated(self, record: TaskRecord, answer: Any) -> TaskRecord:
        """The record with what the server now says of its task (an unusable answer changes nothing)."""
        if not isinstance(answer, dict) or answer.get("status") not in _STATUSES:
            raise ServerProtocolError(record.server_id, "it answered about a task with no usable status")
        record = record.updated(_kept(answer))
        await self._store.put(record)
        if record.task.get("status") in TERMINAL:
            self._ended(record.server_id, record.server_task, str(record.task["status"]))
        return record

    async def _checked(self, record: TaskRecord, outcome: dict[str, Any]) -> dict[str, Any]:
        """A task's outcome as its server first gave it, as clients may be given it
        (:class:`proxy.tasks.held.HeldTasks` checks it again)."""
        return outcome

    async def _finished(self, record: TaskRecord, outcome: dict[str, Any]) -> TaskRecord:
        result = outcome.get("result")
        failed = "error" in outcome or (isinstance(result, dict) and result.get("isError") is True)
        status = record.task.get("status")
        if status != "cancelled":
            status = "failed" if failed else "completed"
        self._ended(record.server_id, record.server_task, str(status))
        encoded = orjson.dumps(outcome)
        kept = encoded if len(encoded) <= self._max_result else _OVER_LIMIT
        record = replace(record, task={**record.task, "status": status}, outcome=kept)
        await self._store.put(record)
        return record

    async def _list(self, inbound: Caller, endpoint: str, cursor: object) -> Any:
        owner = fingerprint(inbound.identity)
        records = await self._store.owned(owner, endpoint)
        scope = scope_of(inbound.identity, endpoint)
        shown = [self._shown(r, self._ids.issue(scope, bytes.fromhex(r.key))[0]) for r in records]
        page = paginate(
            shown,
            cursor=cursor,
            page_size=_PAGE,
            codec=self._cursors,
            generation="tasks",
            scope=f"{owner}|{endpoint}",
        )
        result: dict[str, Any] = {"tasks": list(page.items)}
        if page.next_cursor is not None:
            result["nextCursor"] = page.next_cursor
        return result

    # ---- status notifications --------------------------------------------------------------

    def status(self, server_id: str, message: jsonrpc.Message) -> None:
        """Pass a server's ``notifications/tasks/status`` to the task's own session, with
        Manifold's id; one about a task Manifold did not create there is dropped (logged)."""
        params = message.get("params")
        server_task = params.get("taskId") if isinstance(params, dict) else None
        entry = self._local.get((server_id, server_task)) if isinstance(server_task, str) else None
        if entry is None or server_task is None or not isinstance(params, dict):
            logger.debug("server %s: dropped a task status for a task it did not create here", server_id)
            return
        status = params.get("status")
        if status not in _STATUSES:
            logger.debug("server %s: dropped a task status with no usable status", server_id)
            return
        if status in TERMINAL:
            self._ended(server_id, server_task, str(status))
        client_id, session_id, created, expires = entry
        session = self._sessions.live(session_id)
        if session is None or expires <= self._clock():
            return
        shown = {"taskId": client_id, **_kept(params), "ttl": round((expires - created) * 1000)}
        session.notify(jsonrpc.notification("notifications/tasks/status", shown))

    def _heard(self, server_id: str, server_task: str, task: Mapping[str, Any]) -> None:
        """A status Manifold saw polling a 2026-07-28 server's task, told as that server would
        have in the handshake era (:meth:`status`)."""
        shown = {
            k: v for k, v in task.items() if k in ("status", "statusMessage", "createdAt", "lastUpdatedAt")
        }
        self.status(
            server_id, jsonrpc.notification("notifications/tasks/status", {**shown, "taskId": server_task})
        )

    def _forget_expired(self) -> None:
        now = self._clock()
        for where in [w for w, entry in self._local.items() if entry[3] <= now]:
            del self._local[where]
            self._ended(*where, "expired")

    def _ended(self, server_id: str, server_task: str, status: str) -> None:
        """Count a task's end once, the first time Manifold sees it."""
        opened = self._open.pop((server_id, server_task), None)
        if opened is not None:
            seconds = max(self._clock() - opened[0], 0.0)
            self._metrics.task_ended(server_id, status, seconds)
            self._write({**opened[1], "outcome": status, "duration_ms": round(seconds * 1000, 3)})

    def _write(self, record: dict[str, Any]) -> None:
        if self._audit is not None:
            self._audit({"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), **record})

    # ---- what a client is shown -------------------------------------------------------------

    def _shown(self, record: TaskRecord, task_id: str) -> dict[str, Any]:
        task = record.task
        shown: dict[str, Any] = {"taskId": task_id, **{k: task[k] for k in _TASK_FIELDS if k in task}}
        shown["ttl"] = round((record.expires - record.created) * 1000)
        shown.setdefault("status", "working")
        return shown


_OVER_LIMIT: Final = b'{"over_limit":true}'


def _kept(task: Mapping[str, Any]) -> dict[str, Any]:
    """What Manifold keeps of a server's Task: the fields a client may be shown, bounded."""
    kept = {k: task[k] for k in _TASK_FIELDS if k in task}
    message = kept.get("statusMessage")
    if message is not None and (not isinstance(message, str) or len(message) > 4096):
        kept.pop("statusMessage")
    return kept


def _declares(connection: ServerConnection, what: str) -> bool:
    tasks = connection.capabilities.get("tasks")
    return isinstance(tasks, dict) and isinstance(tasks.get(what), dict)


def _scrubbed(error: Mapping[str, Any], server_task: str, task_id: str) -> dict[str, Any]:
    """A server's error for a task's result: its code, and its message with the server's task id
    replaced by Manifold's (its ``data`` is the server's internals, not relayed)."""
    code, message = error.get("code"), error.get("message")
    return {
        "code": code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
        "message": message.replace(server_task, task_id)[:4096] if isinstance(message, str) else "",
    }


def _answered(outcome: Mapping[str, Any], server_id: str, task_id: str) -> Any:
    """The final outcome of a task as ``tasks/result`` answers it: the result with Manifold's id
    in its related-task ``_meta``, or the server's error relayed."""
    if "error" in outcome:
        raise RemoteError(server_id, dict(outcome["error"]))
    result = outcome["result"]
    if not isinstance(result, dict):
        return result
    meta = result.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    return {**result, "_meta": {**meta, RELATED_TASK: {"taskId": task_id}}}
