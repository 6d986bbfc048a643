"""The call pipeline's stages, outermost first: the order is declared here once (a test pins it).

    Measure → Authorize (+ audit) → SwitchedOff → Shape → Validate → Guard → RateLimit → Confirm
      → SignIn → (forward)

SwitchedOff (tools an operator switched off, ``admin:``) follows Authorize, so its refusals
are audited. A stage that has nothing to do is left out, so switched-off features cost nothing;
Guard, RateLimit and Confirm are present with any policy file, since a reload may bring
guardrail rules, limits or confirm rules, and the chain steps over each while the policy in
force gives it nothing to do (their ``passes``, :func:`proxy.pipeline.context.compose`). Guard
reads arguments after they are shaped and valid, and results before validate checks them on
their way out. Confirm is
last but one: nobody is asked to approve a call that a later check would refuse. SignIn (servers
in ``credentials.mode: oauth``) is last: nobody signs in for a call that would be refused.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proxy.config.model import Config
from proxy.enforce.access import Access
from proxy.enforce.confirm.approvals import Approvals
from proxy.enforce.confirm.memory import Memory
from proxy.observe.client_tasks import ClientTaskRecords
from proxy.observe.metrics import Metrics
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import Stage
from proxy.pipeline.stages.authorize import AuditLog, Authorize
from proxy.pipeline.stages.confirm import Confirm
from proxy.pipeline.stages.metrics import Measure
from proxy.pipeline.stages.ratelimit import RateLimit
from proxy.pipeline.stages.shape import Shape
from proxy.pipeline.stages.traced import traced
from proxy.pipeline.stages.validate import Validate
from proxy.policy import SchemaValidators
from proxy.ratelimit import LimitBackend, make_backend

if TYPE_CHECKING:  # the oauth credentials mode, with its OAuth client, only when configured
    from proxy.credentials.on_behalf import OnBehalf

__all__ = ["Parts", "audit_log", "client_task_records", "limiter", "stages"]


@dataclass(frozen=True, slots=True)
class Parts:
    """What the stages are built from (the composition root makes these)."""

    access: Access
    metrics: Metrics
    audit: AuditLog | None
    limiter: LimitBackend | None
    questions: RequestStates
    approvals: Approvals
    on_behalf: OnBehalf | None = None  # credentials.mode oauth: users' sign-ins
    sign_ins: RequestStates | None = None  # the sign-in stage's input_required states
    states: RequestStates | None = None  # the forwarded calls' states (proxy.pipeline.bridge), to check marks


def stages(config: Config, parts: Parts) -> list[Stage]:
    """The stages ``config`` switches on, outermost first."""
    policy = config.policy
    built: list[Stage] = []
    if config.metrics.enabled:
        built.append(Measure(parts.metrics))
    if policy.files or parts.audit is not None:
        modes = {
            sid: s.credentials.mode for sid, s in config.servers.items() if s.credentials.mode != "shared"
        }
        built.append(Authorize(parts.access, parts.audit, parts.metrics, credential_modes=modes))
    if config.admin is not None:  # operators may switch tools off (proxy.admin)
        from proxy.pipeline.stages.switched import SwitchedOff

        built.append(SwitchedOff(parts.access.overlays))
    if (shape := Shape.of(config.servers)) is not None:
        built.append(shape)  # after authorize (audited), before validate (the shaped call)
    if policy.validate_arguments or policy.validate_results:
        built.append(
            Validate(
                SchemaValidators(),
                arguments=policy.validate_arguments,
                results=policy.validate_results,
                in_thread_bytes=config.limits.validate_in_thread_bytes,
            )
        )
    if policy.files:
        from proxy.pipeline.stages.guard import Guard

        parts.access.observe_guardrails(parts.metrics, parts.audit.write if parts.audit is not None else None)
        built.append(Guard(parts.access, SchemaValidators()))
    if parts.limiter is not None:
        built.append(RateLimit(parts.access, parts.limiter, parts.metrics))
    if policy.files or policy.pins.mode == "confirm":
        built.append(
            Confirm(
                parts.access,
                parts.questions,
                Memory(),
                parts.metrics,
                parts.audit,
                parts.approvals,
                forwarded=parts.states,
            )
        )
    if parts.on_behalf is not None and parts.sign_ins is not None:
        from proxy.pipeline.stages.sign_in import SignInStage

        built.append(SignInStage(parts.on_behalf, parts.sign_ins))
    return traced(built)  # each stage in a span of its own when tracing is on


def audit_log(config: Config, metrics: Metrics) -> AuditLog | None:
    """The audit log ``policy.audit`` asks for, if any (its writer runs with the gateway)."""
    if not config.policy.audit.path:
        return None
    refused = functools.partial(metrics.limit_refused, "audit_buffer_bytes")  # a stalled disk
    return AuditLog(config.policy.audit, buffer_bytes=config.limits.audit_buffer_bytes, on_dropped=refused)


def client_task_records(metrics: Metrics, audit: AuditLog | None) -> ClientTaskRecords:
    """Metrics and audit of the tasks Manifold holds for servers (client-side tasks)."""
    return ClientTaskRecords(metrics, None if audit is None else audit.write)


def limiter(config: Config, metrics: Metrics) -> LimitBackend | None:
    """Where rate-limit buckets live; None without policy files (limits are written in them)."""
    if not config.policy.files:
        return None
    backend = config.rate_limits.backend
    return make_backend(
        config.rate_limits, on_backend_error=lambda _: metrics.rate_limit_backend_error(backend)
    )
