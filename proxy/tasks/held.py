"""Gateway-held tasks: Manifold runs a call as a task itself, for a server that runs none.

A task-augmented ``tools/call`` of a tool configured held (``servers.<id>.tasks: held``, or
``servers.<id>.tools.<tool>.tasks: held``) that its server would not run as a task (it did not
declare ``tasks.requests.tools.call``, or the tool says no ``execution.taskSupport``) is answered
at once with a ``CreateTaskResult`` under an id Manifold issued, the same way as a relayed task's
(:class:`~proxy.tasks.relay.Tasks`: one store, one set of limits, metrics and audit records).
The call itself runs on in :meth:`HeldTasks.run`'s task group, through the whole call pipeline
(policy, rate limits, confirm, validation, guardrails, both directions), without its ``task``
field; its outcome is kept in the task's record, so
``tasks/get`` and ``tasks/result`` are answered from the store, from any session or replica of
the same identity, within the task's ttl. A 2026-07-28 caller that declared the tasks extension
gets such a task for every call of a held tool (:func:`proxy.tasks.modern.handle`); held tools are
listed with ``execution.taskSupport: optional`` (:func:`proxy.catalog.shaping.offered_as_task`).

While the call waits for its client (a ``confirm`` question, or a server's elicitation or
sampling), the task is ``input_required``; the question is asked on the ``tasks/result`` the
client has open (the spec tells a client to call ``tasks/result`` when it sees
``input_required``), with the task named in its related-task ``_meta``. ``tasks/cancel`` cancels
the call: on the replica running it at once; on another one it marks the task cancelled and tells
every replica through the store (:meth:`~proxy.tasks.store.TaskStore.cancelled`; Redis pub/sub),
and the replica running the call cancels it when it hears (:meth:`HeldTasks.run` listens).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from proxy.catalog.shaping import runs_as_task
from proxy.config.servers import ServerConfig
from proxy.core.errors import InvalidParams, ProtocolError, RemoteError, ServerUnavailable
from proxy.core.keys import fingerprint
from proxy.observe.boundary import wire_error
from proxy.outbound.relay import RELATED_TASK
from proxy.pipeline.context import CallContext, Caller, Handler, Stage, compose
from proxy.pipeline.stages.guard import asked_checked
from proxy.protocol import jsonrpc
from proxy.tasks import modern
from proxy.tasks.ids import unknown_task
from proxy.tasks.relay import TERMINAL, Tasks, capability
from proxy.tasks.store import TaskRecord, TaskStoreError

__all__ = ["HELD", "HeldTasks"]

logger = logging.getLogger("proxy.tasks.held")

HELD: Final = "held:"  # a held task's "server task id": never a server's, never shown to a client
_POLL: Final = 0.5  # seconds between looks at the store for a task held by another replica
_CANCEL_WAIT: Final = 5.0  # seconds tasks/cancel waits for a cancelled call to end
_RELISTEN: Final = 5.0  # seconds before listening for cancels again after a surprise


@dataclass(slots=True)
class _Running:
    """One held call in progress on this replica."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    readers: list[Caller] = field(default_factory=list)  # the tasks/result requests open on it
    reader_came: anyio.Event = field(default_factory=anyio.Event)
    key: str = ""  # its record's store key: what a cancel told by another replica names


class _HeldCaller:
    """The caller of a held call once its request was answered: it is who the call's questions
    go to, through a ``tasks/result`` of the task's owner (waited for, as ``input_required``)."""

    def __init__(
        self, tasks: HeldTasks, origin: Caller, where: tuple[str, str], running: _Running, asked: Any = None
    ) -> None:
        self._tasks = tasks
        self._origin = origin
        self._where = where
        self._running = running
        self._asked = asked  # the guard stage's checks of the call's questions (Guardable)

    def guarded(self, asked: Any) -> _HeldCaller:
        return _HeldCaller(self._tasks, self._origin, self._where, self._running, asked)

    @property
    def session_id(self) -> str:
        return self._origin.session_id

    @property
    def capabilities(self) -> Mapping[str, Any]:
        return self._origin.capabilities

    @property
    def log_level(self) -> str | None:
        return None  # nobody is listening to the call's log lines: its request was answered

    @property
    def asleep(self) -> bool:
        return not self._running.readers

    @property
    def identity(self) -> Any:
        return self._origin.identity

    @property
    def stateless(self) -> bool:
        # Held by Manifold, whoever asked: its questions wait for the owner's tasks/result (a
        # 2026-07-28 caller has none: they time out, see the docs), never input_required results.
        return False

    def supports(self, method: str, params: dict[str, Any] | None) -> bool:
        return self._origin.supports(method, params)

    def notify(self, message: jsonrpc.Message) -> None:
        return None  # progress of a call whose request was answered: the task's status says it

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        return await asked_checked(self._asked, self.identity, method, params, self._ask)

    async def _ask(self, method: str, params: dict[str, Any] | None) -> Any:
        running = self._running
        await self._tasks.set_status(self._where, "input_required")
        try:
            while not running.readers:
                running.reader_came = anyio.Event()
                await running.reader_came.wait()
            reader = running.readers[-1]
            asked = dict(params or {})
            meta = asked.get("_meta")
            client_id = self._tasks.client_id(self._where)
            asked["_meta"] = {**(meta if isinstance(meta, dict) else {}), RELATED_TASK: {"taskId": client_id}}
            return await reader.request(method, asked)
        finally:
            await self._tasks.set_status(self._where, "working")


class HeldTasks(Tasks):
    """:class:`~proxy.tasks.relay.Tasks`, and calls held as tasks for the servers ``held`` names."""

    def __init__(self, *args: Any, held: Mapping[str, ServerConfig] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: Mapping[str, ServerConfig] = {}
        self.servers_changed(held or {})
        self._group: TaskGroup | None = None
        self._running: dict[tuple[str, str], _Running] = {}
        self._by_key: dict[str, tuple[str, str]] = {}  # running calls, by their record's key
        self._reread: Handler | None = None
        self._calls: dict[tuple[str, str], CallContext] = {}  # relayed tasks' calls, by server task
        self._asked: dict[tuple[str, str], Any] = {}  # their questions' checks (the guard stage's)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the held calls: they end (cancelled) when this does."""
        async with anyio.create_task_group() as group:
            self._group = group
            task_status.started()
            try:
                await self._listening()
            finally:
                self._group = None
                group.cancel_scope.cancel()

    async def _listening(self) -> None:
        """:meth:`_hear_cancels`, for as long as this runs: a surprise is logged, never fatal to
        the held calls (they go on; a cancel told meanwhile is read from the records after)."""
        while True:
            try:
                await self._hear_cancels()
            except Exception:
                logger.exception("hearing task cancels from other replicas failed; listening again")
            await anyio.sleep(_RELISTEN)

    async def _hear_cancels(self) -> None:
        """Cancel the held calls running here that another replica's ``tasks/cancel`` cancelled."""
        async with aclosing(self._store.cancels()) as told:
            async for key in told:
                if key:
                    self._stop(key)
                    continue
                # (Re)started listening: a cancel told meanwhile is in the records.
                for key in list(self._by_key):
                    try:
                        record = await self._store.get(key)
                    except TaskStoreError:
                        break  # the listening fails too, and starts again
                    if record is not None and record.task.get("status") == "cancelled":
                        self._stop(key)

    def _stop(self, key: str) -> None:
        where = self._by_key.get(key)
        running = self._running.get(where) if where is not None else None
        if running is not None:
            logger.debug("a held call to server %s was cancelled on another replica", where and where[0])
            running.scope.cancel()

    def servers_changed(self, servers: Mapping[str, ServerConfig]) -> None:
        """The servers (a config reload): which tools are held is theirs now. Calls held before
        run on, unless the reload restarts their server (a changed ``tasks`` setting does): then
        they fail as any call in flight to it does, and their tasks end ``failed``."""
        self._held = {sid: server for sid, server in servers.items() if server.holds_any}

    def running_tasks(self) -> set[str]:
        return super().running_tasks() | set(self._held)

    async def holds(self, ctx: CallContext) -> bool:
        """Whether a task asked of ``ctx``'s tool is Manifold's to hold: the tool is configured
        held, and its server would not run it as a task (it runs no tasks, or the tool says it
        may not run as one)."""
        server = self._held.get(ctx.server_id)
        if ctx.method != "tools/call" or server is None or ctx.entry is None:
            return False
        if not server.holds(ctx.entry.original_name):
            return False
        if not runs_as_task(ctx.entry.definition):
            return True
        connection = await self._connections.for_call(ctx.caller, ctx.server_id)
        return not capability(connection.capabilities)

    def client_id(self, where: tuple[str, str]) -> str:
        entry = self._local.get(where)
        return entry[0] if entry is not None else ""

    # ---- creation -------------------------------------------------------------------------

    def creating(self, pipeline: Handler, rereading: Sequence[Stage] = ()) -> Handler:
        """``pipeline`` with task-augmented calls held or relayed as tasks. ``rereading``: the
        pipeline's stages, which a relayed task's result passes through when it is read (all
        but those that ask a person or count the call: policy, validation, guardrails, rate
        limits apply again, to the result)."""
        relayed = super().creating(pipeline)
        kept = [s for s in rereading if _stage_name(s) not in _NOT_AT_READ]
        self._reread = compose(kept, _the_result) if kept else None

        async def call(ctx: CallContext) -> Any:
            group, stateless = self._group, ctx.caller.stateless
            # A 2026-07-28 caller asks for tasks by declaring the extension (no per-call opt-in).
            asked = modern.declares(ctx.caller.capabilities) if stateless else "task" in ctx.params
            if group is not None and ctx.method == "tools/call" and asked and await self.holds(ctx):
                if not stateless:
                    return await self._hold(ctx, pipeline, group)
                params = {k: v for k, v in ctx.params.items() if k != "task"}
                held = await self._hold(replace(ctx, params={**params, "task": {}}), pipeline, group)
                return modern.handle(held)
            answer = await relayed(ctx)
            task = answer.get("task") if isinstance(answer, dict) else None
            if isinstance(task, dict) and self._reread is not None:
                self._remember(ctx, task.get("taskId"))
            return answer

        return call

    def _remember(self, ctx: CallContext, client_id: object, asked: Any = None) -> None:
        """The call a relayed task was created by, to check its result against when it is read
        (and its questions, ``asked``: the guard stage's checks)."""
        where = next((w for w, entry in self._local.items() if entry[0] == client_id), None)
        if where is None:
            return
        if len(self._calls) >= self._max_local:
            self._calls = {w: c for w, c in self._calls.items() if w in self._local}
            self._asked = {w: a for w, a in self._asked.items() if w in self._local}
        if len(self._calls) < self._max_local:
            self._calls[where] = replace(ctx, params={k: v for k, v in ctx.params.items() if k != "task"})
            if asked is not None:
                self._asked[where] = asked

    def asked_of(self, record: TaskRecord) -> Any:
        return self._asked.get((record.server_id, record.server_task))

    async def _checked(self, record: TaskRecord, outcome: dict[str, Any]) -> dict[str, Any]:
        """A relayed task's outcome, the first time it is read from its server: its result passed
        through the call pipeline's checks again (on the replica that created the task)."""
        ctx = self._calls.get((record.server_id, record.server_task))
        if ctx is not None and self._reread is not None and "result" in outcome:
            token = _RESULT.set(outcome["result"])
            try:
                outcome = {"result": await self._reread(ctx)}
            except Exception as exc:  # refused at read time: the task's outcome is that refusal
                error = wire_error(exc, None)["error"]
                outcome = {"error": {"code": error["code"], "message": error["message"]}}
            finally:
                _RESULT.reset(token)
        return outcome

    async def _hold(self, ctx: CallContext, pipeline: Handler, group: TaskGroup) -> Any:
        asked = ctx.params["task"]
        if not isinstance(asked, dict):
            raise InvalidParams('"task" must be an object (task-augmented tools/call)')
        await self._store.room(fingerprint(ctx.caller.identity))  # refused before anything runs
        now = _now()
        task: dict[str, Any] = {
            "taskId": HELD + secrets.token_urlsafe(16),
            "status": "working",
            "createdAt": now,
            "lastUpdatedAt": now,
            "pollInterval": 1000,
        }
        if "ttl" in asked:
            task["ttl"] = asked["ttl"]
        answer = await self.created(ctx.caller, ctx.endpoint, ctx.server_id, {"task": task}, name=ctx.name)
        where = (ctx.server_id, task["taskId"])
        running = self._running[where] = _Running()
        params = {k: v for k, v in ctx.params.items() if k != "task"}
        held = replace(ctx, caller=_HeldCaller(self, ctx.caller, where, running), params=params)
        group.start_soon(self._run, held, pipeline, where, running)
        return answer

    async def _run(
        self, ctx: CallContext, pipeline: Handler, where: tuple[str, str], running: _Running
    ) -> None:
        record = await self._store.find(*where)
        outcome: dict[str, Any] | None = None
        if record is not None:
            running.key = record.key
            self._by_key[record.key] = where
        try:
            with running.scope:
                if record is None or record.task.get("status") == "cancelled":
                    return  # gone, or cancelled on another replica before it ran: it never runs
                running.scope.deadline = anyio.current_time() + max(record.expires - self._clock(), 0.0)
                try:
                    outcome = {"result": await pipeline(ctx)}
                except Exception as exc:  # the call's failure is the task's outcome, in wire words
                    if not isinstance(exc, ProtocolError | RemoteError | ServerUnavailable):
                        logger.exception("a held task's call to server %s failed", where[0])
                    error = wire_error(exc, None)["error"]
                    outcome = {"error": {"code": error["code"], "message": error["message"]}}
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._end(where, outcome)
            del self._running[where]
            self._by_key.pop(running.key, None)
            running.done.set()

    async def _end(self, where: tuple[str, str], outcome: dict[str, Any] | None) -> None:
        record = await self._store.find(*where)
        if record is None:
            return  # gone at its ttl
        if outcome is None or record.task.get("status") == "cancelled":
            record = replace(record, task={**record.task, "status": "cancelled", "lastUpdatedAt": _now()})
            outcome = {"error": {"code": -32603, "message": "the task was cancelled"}}
        record = await self._finished(replace(record, task={**record.task, "lastUpdatedAt": _now()}), outcome)
        self._announce(where, record)

    async def set_status(self, where: tuple[str, str], status: str) -> None:
        record = await self._store.find(*where)
        if record is None or record.task.get("status") in TERMINAL or record.task.get("status") == status:
            return
        record = record.updated({**record.task, "status": status, "lastUpdatedAt": _now()})
        await self._store.put(record)
        self._announce(where, record)

    def _announce(self, where: tuple[str, str], record: TaskRecord) -> None:
        """The task's status to the session that created it (:meth:`Tasks.status` routes it)."""
        task = {k: v for k, v in record.task.items() if k != "taskId"}
        self.status(
            where[0], jsonrpc.notification("notifications/tasks/status", {"taskId": where[1], **task})
        )

    # ---- tasks/* ----------------------------------------------------------------------------

    async def _get(self, inbound: Caller, record: TaskRecord, task_id: str) -> Any:
        if not record.server_task.startswith(HELD):
            return await super()._get(inbound, record, task_id)
        return self._shown(record, task_id)

    async def _result(self, inbound: Caller, record: TaskRecord, task_id: str) -> Any:
        if not record.server_task.startswith(HELD) or record.outcome is not None:
            return await super()._result(inbound, record, task_id)
        where = (record.server_id, record.server_task)
        running = self._running.get(where)
        if running is not None:  # here: wait for it, and answer its questions meanwhile
            running.readers.append(inbound)
            running.reader_came.set()
            try:
                await running.done.wait()
            finally:
                running.readers.remove(inbound)
        while True:  # (also) held by another replica: its outcome reaches the store
            found = await self._store.get(record.key)
            if found is None:
                raise unknown_task()  # its ttl ended
            if found.outcome is not None:
                return await super()._result(inbound, found, task_id)
            await anyio.sleep(_POLL)

    async def _cancel(self, inbound: Caller, record: TaskRecord, task_id: str) -> Any:
        if not record.server_task.startswith(HELD):
            return await super()._cancel(inbound, record, task_id)
        status = record.task.get("status")
        if record.outcome is not None or status in TERMINAL:
            raise InvalidParams(f"Cannot cancel task: already in terminal status {status!r}")
        record = record.updated({**record.task, "status": "cancelled", "lastUpdatedAt": _now()})
        await self._store.put(record)
        running = self._running.get((record.server_id, record.server_task))
        if running is not None:
            running.scope.cancel()
            with anyio.move_on_after(_CANCEL_WAIT):
                await running.done.wait()
        else:  # its call runs on another replica (or ended): the one running it stops it
            try:
                await self._store.cancelled(record.key)
            except TaskStoreError as exc:  # it reads the record later (RECHECK): cancelled still
                logger.warning("a held task's cancel was not told to the other replicas: %s", exc)
        found = await self._store.get(record.key)
        return self._shown(found or record, task_id)


_NOT_AT_READ: Final = frozenset({"Measure", "Confirm", "SignInStage", "confirm", "sign_in"})
_RESULT: ContextVar[Any] = ContextVar("proxy.tasks.held.result")


def _stage_name(stage: Stage) -> str:
    """A stage's class name, or its span name when tracing wraps it (:mod:`proxy.pipeline.stages.traced`)."""
    name = getattr(stage, "name", None)
    return name if isinstance(name, str) else type(stage).__name__


async def _the_result(ctx: CallContext) -> Any:
    """The end of the pipeline a task's result is re-read through: the result, not the server."""
    return _RESULT.get()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
