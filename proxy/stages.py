"""The call pipeline's stages, outermost first: the order is declared here once (a test pins it).

    Measure → Authorize (+ audit) → Shape → Validate → RateLimit → Confirm → (forward)

A stage that has nothing to do is left out, so switched-off features cost nothing. Confirm is
last: nobody is asked to approve a call that a later check would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.access import Access
from proxy.bridge.state import RequestStates
from proxy.config import Config
from proxy.confirm.approvals import Approvals
from proxy.confirm.memory import Memory
from proxy.metrics import Metrics
from proxy.middleware.authorize import AuditLog, Authorize
from proxy.middleware.confirm import Confirm
from proxy.middleware.metrics import Measure
from proxy.middleware.ratelimit import RateLimit
from proxy.middleware.shape import Shape
from proxy.middleware.validate import Validate
from proxy.pipeline import Middleware
from proxy.policy import SchemaValidators
from proxy.ratelimit import LimitBackend

__all__ = ["Parts", "stages"]


@dataclass(frozen=True, slots=True)
class Parts:
    """What the stages are built from (the composition root makes these)."""

    access: Access
    metrics: Metrics
    audit: AuditLog | None
    limiter: LimitBackend | None
    questions: RequestStates
    approvals: Approvals
    states: RequestStates | None = None  # the forwarded calls' states (proxy.bridge), to check marks


def stages(config: Config, parts: Parts) -> list[Middleware]:
    """The stages ``config`` switches on, outermost first."""
    policy = config.policy
    built: list[Middleware] = []
    if config.metrics.enabled:
        built.append(Measure(parts.metrics))
    if policy.files or parts.audit is not None:
        built.append(Authorize(parts.access, parts.audit, parts.metrics))
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
    return built
