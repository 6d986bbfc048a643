"""A 2026-07-28 caller and a handshake-era server: parked calls (PLAN §5.1).

A handshake-era server asks its client questions *during* a call (``elicitation/create``,
``sampling/createMessage``, ``roots/list``). A 2026-07-28 client can be asked only by answering
its request with ``input_required`` and reading the answers from its retry. So Manifold keeps the
server's call running, *parked*, while the client answers:

1. The first request starts the call as a task of :class:`ParkedCalls` (the gateway owns it, so
   the call outlives the HTTP request that started it) and waits for its next event.
2. The server asks (through the call's :class:`ParkedCall`, its relay): the question is held, and
   the waiting request answers ``input_required`` with every question pending at that moment
   (keys ``elicitation-1``, ``sampling-2`` …) and a ``requestState`` naming the call and the round,
   sealed and bound to this caller and this request (:mod:`proxy.pipeline.bridge.state`).
3. The retry opens the state (else -32602), hands each answer to the server's question, and
   waits for the next event again: more questions (the next round), or the result.

Time limits: the server's own request timeout covers the whole call, as for a handshake-era
caller; a parked call nobody waits on lives ``ttl`` seconds after its client last left, then its
questions are answered with an error and the call is cancelled (``notifications/cancelled`` to
the server). A call that ended while nobody waited keeps its outcome for the retry as long.

Parked calls live in this process only: a retry that reaches another replica gets -32602, as
for an expired state. Run one replica, or route requests carrying a ``requestState`` back to
the replica that issued it.

On stdio, a handshake-era server's question does not say which call it is about: while two
callers have calls in flight on one shared connection, the connection cannot tell them apart and
refuses the question (``ServerConnection._relay_for``). A parked call stays in flight until its
client comes back or it expires, so :attr:`ParkedCall.asleep` says when it is unlikely to be the
one asking.
"""

from __future__ import annotations

import itertools
import logging
import math
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import anyio
import anyio.abc
import orjson

from proxy.config.sections import LimitsConfig
from proxy.core.errors import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    InvalidParams,
    InvalidRequestState,
    LimitExceeded,
    MethodNotFound,
    MissingCapability,
    RemoteError,
    ServerUnavailable,
)
from proxy.outbound.relay import Relay
from proxy.pipeline.bridge.mrtr import boundary_of
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import CallContext, Caller
from proxy.policy.model import Identity, IdentityKey
from proxy.protocol.asks import NEEDS
from proxy.protocol.jsonrpc import Message

__all__ = ["Connection", "ParkedCall", "ParkedCalls"]

logger = logging.getLogger("proxy.pipeline.bridge.parking")

# Questions a server asks together arrive within this of each other (a quiet spell this long ends
# the round), and a round gathers for at most _GATHER_SPELLS of them.
_SETTLE: Final = 0.05
_GATHER_SPELLS: Final = 20


class Connection(Protocol):
    """What a parked call needs of its :class:`~proxy.outbound.connection.ServerConnection`."""

    server_id: str

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        relay: Relay | None = None,
    ) -> Any: ...


class _Question:
    """One request of the server's, held until the client's retry answers it."""

    def __init__(self, key: str, method: str, params: dict[str, Any] | None) -> None:
        self.key, self.method, self.params = key, method, params
        self.shown = False  # in an input_required already
        self.settled = anyio.Event()
        self.answer: Any = None
        self.refusal: Exception | None = None

    def settle(self, answer: Any = None, refusal: Exception | None = None) -> None:
        if not self.settled.is_set():
            self.answer, self.refusal = answer, refusal
            self.settled.set()

    def as_input_request(self) -> dict[str, Any]:
        request: dict[str, Any] = {"method": self.method}
        if self.params is not None:
            request["params"] = self.params
        return request


class ParkedCall:
    """One call of a 2026-07-28 caller on a handshake-era server, and the
    :class:`~proxy.outbound.relay.Relay` its server's questions and notifications come back
    through: to the client request waiting on it (the first, then each retry), if any."""

    def __init__(
        self, call_id: str, caller: Caller, *, max_questions: int = 16, max_question_bytes: int = 256 * 1024
    ) -> None:
        self.id = call_id
        # What a server may hold at once (limits.max_held_questions), and how large each may be
        # (limits.max_question_bytes): a server's questions wait in Manifold's memory.
        self._max_questions, self._max_question_bytes = max_questions, max_question_bytes
        self.identity: Identity = caller.identity
        self.round = 0  # of the last input_required; a retry's state must name it
        self.asked = False  # an input_required went out: the call is parked, and counted
        self.questions: dict[str, _Question] = {}  # unanswered, by key
        self.scope = anyio.CancelScope()  # the call's lifetime; its deadline is the expiry
        self.done = anyio.Event()
        self.taken = anyio.Event()  # a client request took the outcome
        self.changed = anyio.Event()  # replaced each time it fires
        self._result: Any = None
        self._failure: Exception | None = None
        self._caller = caller  # the latest request: whose capabilities and log level count
        self._waiting: list[tuple[Caller, Any]] = []  # attached requests, progress tokens
        self._numbers = itertools.count(1)

    # ---- Relay ---------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return f"parked-{self.id}"  # one "session" per call, so questions are attributed to it

    @property
    def capabilities(self) -> Mapping[str, Any]:
        return self._caller.capabilities

    @property
    def log_level(self) -> str | None:
        return self._caller.log_level

    @property
    def asleep(self) -> bool:
        """Parked, its client away, and everything its server asked shown to that client: a
        question arriving now from a server that does not say which call it is about (stdio) is
        most likely another call's, which ``ServerConnection._relay_for`` could use to leave this
        one out rather than refuse the question as ambiguous."""
        return self.asked and not self._waiting and not self.fresh() and not self.done.is_set()

    def notify(self, message: Message) -> None:
        """To the request waiting now (log lines only if it opted in); dropped between requests."""
        if not self._waiting:
            return
        request, token = self._waiting[-1]
        if message["method"] == "notifications/progress":
            if token is None:
                return
            # The server's progress is about the first request's token; this request has its own.
            message = {**message, "params": {**(message.get("params") or {}), "progressToken": token}}
        request.notify(message)

    async def request(self, method: str, params: dict[str, Any] | None) -> Any:
        """Hold the server's question until a retry answers it.

        Raises:
            MethodNotFound: the client did not declare what it needs (its request fails with
                -32021 and the call is cancelled), or the call is over.
            RemoteError: the client never answered (expiry, it went away).
        """
        need = NEEDS.get(method)
        if need is None:
            raise MethodNotFound(f"Manifold cannot ask a 2026-07-28 client {method}")
        if self.done.is_set():
            raise MethodNotFound(f"the call this {method} is about has ended")
        if not self._caller.supports(method, params):
            url = method == "elicitation/create" and (params or {}).get("mode") == "url"
            self.end(
                MissingCapability(
                    f"{method} needs the client capability {'elicitation.url' if url else need!r}, "
                    "undeclared in the request",
                    required={"elicitation": {"url": {}}} if url else {need: {}},
                )
            )
            raise MethodNotFound(f"the client did not declare the capability {method} needs")
        self._bounded(method, params)
        question = _Question(f"{need}-{next(self._numbers)}", method, params)
        self.questions[question.key] = question
        self.signal()
        try:
            await question.settled.wait()  # bounded: the call's end settles every question
        finally:
            self.questions.pop(question.key, None)  # answered, or the server gave up asking
        if question.refusal is not None:
            raise question.refusal
        return question.answer

    def _bounded(self, method: str, params: dict[str, Any] | None) -> None:
        """Raises: LimitExceeded (the server's question is refused, the call goes on): it holds
        as many questions as it may, or this one is too large to hold."""
        if len(self.questions) >= self._max_questions:
            raise LimitExceeded(
                f"Manifold already holds {self._max_questions} unanswered questions of this call; "
                f"{method} refused",
                limit="max_held_questions",
                maximum=self._max_questions,
            )
        size = len(orjson.dumps(params))
        if size > self._max_question_bytes:
            raise LimitExceeded(
                f"{method} of {size} bytes is larger than Manifold holds for a client",
                limit="max_question_bytes",
                maximum=self._max_question_bytes,
            )

    def pending(self) -> dict[str, dict[str, Any]]:
        """Every question held now, as ``inputRequests`` (marked shown)."""
        for question in self.questions.values():
            question.shown = True
        return {key: q.as_input_request() for key, q in self.questions.items()}

    # ---- the call's state ----------------------------------------------------------------

    def signal(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    def fresh(self) -> bool:
        """Whether the server asked something no input_required has shown yet."""
        return any(not q.shown for q in self.questions.values())

    def finish(self, result: Any = None, failure: Exception | None = None) -> None:
        if not self.done.is_set():
            self._result, self._failure = result, failure
            self.done.set()
            self.signal()

    def end(self, failure: Exception) -> None:
        """Fail the call for its client, and cancel it at the server."""
        self.finish(failure=failure)
        self.scope.cancel()

    def outcome(self) -> Any:
        self.taken.set()
        if self._failure is not None:
            raise self._failure
        return self._result

    def answer(self, key: str, answer: Any) -> None:
        self.questions.pop(key).settle(answer)

    def settle_all(self, code: int, reason: str) -> None:
        """Answer every question still held with an error (the server is waiting on them)."""
        held, self.questions = self.questions, {}
        for question in held.values():
            question.settle(refusal=RemoteError("client", {"code": code, "message": reason}))

    def attach(self, request: Caller, progress_token: Any) -> None:
        """A client request waits on the call now: it gets its notifications, and no expiry runs."""
        self._waiting.append((request, progress_token))
        self._caller = request
        self.scope.deadline = math.inf

    def detach(self, request: Caller, ttl: float) -> None:
        self._waiting = [(r, t) for r, t in self._waiting if r is not request]
        if not self._waiting:
            self.scope.deadline = anyio.current_time() + ttl


class ParkedCalls:
    """Every parked call of this process, run in one task group the gateway owns (:meth:`run`).

    ``ttl``: how long a call waits for its client to come back. ``per_identity``, ``total``:
    how many calls may be parked (an input_required out, the retry not yet in, or its outcome
    not yet taken) at once, per caller and altogether (``limits.max_parked_calls``); past them a
    call that would park is cancelled at its server and fails with :class:`LimitExceeded`.
    ``settle``: how quiet the server must have been since its last question before the
    questions go out, so that questions a server asks together (one after another off a pipe,
    the machine busy or not) go out in one ``input_required``; a round gathers for at most
    ``_GATHER_SPELLS`` times that.
    """

    def __init__(
        self,
        states: RequestStates,
        *,
        ttl: float = 300.0,
        per_identity: int = 16,
        total: int = 1024,
        settle: float = _SETTLE,
        max_questions: int = 16,
        max_question_bytes: int = 256 * 1024,
    ) -> None:
        self._states = states
        self._bounds = {"max_questions": max_questions, "max_question_bytes": max_question_bytes}
        self._ttl = ttl
        self._per_identity = min(per_identity, total)
        self._total = total
        self._settle = settle
        self._calls: dict[str, ParkedCall] = {}
        self._parked: Counter[IdentityKey] = Counter()  # parked calls per identity (its key)
        self._tg: anyio.abc.TaskGroup | None = None

    @classmethod
    def limited(cls, states: RequestStates, limits: LimitsConfig) -> ParkedCalls:
        """Parked calls as ``limits`` bound them."""
        return cls(
            states,
            total=limits.max_parked_calls,
            max_questions=limits.max_held_questions,
            max_question_bytes=limits.max_question_bytes,
        )

    def __len__(self) -> int:
        return len(self._calls)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the parked calls until cancelled (then every call still running is cancelled)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._tg = None

    async def call(self, connection: Connection, ctx: CallContext) -> Any:
        """Run ``ctx`` until its result, or until the server asks something (``input_required``).

        Raises:
            InvalidRequestState: a retry's state is not one issued for this request and caller,
                or names a call that is over, or a round that is not the call's current one.
            InvalidParams: an answer in ``inputResponses`` is not an object.
            MissingCapability: the server asked for something the client did not declare.
            LimitExceeded: the call would park, and too many are parked already
                (``limits.max_parked_calls``, in all or for this caller).
            ServerUnavailable, ServerTimeout, RemoteError: from the server, as for any call.
        """
        token = _progress_token(ctx.params)
        if "requestState" not in ctx.params:
            parked = self._start(connection, ctx)
            return await self._next(parked, ctx, token, reask=False)
        parked = self._resume(ctx)
        answers = _answers(ctx.params, parked)
        for key, answer in answers.items():
            parked.answer(key, answer)
        return await self._next(parked, ctx, token, reask=bool(parked.questions))

    def _start(self, connection: Connection, ctx: CallContext) -> ParkedCall:
        if self._tg is None:
            raise ServerUnavailable(connection.server_id, "Manifold is shutting down")
        params = {k: v for k, v in ctx.params.items() if k not in ("inputResponses", "requestState")}
        parked = ParkedCall(secrets.token_urlsafe(16), ctx.caller, **self._bounds)
        self._calls[parked.id] = parked
        self._tg.start_soon(self._drive, parked, connection, ctx.method, params)
        return parked

    def hold(self, caller: Caller, ask: Callable[[ParkedCall], Awaitable[Any]], *, ttl: float) -> ParkedCall:
        """Run ``ask`` (a request that has its server's questions come back through the
        :class:`ParkedCall` it is given) in this group, at most ``ttl`` seconds: its questions are
        held for whoever answers them (:meth:`ParkedCall.pending`, :meth:`ParkedCall.answer`),
        its outcome kept in it. What a request that outlives its client does (a task's
        ``tasks/result`` that Manifold keeps open for a 2026-07-28 caller).

        Raises:
            ServerUnavailable: Manifold is shutting down.
        """
        if self._tg is None:
            raise ServerUnavailable("manifold", "Manifold is shutting down")
        parked = ParkedCall(secrets.token_urlsafe(16), caller, **self._bounds)
        parked.scope.deadline = anyio.current_time() + ttl
        self._tg.start_soon(self._held, parked, ask)
        return parked

    @staticmethod
    async def _held(parked: ParkedCall, ask: Callable[[ParkedCall], Awaitable[Any]]) -> None:
        try:
            with parked.scope:
                try:
                    parked.finish(await ask(parked))
                except Exception as exc:  # its holder's to read
                    parked.finish(failure=exc)
        finally:
            cancelled = {"code": CONNECTION_CLOSED, "message": "Manifold stopped waiting for the answer"}
            parked.finish(failure=RemoteError("manifold", cancelled))
            parked.settle_all(CONNECTION_CLOSED, "the request this question is about has ended")

    def _resume(self, ctx: CallContext) -> ParkedCall:
        sealed = self._states.open(ctx.params["requestState"], boundary_of(ctx))
        parked = self._calls.get(sealed.payload) if sealed.kind == "parked" else None
        if parked is None or sealed.round != parked.round or parked.identity != ctx.caller.identity:
            raise InvalidRequestState()
        return parked

    async def _drive(
        self, parked: ParkedCall, connection: Connection, method: str, params: dict[str, Any]
    ) -> None:
        """The call's lifetime: the server's call, then its outcome kept until a client takes it.
        The scope's deadline (``ttl`` after the last client left) ends it either way."""
        try:
            with parked.scope:
                try:
                    parked.finish(await connection.request(method, params, relay=parked))
                except Exception as exc:  # the client's to hear, as from any call
                    parked.finish(failure=exc)
                parked.settle_all(CONNECTION_CLOSED, "the call this request is about has ended")
                await parked.taken.wait()
            if not parked.done.is_set():  # end() finishes before it cancels: this is the deadline
                logger.info("parked call %s expired: its client did not come back", parked.id[:8])
                parked.settle_all(REQUEST_TIMEOUT, f"the client did not answer within {self._ttl:g}s")
        finally:
            parked.finish(failure=InvalidRequestState())  # for a retry racing the expiry
            parked.settle_all(CONNECTION_CLOSED, "the call this request is about was cancelled")
            del self._calls[parked.id]
            if parked.asked:
                self._parked[parked.identity.key] -= 1
                if not self._parked[parked.identity.key]:
                    del self._parked[parked.identity.key]

    async def _next(self, parked: ParkedCall, ctx: CallContext, token: Any, *, reask: bool) -> Any:
        """Wait for the call's next event: its outcome, or questions to answer ``input_required``
        with (at once when ``reask``: the retry left some unanswered)."""
        parked.attach(ctx.caller, token)
        try:
            settled = False
            while True:
                changed = parked.changed
                if parked.done.is_set():
                    return parked.outcome()
                if parked.fresh() and not settled:
                    settled = True
                    await self.gather(parked)
                    continue
                if parked.fresh() or (reask and parked.questions):
                    return self._input_required(parked, ctx)
                await changed.wait()
        except anyio.get_cancelled_exc_class():
            if not parked.asked:  # the client left before it could have been asked anything
                parked.end(InvalidRequestState())
            raise
        finally:
            parked.detach(ctx.caller, self._ttl)

    async def gather(self, parked: ParkedCall) -> None:
        """Wait until the server has asked nothing for ``settle`` seconds, or the call ended."""
        with anyio.move_on_after(self._settle * _GATHER_SPELLS):
            while not parked.done.is_set():
                changed = parked.changed
                with anyio.move_on_after(self._settle) as quiet:
                    await changed.wait()
                if quiet.cancelled_caught:
                    return

    def _input_required(self, parked: ParkedCall, ctx: CallContext) -> dict[str, Any]:
        """Raises: LimitExceeded: parking this call would hold more than the limits allow."""
        if not parked.asked:
            mine = self._parked[parked.identity.key] >= self._per_identity
            if mine or self._parked.total() >= self._total:
                whose = "of this caller" if mine else "in all"
                refusal = LimitExceeded(
                    f"Manifold already holds {self._per_identity if mine else self._total} calls {whose} "
                    f"waiting for a client to answer a server's question (at most {self._per_identity} "
                    f"per caller, {self._total} in all); answer or abandon some: each expires "
                    f"{self._ttl:g}s after its client last left",
                    limit="max_parked_calls",
                    maximum=self._total,
                    data={"per_caller": self._per_identity},
                    said=True,
                )
                parked.end(refusal)
                raise refusal
            parked.asked = True
            self._parked[parked.identity.key] += 1
        if parked.fresh():
            parked.round += 1
        for question in parked.questions.values():
            question.shown = True
        state = self._states.seal(boundary_of(ctx), "parked", parked.id, parked.round)
        return {
            "resultType": "input_required",
            "inputRequests": {key: q.as_input_request() for key, q in parked.questions.items()},
            "requestState": state,
        }


def _progress_token(params: Mapping[str, Any]) -> Any:
    meta = params.get("_meta")
    return meta.get("progressToken") if isinstance(meta, Mapping) else None


def _answers(params: Mapping[str, Any], parked: ParkedCall) -> dict[str, Any]:
    """The retry's answers to the questions the call holds; other keys are ignored.

    Raises:
        InvalidParams: ``inputResponses`` is not an object, or an answer to a held question is
            not one (nothing is answered then).
    """
    responses = params.get("inputResponses", {})
    if not isinstance(responses, Mapping):
        raise InvalidParams('"inputResponses" must be an object of answers by key')
    answers: dict[str, Any] = {}
    for key, question in parked.questions.items():
        if key in responses:
            if not isinstance(responses[key], dict):
                raise InvalidParams(
                    f"inputResponses[{key!r}] must be the result of {question.method} (an object)"
                )
            answers[key] = responses[key]
    return answers
