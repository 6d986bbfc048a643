"""The small sections of the config: ``listen``, ``naming``, ``endpoints``, ``catalog``,
``limits`` and ``sessions``."""

from __future__ import annotations

from typing import Final, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from proxy.config.base import Problems as _Problems
from proxy.config.base import Section as _Model
from proxy.config.discovery import DiscoverySettings
from proxy.policy.model import glob_problem
from proxy.protocol.jsonrpc import DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING


class ListenConfig(_Model):
    """Where the inbound HTTP endpoint listens and which browsers and Hosts it accepts."""

    host: str = Field(default="127.0.0.1", min_length=1)
    port: int = Field(default=8080, ge=0, le=65535)
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()

    @field_validator("allowed_origins")
    @classmethod
    def _exact_origins(cls, origins: tuple[str, ...]) -> tuple[str, ...]:
        # Browsers send an Origin as scheme://host[:port] exactly; a path or a trailing slash
        # would make the entry silently match nothing.
        for origin in origins:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or origin != f"{parts.scheme}://{parts.netloc}":
                raise ValueError(f"each must look like 'https://app.example.com' (got {origin!r})")
        return origins


class NamingConfig(_Model):
    """How namespaced tool names are built: ``<prefix><separator><original name>``."""

    separator: str = Field(default=".", min_length=1, max_length=8, pattern=r"^[A-Za-z0-9_.-]+$")
    max_length: int = Field(default=128, ge=16, le=1024)


def _globs(globs: tuple[str, ...]) -> tuple[str, ...]:
    for glob in globs:
        if (problem := glob_problem(glob)) is not None:
            raise ValueError(problem)
    return globs


class EndpointConfig(_Model):
    """One named endpoint: a view of the merged catalog at ``/mcp/<name>`` (and ``manifold stdio
    --endpoint <name>``). It only narrows: what it shows is what the whole catalog shows, less
    what its selection leaves out, and the policy still decides inside it.

    Globs are fnmatch-style and case-sensitive, as in the policy: tools and prompts are matched
    on their canonical name (``github.create_issue``, whatever the endpoint's naming shows),
    resources and templates on their URI (template). An empty list selects nothing of that kind.
    """

    servers: tuple[str, ...] | None = None  # None: every server
    tools: tuple[str, ...] = ("*",)
    prompts: tuple[str, ...] = ("*",)
    resources: tuple[str, ...] = ("*",)
    naming: NamingConfig | None = None  # None: the top-level naming
    # Identities allowed to use the endpoint, by role; None: every identity the policy lets in.
    roles: tuple[str, ...] | None = None
    # Its progressive discovery, replacing the top-level ``discovery`` as a whole; None: that one.
    discovery: DiscoverySettings | None = None

    _check_globs = field_validator("tools", "prompts", "resources")(_globs)


class CatalogConfig(_Model):
    """Paging of the merged catalog."""

    page_size: int = Field(default=100, ge=1, le=10000)
    max_server_pages: int = Field(default=1000, ge=1)


_KIB: Final = 1024
_MIB: Final = 1024 * 1024


class LimitsConfig(_Model):
    """Bounds on what one client or one server can make Manifold hold or spend.

    Every refusal names its limit (the field name below) to the peer that hit it and counts it
    in ``manifold_limit_refusals_total{limit}``. docs/reference/limits.md says what each peer gets.
    """

    # ---- one message from a client (HTTP body, stdio line) -----------------------------------
    # Capped below what the JSON encoder can write back out, with room for Manifold's wrapping.
    max_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=8, le=MAX_DEPTH_CEILING)
    max_request_bytes: int = Field(default=4 * _MIB, ge=64 * _KIB, le=256 * _MIB)
    # Objects and arrays in one client message: what decoding costs in memory (an empty object
    # is ~64 bytes of Python; 4 MiB of "{}," would be ~130 MB).
    max_containers: int = Field(default=100_000, ge=1_000)
    # Encoded size of a client's capabilities + clientInfo (initialize, or a 2026-07-28 _meta).
    max_capabilities_bytes: int = Field(default=64 * _KIB, ge=1 * _KIB)
    # Encoded size of one request's _meta.
    max_meta_bytes: int = Field(default=64 * _KIB, ge=1 * _KIB)
    # Encoded size of one tools/call's arguments; above validate_in_thread_bytes, schema
    # validation runs on a worker thread, never on the event loop.
    max_argument_bytes: int = Field(default=4 * _MIB, ge=1 * _KIB)
    validate_in_thread_bytes: int = Field(default=64 * _KIB, ge=0)
    # Length of a resource URI a client names (read, subscribe, complete, listen): what routing
    # matches and a subscription keeps.
    max_uri_bytes: int = Field(default=64 * _KIB, ge=1 * _KIB)
    # Entries in one JSON-RPC batch (2025-03-26 only), and how many of them run at once.
    max_batch: int = Field(default=100, ge=1, le=10_000)
    batch_concurrency: int = Field(default=8, ge=1, le=1_000)

    # ---- HTTP connections ---------------------------------------------------------------------
    max_header_bytes: int = Field(default=64 * _KIB, ge=4 * _KIB, le=1 * _MIB)
    # Seconds to receive a request's line and headers, and its whole body (slowloris).
    header_timeout: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    body_timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    # Open client connections; past max_connections - connection_reserve, /mcp answers 503 with
    # Retry-After while the probes (/healthz, /readyz, /metrics) still answer.
    max_connections: int = Field(default=2_000, ge=16)
    connection_reserve: int = Field(default=32, ge=1)

    # ---- sessions and what each one holds -----------------------------------------------------
    max_sessions: int = Field(default=10_000, ge=1)
    max_sessions_per_identity: int = Field(default=100, ge=1)
    max_in_flight_per_session: int = Field(default=64, ge=1)
    max_listen_streams_per_session: int = Field(default=4, ge=1)
    max_subscriptions_per_session: int = Field(default=1_000, ge=1)
    # Bytes of events kept per stream for Last-Event-ID replay.
    replay_buffer_bytes: int = Field(default=1 * _MIB, ge=0)
    # 2026-07-28 calls parked while their client answers a question (bridged input_required).
    max_parked_calls: int = Field(default=1_000, ge=1)
    # A server's questions Manifold holds for one call or task until its client answers them,
    # and the size of each (encoded params).
    max_held_questions: int = Field(default=16, ge=1)
    max_question_bytes: int = Field(default=256 * _KIB, ge=1 * _KIB)
    # Calls waiting for an approver's decision (confirm rules with ``approver``), kept until a
    # minute after their deadline; at most 16 per caller.
    max_pending_approvals: int = Field(default=1_000, ge=1)
    # Tasks (task-augmented calls) Manifold keeps a record of, per identity and in all, until
    # their ttl ends (at most max_task_ttl seconds); a task's result kept for another session or
    # replica to read is at most max_task_result_bytes encoded.
    max_tasks_per_identity: int = Field(default=100, ge=1)
    max_tasks: int = Field(default=10_000, ge=1)
    max_task_result_bytes: int = Field(default=1 * _MIB, ge=1 * _KIB)
    max_task_ttl: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    # A server's task-augmented sampling/elicitation requests Manifold holds as tasks for it (the
    # other way round), per server connection, until their ttl ends (at most max_task_ttl).
    max_client_tasks_per_server: int = Field(default=100, ge=1)
    # per_client servers: processes/connections in all, and seconds an unused one is kept.
    max_per_client_connections: int = Field(default=100, ge=1)
    per_client_idle_timeout: float = Field(default=300.0, gt=0, allow_inf_nan=False)

    # ---- servers ------------------------------------------------------------------------------
    # One message from a server on any transport (stdio line, SSE event, HTTP JSON body).
    max_server_message_bytes: int = Field(default=16 * _MIB, ge=64 * _KIB, le=1024 * _MIB)
    # Tools (prompts, resources, templates: each kind apart) one server may list.
    max_server_items: int = Field(default=10_000, ge=1)
    # Lines of a stdio server's stderr kept for /healthz and diagnostics, and logged per minute.
    stderr_lines_kept: int = Field(default=50, ge=0, le=10_000)
    stderr_lines_logged_per_minute: int = Field(default=60, ge=0)
    # A server whose last this-many calls all failed at the transport is not ready.
    failures_until_unready: int = Field(default=5, ge=1)

    # ---- Manifold's own files -------------------------------------------------------------------
    # Audit lines queued for the writer thread; past it (a stalled disk) records are dropped,
    # counted and warned about, never waited for.
    audit_buffer_bytes: int = Field(default=4 * _MIB, ge=64 * _KIB)

    @model_validator(mode="after")
    def _reserve_below_cap(self) -> LimitsConfig:
        if self.connection_reserve >= self.max_connections:
            raise _Problems(
                [(("connection_reserve",), f"must be below max_connections ({self.max_connections})")]
            )
        return self


class SessionsConfig(_Model):
    """Lifetime of inbound HTTP sessions."""

    idle_timeout: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    # Shared by replicas: signs session ids and list cursors, so any replica serves any
    # session. Unset: a random secret per process (sessions and cursors then stay on the
    # replica that issued them). At least 32 characters; give it with ${VAR}.
    secret: SecretStr | None = Field(default=None, min_length=32)
    # Signed into every id: past it the id is refused everywhere and its session ends.
    max_lifetime: float = Field(default=86_400.0, gt=0, allow_inf_nan=False)
    # Where ids of sessions ended on purpose (DELETE, eviction) are remembered until they expire:
    # memory (this replica), redis (every replica), auto (redis when rate_limits.backend is).
    revocations: Literal["auto", "memory", "redis"] = "auto"
    # None: rate_limits.redis_url. May carry a password: kept out of repr, never echoed.
    redis_url: str | None = Field(default=None, repr=False)
    # Where task records live (tasks outlive the session that made them): memory (this replica),
    # redis (every replica reads any identity's tasks), auto (redis when rate_limits.backend is).
    tasks: Literal["auto", "memory", "redis"] = "auto"
    # A take-over while Redis cannot be asked: refused (the client initializes again) or allowed.
    failure_mode: Literal["fail_open", "fail_closed"] = "fail_closed"

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return url
