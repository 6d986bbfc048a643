"""``discovery:`` in the configuration: whether clients are shown meta-tools instead of the
whole tool list, and the bounds of what they may ask.

The same model sits under each endpoint too (``endpoints.NAME.discovery``, :mod:`proxy.views.endpoints`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from proxy.core.documents import switch_word

__all__ = ["DiscoveryMode", "DiscoverySettings", "SemanticMode"]

DiscoveryMode = Literal["off", "search", "promote"]
SemanticMode = Literal["auto", "off"]


class DiscoverySettings(BaseModel):
    """``mode``: ``off`` lists every tool (the default); ``search`` lists only the meta-tools
    (``manifold.search_tools``, ``manifold.describe_tools``, ``manifold.call_tool``); ``promote``
    also adds the tools a session's searches found to that session's list, telling it with
    ``notifications/tools/list_changed`` (handshake-era sessions; a 2026-07-28 caller has no
    session and sees the meta-tools only).

    ``semantic``: ``auto`` (the default) ranks by meaning as well as by words when the ``search``
    extra (the embedding model) is installed, and by words alone otherwise; ``off`` never loads
    the model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Annotated[DiscoveryMode, BeforeValidator(switch_word)] = "off"  # a bare YAML `off` is false
    default_results: int = Field(default=8, ge=1, le=50)  # search_tools without a limit
    max_results: int = Field(default=20, ge=1, le=50)  # the largest limit a search may ask for
    max_describe: int = Field(default=20, ge=1, le=100)  # names in one describe_tools call
    max_query_chars: int = Field(default=1000, ge=16, le=100_000)
    max_promoted: int = Field(default=32, ge=1, le=256)  # per session; the oldest go first
    semantic: Annotated[SemanticMode, BeforeValidator(switch_word)] = "auto"  # a bare `off` is false

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    @model_validator(mode="after")
    def _default_within_max(self) -> DiscoverySettings:
        if self.default_results > self.max_results:
            raise ValueError(
                f"default_results ({self.default_results}) must not exceed max_results ({self.max_results})"
            )
        return self
