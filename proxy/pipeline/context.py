"""The call path: the context a forwarded request carries, and its stages.

Every request Manifold forwards to a server (``tools/call``, ``prompts/get``,
``resources/read``, ``completion/complete`` …) runs through the call pipeline: its stages,
outermost first, in the one order :mod:`proxy.pipeline.order` declares (and a test pins), then
:class:`~proxy.pipeline.forward.Forward` (the connection and the era bridge). The router is the
request's fault boundary (:mod:`proxy.observe.boundary`).

A stage with nothing to do is left out; each is ``async (ctx, call_next) -> result`` (a
:data:`Stage`); :func:`compose` builds the chain once. No stage turns an exception into an
answer: :func:`proxy.observe.boundary.wire_error` does, at the router.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from proxy.catalog.merge import Entry
from proxy.core.errors import (
    GuardrailDenied,
    HiddenByPolicy,
    ProtocolError,
    RemoteError,
    ServerTimeout,
    ServerUnavailable,
)
from proxy.outbound.relay import Relay
from proxy.protocol.jsonrpc import RequestId

if TYPE_CHECKING:
    from proxy.observe.metrics import Outcome
    from proxy.policy.engine import Subject
    from proxy.policy.model import Confirmation, Identity

__all__ = [
    "CallContext",
    "GuardQuestion",
    "Caller",
    "Handler",
    "Stage",
    "compose",
    "outcome_of",
    "tool_error",
]

logger = logging.getLogger("proxy.pipeline.context")


class Caller(Relay, Protocol):
    """Who asked, and the way back to them: a client's request in progress, whatever its
    transport and era (:class:`proxy.clients.session.InboundRequest`)."""

    @property
    def identity(self) -> Identity: ...

    @property
    def stateless(self) -> bool:
        """A 2026-07-28 caller: no session; it is asked through ``input_required`` results."""
        ...

    def supports(self, method: str, params: dict[str, Any] | None) -> bool:
        """Whether the caller declared the capability a server's ``method`` request needs."""
        ...


@dataclass(frozen=True, slots=True)
class CallContext:
    """One resolved request to a server, immutable while it travels the pipeline."""

    caller: Caller  # who asked, and the way back to them
    request_id: RequestId
    method: str
    server_id: str
    name: str  # the namespaced tool or prompt name, or the resource URI
    params: Mapping[str, Any]  # as the server gets them: names already un-namespaced
    entry: Entry | None = None  # the catalog entry, for tools and prompts
    subject: Subject | None = None  # what the policy decides about
    endpoint: str = ""  # the named endpoint the request came in on ("": /mcp)
    guard_question: GuardQuestion | None = None  # a guardrail asks first (the confirm stage asks)

    @property
    def arguments(self) -> Mapping[str, Any]:
        arguments = self.params.get("arguments")
        return arguments if type(arguments) is dict or isinstance(arguments, Mapping) else {}

    @property
    def shown_arguments(self) -> Mapping[str, Any]:
        """The arguments as a person approving the call is shown them: with what a guardrail
        found in them redacted."""
        if self.guard_question is not None:
            return self.guard_question.shown_arguments
        return self.arguments


@dataclass(frozen=True, slots=True)
class GuardQuestion:
    """A guardrail rule's ``confirm`` (:mod:`proxy.pipeline.stages.guard`), asked by the confirm stage
    with any confirm rule's: the guardrail rules, how to ask, and the arguments with every
    finding redacted (a person approves what they see, never a secret shown to them)."""

    rule_ids: tuple[str, ...]
    confirm: Confirmation
    shown_arguments: Mapping[str, Any]


Handler = Callable[[CallContext], Awaitable[Any]]
Stage = Callable[[CallContext, Handler], Awaitable[Any]]


def compose(stages: Sequence[Stage], endpoint: Handler) -> Handler:
    """Wrap ``endpoint`` in ``stages``; the first stage is the outermost."""
    handler = endpoint
    for stage in reversed(stages):
        handler = _bind(stage, handler)
    return handler


def _bind(stage: Stage, call_next: Handler) -> Handler:
    """One link of the chain: a plain function that returns the stage's awaitable, so a call
    runs no coroutine of the link's own per stage; a stage with a ``passes(ctx)`` method is
    stepped over while it says so (a rate-limit stage with no limit loaded, say), without a
    coroutine of its own either. The stage itself must still pass such a call on unchanged:
    it may be run without its link (inside a span, :mod:`proxy.pipeline.stages.traced`)."""
    passes = getattr(stage, "passes", None)
    if passes is None:

        def run(ctx: CallContext) -> Awaitable[Any]:
            return stage(ctx, call_next)

    else:

        def run(ctx: CallContext) -> Awaitable[Any]:
            return call_next(ctx) if passes(ctx) else stage(ctx, call_next)

    return run


OUTCOME_KEY = "dev.manifold/outcome"


def tool_error(text: str, *, outcome: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A tool result Manifold answers itself, telling the model what went wrong (``isError``).

    ``_meta`` says, machine-readably, why Manifold (not the tool) answered: ``denied``,
    ``not_confirmed`` (a person did not approve it), ``rate_limited``, ``invalid_arguments`` or
    ``invalid_result``.
    """
    return {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {OUTCOME_KEY: outcome, **(meta or {})},
    }


def outcome_of(ended: object) -> Outcome:
    """How a forwarded request ended, in the words metrics and the audit log use."""
    if isinstance(ended, BaseException):
        if isinstance(ended, ServerTimeout):
            return "timeout"
        if isinstance(ended, ServerUnavailable | RemoteError):
            return "server_error"
        if isinstance(ended, HiddenByPolicy | GuardrailDenied):
            return "denied"
        if isinstance(ended, ProtocolError):
            return "invalid"
        return "cancelled" if not isinstance(ended, Exception) else "error"
    if isinstance(ended, dict) and ended.get("isError"):
        meta = ended.get("_meta")
        ours = meta.get(OUTCOME_KEY) if isinstance(meta, dict) else None
        if ours in ("denied", "not_confirmed"):
            return "denied"
        if ours == "rate_limited":
            return "rate_limited"
        return "invalid" if ours == "invalid_arguments" else "tool_error"
    if isinstance(ended, dict) and ended.get("resultType") == "input_required":
        return "input_required"
    return "ok"
