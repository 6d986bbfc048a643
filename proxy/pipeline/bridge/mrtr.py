"""Multi round-trip requests (2026-07-28, SEP-2322) with a 2026-07-28 server behind Manifold.

Such a server never sends a client a request: it answers ``tools/call``, ``prompts/get`` or
``resources/read`` with ``input_required`` (``inputRequests``, an opaque ``requestState``), and the
client retries the same request with ``inputResponses`` and the state echoed.

- A 2026-07-28 caller (:meth:`Rounds.pass_through`) gets the ``input_required`` as it is, except
  the server's state, which travels wrapped in Manifold's own (:mod:`proxy.pipeline.bridge.state`): bound
  to this caller and this request, so a state cannot be replayed by somebody else through
  Manifold, whose credentials the server bound it to. The retry is unwrapped and forwarded.
- A handshake-era caller (:meth:`Rounds.unroll`) cannot be handed ``input_required``: Manifold asks
  it each input request as a real JSON-RPC request on the call's stream, and retries downstream
  with the answers (a new request id each round, bounded rounds) until the result is complete.

Either way, the only ``requestState`` a server is sent is its own, unwrapped from Manifold's seal:
a caller's request carrying any other (a handshake-era client's included, whose first round goes
out with the params it sent) is refused before it reaches the server.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import anyio

from proxy.core.errors import InvalidRequestState, ServerProtocolError
from proxy.outbound.connection import ServerConnection
from proxy.pipeline.bridge.state import Boundary, RequestStates, arguments_digest
from proxy.pipeline.context import CallContext
from proxy.protocol.asks import ASKABLE
from proxy.protocol.results import is_input_required

__all__ = ["Rounds", "boundary_of"]

logger = logging.getLogger("proxy.pipeline.bridge.mrtr")

_STATE_ONLY_PAUSE: Final = (0.05, 0.25)  # a result with a state and nothing to ask: retry after


def boundary_of(ctx: CallContext) -> Boundary:
    """What a request state issued for ``ctx`` is bound to."""
    return Boundary(ctx.server_id, ctx.method, ctx.name, arguments_digest(ctx.arguments), ctx.caller.identity)


class Rounds:
    def __init__(self, states: RequestStates, *, max_rounds: int) -> None:
        self._states = states
        self._max_rounds = max_rounds

    async def pass_through(self, connection: ServerConnection, ctx: CallContext) -> Any:
        """One round for a 2026-07-28 caller: its state unwrapped on the way in, the server's
        wrapped on the way out.

        Raises:
            InvalidRequestState: the retry's state is not one Manifold issued for this request
                and this caller (or is stale).
        """
        params = self._unsealed(ctx)
        result = await connection.request(ctx.method, params, relay=ctx.caller)
        if is_input_required(result) and isinstance(result.get("requestState"), str):
            sealed = self._states.seal(boundary_of(ctx), "server", result["requestState"])
            result = {**result, "requestState": sealed}
        return result

    async def unroll(self, connection: ServerConnection, ctx: CallContext) -> Any:
        """The whole exchange for a handshake-era caller: each ``input_required`` becomes real
        requests to it (concurrently), then a retry with its answers.

        Raises:
            RemoteError: the server asked for something malformed, or never finished within the
                allowed rounds (-32603, the server's fault); or the client refused a request.
            MethodNotFound: the client did not declare what a request needs.
            InvalidRequestState: the client sent a ``requestState`` that is not one Manifold
                issued for this request and this caller.
        """
        params = self._unsealed(ctx)
        pause = _STATE_ONLY_PAUSE[0]
        for _ in range(self._max_rounds):
            result = await connection.request(ctx.method, params, relay=ctx.caller)
            if not is_input_required(result):
                return result
            asked = _input_requests(result, connection.server_id)
            answers = await _ask_all(ctx, asked)
            params = {k: v for k, v in ctx.params.items() if k not in ("inputResponses", "requestState")}
            if answers:
                params["inputResponses"] = answers
            if "requestState" in result:
                params["requestState"] = result["requestState"]
            if not asked:  # only a state: the server is working on it, come back shortly
                await anyio.sleep(pause)
                pause = min(pause * 2, _STATE_ONLY_PAUSE[1])
        raise _misbehaved(
            connection.server_id,
            f"still needed input after {self._max_rounds} rounds of {ctx.method}; Manifold gave up",
        )

    def _unsealed(self, ctx: CallContext) -> dict[str, Any]:
        """The caller's params for the server: a ``requestState`` in them unwrapped from
        Manifold's seal, the server's own state again.

        Raises:
            InvalidRequestState: it is not a server's state Manifold sealed for this request.
        """
        params = dict(ctx.params)
        if "requestState" in params:
            # The boundary (a digest of the arguments) only when there is a state to check:
            # most calls carry none, and digesting every call's arguments was a cost on each.
            sealed = self._states.open(params["requestState"], boundary_of(ctx))
            if sealed.kind != "server":
                raise InvalidRequestState()
            params["requestState"] = sealed.payload
        return params


async def _ask_all(
    ctx: CallContext, asked: Mapping[str, tuple[str, dict[str, Any] | None]]
) -> dict[str, Any]:
    """The client's answers to every input request, asked concurrently; the first refusal wins."""
    answers: dict[str, Any] = {}

    async def ask(key: str, method: str, params: dict[str, Any] | None) -> None:
        answers[key] = await ctx.caller.request(method, params)

    try:
        async with anyio.create_task_group() as tg:
            for key, (method, params) in asked.items():
                tg.start_soon(ask, key, method, params)
    except ExceptionGroup as group:  # one refusal fails the call: raise it as it came
        raise group.exceptions[0] from None
    return answers


def _input_requests(
    result: Mapping[str, Any], server_id: str
) -> dict[str, tuple[str, dict[str, Any] | None]]:
    """``inputRequests`` of an ``input_required`` result, checked.

    Raises:
        RemoteError: not a map of ``{method, params}`` for the three askable methods, or no
            requests and no state (nothing to retry with).
    """
    requests = result.get("inputRequests")
    if requests is None:
        requests = {}
    if not isinstance(requests, Mapping):
        raise _misbehaved(server_id, "sent inputRequests that is not an object")
    asked: dict[str, tuple[str, dict[str, Any] | None]] = {}
    for key, request in requests.items():
        method = request.get("method") if isinstance(request, Mapping) else None
        params = request.get("params") if isinstance(request, Mapping) else None
        if method not in ASKABLE or not isinstance(params, dict | None):
            raise _misbehaved(server_id, f"sent an input request {key!r} Manifold cannot ask")
        assert isinstance(method, str)
        asked[key] = (method, params)
    if not asked and not isinstance(result.get("requestState"), str):
        raise _misbehaved(server_id, "answered input_required with nothing to ask and no state to retry with")
    return asked


def _misbehaved(server_id: str, what: str) -> ServerProtocolError:
    """A server's input_required Manifold cannot use: that server's fault, and its request's."""
    return ServerProtocolError(server_id, what)
