"""Parked calls, transcript by transcript: a 2026-07-28 caller, a handshake-era server (a fake that
asks through the relay as ``ServerConnection`` does: each question in a task of its own)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from proxy.clients.session import InboundRequest, StatelessCaller
from proxy.core.errors import (
    InvalidParams,
    InvalidRequestState,
    LimitExceeded,
    MissingCapability,
    RemoteError,
)
from proxy.observe.boundary import wire_error
from proxy.outbound.relay import Relay
from proxy.pipeline.bridge.mrtr import boundary_of
from proxy.pipeline.bridge.parking import ParkedCalls
from proxy.pipeline.bridge.state import RequestStates, Sealed
from proxy.pipeline.context import CallContext
from proxy.policy.model import Identity
from proxy.protocol import versions
from proxy.protocol.jsonrpc import Message
from tests.protocol.schemas import validator

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset({"dev"}), "api_key")
BOB = Identity("bob", frozenset({"dev"}), "api_key")
CAROL = Identity("carol", frozenset(), "api_key")
# ALICE's name and roles from a token: another principal, whose calls and states are its own.
TOKEN_ALICE = Identity("alice", frozenset({"dev"}), "jwt", issuer="https://id.example")
PARTNER_ALICE = Identity("alice", frozenset({"dev"}), "jwt", issuer="https://partner.example")
EVERYTHING: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}
FORM = {
    "message": "Your name?",
    "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
}
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "Hi"}}], "maxTokens": 5}
NAME = {"action": "accept", "content": {"name": "Ada"}}
TEXT = {"role": "assistant", "content": {"type": "text", "text": "Hello"}, "model": "m"}
ROOTS = {"roots": [{"uri": "file:///work"}]}
KEY = b"k" * 32

Script = Callable[["Server", Relay, dict[str, Any]], Awaitable[Any]]


class Server:
    """A handshake-era server behind a connection: its call runs ``script``, which may ask."""

    server_id = "fx"

    def __init__(self, script: Script) -> None:
        self.script = script
        self.relays: list[Relay] = []
        self.got: list[tuple[str, Any]] = []  # what each question was answered: result or error
        self.cancelled = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        relay: Relay | None = None,
    ) -> Any:
        assert relay is not None
        assert params is not None
        assert "requestState" not in params
        assert "inputResponses" not in params
        self.relays.append(relay)
        try:
            return await self.script(self, relay, params)
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise

    async def ask(self, relay: Relay, method: str, params: dict[str, Any] | None) -> Any:
        """As the connection relays a server's request: in its own task, outside the call's."""
        done = anyio.Event()
        box: dict[str, Any] = {}

        async def relayed() -> None:
            try:
                box["result"] = await relay.request(method, params)
            except Exception as exc:
                box["error"] = wire_error(exc, 0)["error"]
            self.got.append(("error", box["error"]) if "error" in box else ("result", box["result"]))
            done.set()

        assert self._tg is not None
        self._tg.start_soon(relayed)
        await done.wait()
        if "error" in box:
            raise RemoteError("client", box["error"])
        return box["result"]


async def one_question(server: Server, relay: Relay, params: dict[str, Any]) -> Any:
    answer = await server.ask(relay, "elicitation/create", FORM)
    return {"content": [{"type": "text", "text": f"hello {answer['content']['name']}"}]}


async def three_at_once(server: Server, relay: Relay, params: dict[str, Any]) -> Any:
    answers: dict[str, Any] = {}

    async def ask(method: str, request: dict[str, Any] | None) -> None:
        answers[method] = await server.ask(relay, method, request)

    async with anyio.create_task_group() as tg:
        asked: list[tuple[str, dict[str, Any] | None]] = [
            ("elicitation/create", FORM),
            ("sampling/createMessage", SAMPLE),
        ]
        for method, request in asked:
            tg.start_soon(ask, method, request)
            for _ in range(5):  # the next question comes a little later, as read off a pipe
                await anyio.lowlevel.checkpoint()
        tg.start_soon(ask, "roots/list", None)
    return {"answers": answers}


async def three_spread_out(server: Server, relay: Relay, params: dict[str, Any]) -> Any:
    """Three questions, each 0.3 s after the last: a busy server, or a busy machine."""
    answers: dict[str, Any] = {}

    async def ask(method: str, request: dict[str, Any] | None) -> None:
        answers[method] = await server.ask(relay, method, request)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "elicitation/create", FORM)
        await anyio.sleep(0.3)
        tg.start_soon(ask, "sampling/createMessage", SAMPLE)
        await anyio.sleep(0.3)
        tg.start_soon(ask, "roots/list", None)
    return {"answers": answers}


async def two_rounds(server: Server, relay: Relay, params: dict[str, Any]) -> Any:
    first = await server.ask(relay, "elicitation/create", FORM)
    second = await server.ask(relay, "sampling/createMessage", SAMPLE)
    return {"answers": [first, second]}


async def no_question(server: Server, relay: Relay, params: dict[str, Any]) -> Any:
    return {"echo": params["arguments"]}


_ids = itertools.count(1)


def context(
    params: dict[str, Any] | None = None,
    *,
    identity: Identity = ALICE,
    capabilities: dict[str, Any] | None = None,
    log_level: str | None = None,
    name: str = "fx.ask",
    sink: list[Message] | None = None,
) -> CallContext:
    session = StatelessCaller(
        id=f"request-{next(_ids)}",
        transport="http",
        protocol_version=versions.LATEST_STATELESS,
        capabilities=EVERYTHING if capabilities is None else capabilities,
        identity=identity,
        log_level=log_level,
    )
    inbound = InboundRequest(session, None if sink is None else sink.append)
    params = {"name": "ask", "arguments": {"a": 1}} if params is None else params
    return CallContext(inbound, next(_ids), "tools/call", "fx", name, params)


def retry(state: str, answers: Any, **changes: Any) -> dict[str, Any]:
    return {"name": "ask", "arguments": {"a": 1}, "inputResponses": answers, "requestState": state, **changes}


@asynccontextmanager
async def running(script: Script, **options: Any) -> AsyncIterator[tuple[ParkedCalls, Server]]:
    server = Server(script)
    options.setdefault("settle", 0.02)
    parked = ParkedCalls(RequestStates(KEY, ttl=600), **options)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(parked.run)

            async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                async with anyio.create_task_group() as questions:
                    server._tg = questions
                    task_status.started()
                    await anyio.sleep_forever()

            await tg.start(serve)
            yield parked, server
            tg.cancel_scope.cancel()


async def settled() -> None:
    """Every task has run as far as it can (the parked call's lifetime has ended, say)."""
    await anyio.wait_all_tasks_blocked()


def opened(state: str) -> Sealed:
    return RequestStates(KEY, ttl=600).open(state, boundary_of(context()))


def input_required(result: Any) -> dict[str, Any]:
    validator(versions.LATEST_STATELESS, "InputRequiredResult")(result)
    assert result["resultType"] == "input_required"
    assert isinstance(result, dict)
    return result


async def test_a_call_that_asks_nothing_returns_its_result_and_parks_nothing() -> None:
    async with running(no_question) as (parked, server):
        assert await parked.call(server, context()) == {"echo": {"a": 1}}
        await settled()
        assert len(parked) == 0


@pytest.mark.parametrize(
    "first_params",
    [
        pytest.param({"name": "ask", "arguments": {"a": 1}}, id="plain"),
        # Answers without a state answer nothing yet: the server never sees them (it cannot).
        pytest.param({"name": "ask", "arguments": {"a": 1}, "inputResponses": {"x": 12345}}, id="unasked"),
    ],
)
async def test_a_question_becomes_input_required_and_the_retry_completes_the_call(
    first_params: dict[str, Any],
) -> None:
    async with running(one_question) as (parked, server):
        first = input_required(await parked.call(server, context(first_params)))
        assert first["inputRequests"] == {"elicitation-1": {"method": "elicitation/create", "params": FORM}}
        sealed = opened(first["requestState"])
        assert (sealed.kind, sealed.round) == ("parked", 1)
        assert len(parked) == 1

        result = await parked.call(server, context(retry(first["requestState"], {"elicitation-1": NAME})))
        assert result == {"content": [{"type": "text", "text": "hello Ada"}]}
        assert server.got == [("result", NAME)]
        await settled()
        assert len(parked) == 0
        assert not server.cancelled.is_set()


async def test_questions_asked_together_come_in_one_input_required() -> None:
    async with running(three_at_once) as (parked, server):
        first = input_required(await parked.call(server, context()))
        methods = {key: request["method"] for key, request in first["inputRequests"].items()}
        assert sorted(methods.values()) == ["elicitation/create", "roots/list", "sampling/createMessage"]
        assert {key.split("-")[0] for key in methods} == {"elicitation", "sampling", "roots"}
        by_method = {"elicitation/create": NAME, "sampling/createMessage": TEXT, "roots/list": ROOTS}
        answers = {key: by_method[method] for key, method in methods.items()}
        result = await parked.call(server, context(retry(first["requestState"], answers)))
        assert result == {"answers": by_method}


@pytest.mark.slow
async def test_questions_go_out_after_a_quiet_spell_not_a_fixed_wait() -> None:
    """0.6 s from the first question to the last, no gap as long as the 0.5 s quiet spell: one
    round (a fixed wait of one spell after the first question would leave the last out)."""
    async with running(three_spread_out, settle=0.5) as (parked, server):
        first = input_required(await parked.call(server, context()))
        methods = sorted(request["method"] for request in first["inputRequests"].values())
        assert methods == ["elicitation/create", "roots/list", "sampling/createMessage"]


async def test_a_retry_without_an_answer_is_asked_again_and_extra_keys_are_ignored() -> None:
    async with running(one_question) as (parked, server):
        first = input_required(await parked.call(server, context()))
        again = input_required(
            await parked.call(server, context(retry(first["requestState"], {"wrong_key": NAME})))
        )
        assert again["inputRequests"] == first["inputRequests"]
        assert opened(again["requestState"]).round == 1
        assert server.got == []
        answers = {"elicitation-1": NAME, "unasked": {"x": 1}}
        result = await parked.call(server, context(retry(again["requestState"], answers)))
        assert result == {"content": [{"type": "text", "text": "hello Ada"}]}


async def test_a_question_after_a_retry_starts_a_new_round_and_the_old_state_goes_stale() -> None:
    async with running(two_rounds) as (parked, server):
        first = input_required(await parked.call(server, context()))
        second = input_required(
            await parked.call(server, context(retry(first["requestState"], {"elicitation-1": NAME})))
        )
        assert second["requestState"] != first["requestState"]
        assert second["inputRequests"] == {
            "sampling-2": {"method": "sampling/createMessage", "params": SAMPLE}
        }
        with pytest.raises(InvalidRequestState):  # round 1 is over
            await parked.call(server, context(retry(first["requestState"], {"sampling-2": TEXT})))
        result = await parked.call(server, context(retry(second["requestState"], {"sampling-2": TEXT})))
        assert result == {"answers": [NAME, TEXT]}


def _tampered(state: str) -> str:
    return state + "-TAMPERED"


def _forged_id(state: str) -> str:
    return RequestStates(KEY, ttl=600).seal(boundary_of(context()), "parked", "no-such-call", 1)


def _server_kind(state: str) -> str:  # a wrapped server state, naming the parked call
    return RequestStates(KEY, ttl=600).seal(boundary_of(context()), "server", opened(state).payload, 1)


@pytest.mark.parametrize(
    ("change", "ctx_options", "params"),
    [
        pytest.param(_tampered, {}, {}, id="tampered"),
        pytest.param(None, {"identity": BOB}, {}, id="another-identity"),
        pytest.param(None, {}, {"arguments": {"a": 2}}, id="other-arguments"),
        pytest.param(None, {"name": "fx.other"}, {}, id="another-tool"),
        pytest.param(_forged_id, {}, {}, id="unknown-call"),
        pytest.param(_server_kind, {}, {}, id="a-server-state"),
    ],
)
async def test_a_retry_with_a_state_not_issued_for_it_is_refused_and_the_call_stays_parked(
    change: Callable[[str], str] | None, ctx_options: dict[str, Any], params: dict[str, Any]
) -> None:
    async with running(one_question) as (parked, server):
        first = input_required(await parked.call(server, context()))
        state = first["requestState"] if change is None else change(first["requestState"])
        with pytest.raises(InvalidRequestState) as refused:
            await parked.call(server, context(retry(state, {"elicitation-1": NAME}, **params), **ctx_options))
        assert wire_error(refused.value, 2, stateless=True)["error"]["code"] == -32602
        assert server.got == []
        result = await parked.call(server, context(retry(first["requestState"], {"elicitation-1": NAME})))
        assert result == {"content": [{"type": "text", "text": "hello Ada"}]}


@pytest.mark.parametrize("answer", [12345, None, "yes", [NAME]])
async def test_a_malformed_answer_is_invalid_params_naming_its_key_and_answers_nothing(answer: Any) -> None:
    async with running(one_question) as (parked, server):
        first = input_required(await parked.call(server, context()))
        with pytest.raises(InvalidParams) as refused:
            await parked.call(server, context(retry(first["requestState"], {"elicitation-1": answer})))
        assert "elicitation-1" in refused.value.message
        assert server.got == []
        with pytest.raises(InvalidParams):
            await parked.call(server, context(retry(first["requestState"], None)))
        result = await parked.call(server, context(retry(first["requestState"], {"elicitation-1": NAME})))
        assert result == {"content": [{"type": "text", "text": "hello Ada"}]}


@pytest.mark.parametrize(
    ("capabilities", "form", "required"),
    [
        pytest.param({"sampling": {}}, FORM, {"elicitation": {}}, id="no-elicitation"),
        pytest.param({"elicitation": {}}, {**FORM, "mode": "url"}, {"elicitation": {"url": {}}}, id="no-url"),
    ],
)
async def test_an_undeclared_capability_fails_the_call_with_32021_and_the_server_hears_32601(
    capabilities: dict[str, Any], form: dict[str, Any], required: dict[str, Any]
) -> None:
    async def ask(server: Server, relay: Relay, params: dict[str, Any]) -> Any:
        return await server.ask(relay, "elicitation/create", form)

    async with running(ask) as (parked, server):
        with pytest.raises(MissingCapability) as refused:
            await parked.call(server, context(capabilities=capabilities))
        assert refused.value.code == -32021
        assert refused.value.data == {"requiredCapabilities": required}
        await server.cancelled.wait()
        await settled()
        assert [(kind, error["code"]) for kind, error in server.got] == [("error", -32601)]
        assert len(parked) == 0


async def test_an_unanswered_call_expires_answering_the_server_with_an_error_and_cancelling_it() -> None:
    async with running(one_question, ttl=0.05) as (parked, server):
        first = input_required(await parked.call(server, context()))
        await server.cancelled.wait()
        await settled()
        assert [(kind, error["code"]) for kind, error in server.got] == [("error", -32001)]
        assert len(parked) == 0
        with pytest.raises(InvalidRequestState):
            await parked.call(server, context(retry(first["requestState"], {"elicitation-1": NAME})))


async def test_a_client_leaving_before_any_question_cancels_the_call() -> None:
    started = anyio.Event()

    async def slow(server: Server, relay: Relay, params: dict[str, Any]) -> Any:
        started.set()
        await anyio.sleep_forever()

    async with running(slow) as (parked, server):
        async with anyio.create_task_group() as tg:
            tg.start_soon(parked.call, server, context())
            await started.wait()
            tg.cancel_scope.cancel()
        await settled()
        assert server.cancelled.is_set()
        assert len(parked) == 0


async def test_a_retry_leaving_keeps_the_call_and_the_result_waits_for_the_next_retry() -> None:
    go = anyio.Event()

    async def answer_then_wait(server: Server, relay: Relay, params: dict[str, Any]) -> Any:
        answer = await server.ask(relay, "elicitation/create", FORM)
        await go.wait()
        return {"name": answer["content"]["name"]}

    async with running(answer_then_wait) as (parked, server):
        first = input_required(await parked.call(server, context()))
        state = first["requestState"]
        async with anyio.create_task_group() as tg:
            tg.start_soon(parked.call, server, context(retry(state, {"elicitation-1": NAME})))
            await settled()
            assert server.got == [("result", NAME)]
            tg.cancel_scope.cancel()  # the client went away after answering
        go.set()  # the call ends while nobody waits
        await settled()
        assert not server.cancelled.is_set()
        assert len(parked) == 1
        assert await parked.call(server, context(retry(state, {}))) == {"name": "Ada"}
        await settled()
        assert len(parked) == 0


def progress(token: str, n: int) -> Message:
    params = {"progressToken": token, "progress": n}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def log(level: str) -> Message:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": level, "data": level}}


async def test_progress_and_log_lines_go_to_the_request_waiting_now_and_are_dropped_between() -> None:
    go = anyio.Event()

    async def answer_then_wait(server: Server, relay: Relay, params: dict[str, Any]) -> Any:
        await server.ask(relay, "elicitation/create", FORM)
        await go.wait()
        return {"ok": True}

    async with running(answer_then_wait) as (parked, server):
        first_sink: list[Message] = []
        first_params = {"name": "ask", "arguments": {"a": 1}, "_meta": {"progressToken": "p1"}}
        first = input_required(await parked.call(server, context(first_params, sink=first_sink)))
        relay = server.relays[0]
        # The connection maps the server's progress back to the token of the request it sent: p1.
        relay.notify(progress("p1", 1))  # between attempts: nobody to tell
        relay.notify(log("error"))
        assert first_sink == []

        retry_sink: list[Message] = []
        params = {**retry(first["requestState"], {"elicitation-1": NAME}), "_meta": {"progressToken": "p2"}}
        async with anyio.create_task_group() as tg:
            tg.start_soon(parked.call, server, context(params, sink=retry_sink, log_level="warning"))
            await settled()
            relay.notify(progress("p1", 2))
            relay.notify(log("info"))  # below the level this request asked for
            relay.notify(log("error"))
            go.set()
        assert retry_sink == [progress("p2", 2), log("error")]


async def test_too_many_parked_calls_are_refused_per_identity_and_in_total() -> None:
    async with running(one_question, per_identity=1, total=2) as (parked, server):
        input_required(await parked.call(server, context()))
        with pytest.raises(LimitExceeded) as mine:
            await parked.call(server, context())
        error = wire_error(mine.value, 1)["error"]
        assert error["code"] == -32600
        assert error["data"] == {"limit": "max_parked_calls", "max": 2, "per_caller": 1}
        assert "1 calls of this caller" in mine.value.message
        assert "(limits.max_parked_calls)" in mine.value.message
        input_required(await parked.call(server, context(identity=BOB)))
        with pytest.raises(LimitExceeded) as everyone:
            await parked.call(server, context(identity=CAROL))
        assert "2 calls in all" in everyone.value.message
        await settled()
        assert len(parked) == 2  # the refused calls were cancelled, their questions answered
        assert [(kind, error["code"]) for kind, error in server.got] == [("error", -32000)] * 2


async def test_one_issuers_alice_can_neither_resume_nor_crowd_out_anothers_parked_calls() -> None:
    async with running(one_question, per_identity=1, total=3) as (parked, server):
        first = input_required(await parked.call(server, context(identity=TOKEN_ALICE)))
        # Her per-caller allowance is not the partner's: each may park one call.
        input_required(await parked.call(server, context(identity=PARTNER_ALICE)))
        with pytest.raises(InvalidRequestState):
            await parked.call(
                server,
                context(retry(first["requestState"], {"elicitation-1": NAME}), identity=PARTNER_ALICE),
            )
        result = await parked.call(
            server, context(retry(first["requestState"], {"elicitation-1": NAME}), identity=TOKEN_ALICE)
        )
        assert result == {"content": [{"type": "text", "text": "hello Ada"}]}


async def test_stopping_the_gateway_cancels_parked_calls() -> None:
    async with running(one_question) as (parked, server):
        input_required(await parked.call(server, context()))
    assert server.cancelled.is_set()


async def test_a_parked_call_its_client_abandoned_expires_and_makes_room() -> None:
    async with running(one_question, per_identity=1, total=1, ttl=0.2) as (parked, server):
        input_required(await parked.call(server, context()))
        with pytest.raises(LimitExceeded):
            await parked.call(server, context(identity=BOB))
        await settled()
        server.cancelled = anyio.Event()  # the refused call was cancelled: watch for the parked one
        with anyio.fail_after(5):
            await server.cancelled.wait()  # the expiry cancels the call at its server
        await settled()
        assert len(parked) == 0
        input_required(await parked.call(server, context()))  # room again
