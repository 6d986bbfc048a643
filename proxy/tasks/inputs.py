"""A handshake-era task's questions, for its 2026-07-28 owner: ``input_required`` across the bridge.

A 2025-11-25 server whose task needs input sets the task ``input_required`` and asks its question
(``elicitation/create``, ``sampling/createMessage``, with the task in the related-task ``_meta``)
on a ``tasks/result`` its client holds open. A 2026-07-28 client has no ``tasks/result``: it polls
``tasks/get``, reads the questions as the task's ``inputRequests`` and answers with
``tasks/update``'s ``inputResponses``. So when a ``tasks/get`` of the owner's finds the task
``input_required``, Manifold opens that ``tasks/result`` itself, through the relay
(:meth:`proxy.tasks.relay.Tasks.request`, so the outcome is kept and checked as any reader's), with
a :class:`~proxy.pipeline.bridge.parking.ParkedCall` as the client it asks: the call-parking
bridge holds the server's questions (keys ``elicitation-1`` …, unique over the task's life;
bounded in count and size, ``limits.max_held_questions``, ``limits.max_question_bytes``) until
``tasks/update`` answers them.

- ``tasks/get`` shows the questions held and unanswered as ``inputRequests`` with status
  ``input_required``; a task whose server says ``input_required`` while Manifold holds no
  question of it (none asked yet, or all answered and the server not yet on) is ``working``.
- ``tasks/update`` answers: only the keys held, each with its result's shape; anything else (a key
  never asked, or already answered, a malformed answer) refuses the whole update (``-32602``),
  and nothing reaches the server.
- The owner only: the task's id is opened for the caller's identity and endpoint first.
- The server going away while its ``tasks/result`` is open fails that task (``failed``, a
  JSON-RPC error inlined), nothing else.

One reader per task, on the replica whose ``tasks/get`` opened it: another replica's ``tasks/get``
opens its own after this one's ended (a question asked on this replica is answered here).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final, Protocol

import anyio

from proxy.core.errors import INTERNAL_ERROR, InvalidParams, ProtocolError, RemoteError, ServerUnavailable
from proxy.pipeline.bridge.parking import ParkedCall, ParkedCalls
from proxy.pipeline.context import Caller
from proxy.policy.model import Identity
from proxy.protocol.asks import answer_problem
from proxy.protocol.jsonrpc import Message

__all__ = ["TaskQuestions"]

logger = logging.getLogger("proxy.tasks.inputs")

_TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
_FIRST_QUESTION: Final = 1.0  # seconds a tasks/get waits for the question of a task just seen asking
_SHOWN_KEYS: Final = 8  # unknown keys named back in a refusal, at most
_RECORD_WAIT: Final = 5.0  # seconds to record a task failed when its server went away


class Relay(Protocol):
    """The task relay (:class:`proxy.tasks.relay.Tasks`) a task's result is read through."""

    async def request(
        self, inbound: Caller, endpoint: str, method: str, params: Mapping[str, Any]
    ) -> Any: ...

    async def failed(self, inbound: Caller, endpoint: str, task_id: str, error: dict[str, Any]) -> None: ...


class _Asker:
    """The client of a ``tasks/result`` Manifold holds open: who it is (identity, era, declared
    capabilities) is the owner's request that opened it; its questions go to the parked call."""

    def __init__(self, call: ParkedCall, owner: Caller) -> None:
        self._call = call
        self._owner = owner

    @property
    def session_id(self) -> str:
        return self._call.session_id

    @property
    def capabilities(self) -> Mapping[str, Any]:
        return self._owner.capabilities

    @property
    def log_level(self) -> str | None:
        return None  # nobody listens to a held tasks/result's log lines

    @property
    def asleep(self) -> bool:
        # A server names the task its questions are about (related-task _meta), and such a
        # question finds this reader by it (ServerConnection: waiting_on); one that names no
        # task is most likely another call's, so this one, open for as long as the task runs,
        # does not make it unattributable.
        return True

    @property
    def identity(self) -> Identity:
        return self._owner.identity

    @property
    def stateless(self) -> bool:
        return self._owner.stateless

    def supports(self, method: str, params: dict[str, Any] | None) -> bool:
        return self._owner.supports(method, params)

    def notify(self, message: Message) -> None:
        return None  # the task's status says how it goes

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        return await self._call.request(method, params)


class TaskQuestions:
    """The ``tasks/result`` readers Manifold holds open for 2026-07-28 owners, by task (store key).
    ``parked``: where they run (None: nowhere, questions are never shown)."""

    def __init__(self, parked: ParkedCalls | None, *, first_question: float = _FIRST_QUESTION) -> None:
        self._parked = parked
        self._first_question = first_question
        self._readers: dict[str, ParkedCall] = {}

    def __len__(self) -> int:
        return len(self._readers)

    async def shown(
        self,
        tasks: Relay,
        inbound: Caller,
        endpoint: str,
        key: str,
        shown: dict[str, Any],
        ttl: float,
    ) -> dict[str, Any]:
        """``shown`` (a non-terminal task, as ``tasks/get`` answers it) with its questions: a
        reader opened when the server says ``input_required`` and none is open."""
        status = shown.get("status")
        reader = self._readers.get(key)
        if status in _TERMINAL:
            return shown
        if reader is None and status == "input_required" and self._parked is not None:
            reader = self._open(tasks, inbound, endpoint, key, str(shown["taskId"]), ttl)
        if reader is None:
            return shown
        if status == "input_required" and not reader.questions:
            with anyio.move_on_after(self._first_question):
                while not reader.questions and not reader.done.is_set():
                    await reader.changed.wait()
        if reader.fresh() and self._parked is not None:
            await self._parked.gather(reader)  # questions asked together are shown together
        pending = reader.pending()
        if pending:
            return {**shown, "status": "input_required", "inputRequests": pending}
        return {**shown, "status": "working"} if status == "input_required" else shown

    def answer(self, key: str, responses: Mapping[str, Any]) -> None:
        """Hand each answer to the server's question it is keyed by.

        Raises:
            InvalidParams: a key that names no question held for this task now, or an answer
                without its result's shape (nothing is answered then).
        """
        reader = self._readers.get(key)
        if reader is None and not responses:
            return
        held = reader.questions if reader is not None else {}
        unknown = [k for k in responses if k not in held]
        if unknown:
            named = [str(k)[:64] for k in unknown[:_SHOWN_KEYS]]
            raise InvalidParams(
                f"inputResponses names {len(unknown)} question(s) this task is not waiting on "
                f"({', '.join(map(repr, named))}): never asked, already answered, or given up; "
                "tasks/get shows those outstanding",
                data={"unknown": named, "outstanding": list(held)},
            )
        for name, answer in responses.items():
            method = held[name].method
            if (problem := answer_problem(method, answer)) is not None:
                raise InvalidParams(f"inputResponses[{name!r}] is not a {method} result: {problem}")
        if reader is not None:  # every key is one of its questions (none at all: nothing to do)
            for name, answer in responses.items():
                reader.answer(name, dict(answer))

    def _open(
        self, tasks: Relay, inbound: Caller, endpoint: str, key: str, task_id: str, ttl: float
    ) -> ParkedCall:
        assert self._parked is not None

        async def read(call: ParkedCall) -> Any:
            asker = _Asker(call, inbound)
            try:
                return await tasks.request(asker, endpoint, "tasks/result", {"taskId": task_id})
            except ServerUnavailable as exc:  # its server went away: the task with it
                logger.info("a task's server went away while it waited for input: %s", exc)
                error = {"code": INTERNAL_ERROR, "message": f"the task ended without a result: {exc}"}
                with anyio.move_on_after(_RECORD_WAIT, shield=True):
                    await tasks.failed(asker, endpoint, task_id, error)
                raise
            except Exception as exc:  # the task's own failure was kept by the relay; this is ours
                if not isinstance(exc, RemoteError | ProtocolError):
                    logger.warning("a task's result could not be read for its owner: %r", exc)
                raise
            finally:
                if self._readers.get(key) is call:
                    del self._readers[key]

        reader = self._parked.hold(inbound, read, ttl=ttl)
        self._readers[key] = reader
        return reader
