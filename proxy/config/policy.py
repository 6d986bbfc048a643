"""The ``policy:`` section of Manifold's config: which files, and how they are enforced."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

from proxy.config.guardrails import GuardrailSettings
from proxy.core.documents import switch_word

__all__ = ["AuditSettings", "PinSettings", "PolicySettings"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PinSettings(_Model):
    """Tool pinning: what happens when a server changes a tool after it was first seen."""

    # A bare YAML `off` is false: read as the word it was written as (as discovery.mode is).
    mode: Annotated[Literal["off", "warn", "block", "confirm"], BeforeValidator(switch_word)] = "warn"
    path: str = ".manifold/pins.json"


class AuditSettings(_Model):
    """One JSON line per policy decision on a call. ``path``: a file, ``-`` for stdout, or none."""

    path: str | None = None
    include_arguments: bool = False


class PolicySettings(_Model):
    """``files`` empty means no policy: every identity may see and use everything.

    With files, the language in policies/README.md decides, default deny. ``dry_run`` logs
    would-be denials and allows them. Files are re-read when they change (or on SIGHUP); a bad
    file is refused with the old policy kept in force.
    """

    files: tuple[str, ...] = ()
    dry_run: bool = False
    reload: bool = True
    validate_arguments: bool = True
    validate_results: bool = True
    pins: PinSettings = PinSettings()
    audit: AuditSettings = AuditSettings()
    guardrails: GuardrailSettings = GuardrailSettings()  # how guardrail rules run; hooks
    # Where people reach Manifold, for the approval links of `approver: {role: r}` rules
    # (default http://<listen.host>:<listen.port>); the page is <this>/approvals/<id>.
    approvals_url: str | None = None
