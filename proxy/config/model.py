"""Manifold's configuration: one YAML or JSON file, checked completely before anything starts.

The format is chosen by suffix (``.json`` is JSON; anything else is read as YAML, a superset)::

    listen:
      host: 127.0.0.1          # default 127.0.0.1
      port: 8080               # default 8080, 0..65535
      allowed_origins: []      # extra browser Origins allowed, exact ("https://app.example.com");
                               # localhost origins are always allowed
      allowed_hosts: []        # Host header values allowed; empty = derived from the bind address
    naming:
      separator: "."           # between prefix and tool name: 1..8 of [A-Za-z0-9_.-]
      max_length: 128          # longest namespaced name, 16..1024
    catalog:
      page_size: 100           # items per tools/list page Manifold serves, 1..10000
      max_server_pages: 1000   # stop draining a server's pages after this many
    sessions:
      idle_timeout: 3600       # seconds an idle inbound HTTP session is kept
      max_lifetime: 86400      # seconds a session id is good for, however busy its session
      revocations: auto        # where ended ids are remembered: auto | memory | redis
    limits:                    # every bound, its default and what a peer gets: docs/reference/limits.md
      max_depth: 64            # objects/arrays one message may nest, from clients and servers alike;
                               # 8..200 (deeper ones are refused with -32600 naming the limit)
      max_request_bytes: 4194304
    log_level: info            # debug | info | warning | error
    discovery:
      mode: off                # search | promote: meta-tools listed instead of the whole tool list
    servers:                   # server id -> server, in the order given
      github:                  # ids: [A-Za-z0-9_-]+, without the separator
        command: npx           # a stdio server ...
        args: ["-y", "@x/server-github"]
        env: {GITHUB_TOKEN: "${GITHUB_TOKEN}"}
        cwd: /srv/github       # optional
        prefix: gh             # default: the id; "" passes tool names through unprefixed;
                               # "manifold" is reserved (Manifold's own tools)
        enabled: true          # disabled servers stay configured but are not started
        connect_timeout: 30    # seconds for start + initialize
        request_timeout: 60    # seconds for each request
        session_mode: shared   # shared (one connection for all clients) | per_client
        era: auto              # auto (server/discover, else initialize) | handshake | stateless
        credentials: {mode: secret, env: GITHUB_TOKEN}  # whose: shared (default) | secret |
                               # oauth | exchange (docs/guides/per-user-credentials.md)
      search:
        url: http://127.0.0.1:9000/mcp       # ... or an HTTP server
        headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
        transport: auto        # auto (Streamable HTTP, falling back to SSE) | streamable-http | sse
        tools:                 # per tool, by the server's own name (proxy.catalog.shaping)
          query: {name: find, description: "...", arguments: {index: {fixed: web}}}
    credentials:               # where per-identity secrets are kept (proxy.config.credentials)
      store: file              # file | redis | env
      key: ${MANIFOLD_CREDENTIALS_KEY}
    endpoints:                 # named views at /mcp/<name> (proxy.views.endpoints)
      code: {servers: [github], tools: ["gh.*"], naming: {separator: "__", max_length: 64}}
      find: {discovery: {mode: search}}   # each endpoint's own discovery (default: the top-level one)

Every string value may use ``${VAR}`` (an error if unset), ``${VAR:-default}`` (used when VAR is
unset or empty) and ``$${`` for a literal ``${``. Values of ``env`` and ``headers`` are kept as
secrets: they never appear in a repr or in an error message.

Claude Desktop and Cursor files work as they are: ``mcpServers`` is an alias of ``servers``, and a
server may say ``type`` (``stdio``, ``http``, ``streamable-http``, ``sse``) instead of
``transport``, ``disabled`` instead of ``enabled``, and ``timeout`` in milliseconds instead of
``request_timeout`` (``type`` beside an agreeing ``transport`` too); ``autoApprove`` and
``alwaysAllow`` are ignored. VS Code's ``mcp.json`` works as it is: its ``inputs`` are read from
``INPUT_<ID>`` variables (:mod:`proxy.config.editor_files`). Any other unknown key is an
error, so a typo cannot pass silently.

Environment variables override the file for every field but the servers: ``MANIFOLD_`` plus the
path joined by ``__``, e.g. ``MANIFOLD_LISTEN__PORT=9000``, ``MANIFOLD_LOG_LEVEL=debug``,
``MANIFOLD_POLICY__PINS__MODE=block``; lists, mappings and whole sections are JSON
(``MANIFOLD_LISTEN__ALLOWED_HOSTS='["gw:8080"]'``). The set is derived from :class:`Config`
itself (:mod:`proxy.config.overrides`), so a new field is overridable without being listed anywhere.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from proxy.catalog.naming import RESERVED_PREFIX
from proxy.config.auth import AuthSettings
from proxy.config.credentials import CredentialStoreSettings, ServerCredentials, SharedCredentials
from proxy.config.discovery import DiscoverySettings
from proxy.config.editor_files import Variables, declared_inputs, workspace_of
from proxy.config.overrides import Overrides, read_overrides
from proxy.config.policy import PolicySettings
from proxy.core.documents import parse_document, show_value
from proxy.core.errors import ConfigError
from proxy.core.files import read_text
from proxy.core.redaction import redact_text, redact_url
from proxy.observe.logs import LogSettings
from proxy.observe.metrics import MetricsSettings
from proxy.policy.model import glob_problem
from proxy.protocol.jsonrpc import DEFAULT_MAX_DEPTH, MAX_DEPTH_CEILING
from proxy.ratelimit import RateLimitSettings

__all__ = [
    "CatalogConfig",
    "Config",
    "ArgumentOverride",
    "EndpointConfig",
    "LimitsConfig",
    "ListenConfig",
    "NamingConfig",
    "ServerConfig",
    "SessionsConfig",
    "ToolOverride",
    "config_from_mapping",
    "load_config",
]

Loc: TypeAlias = tuple[str | int, ...]
Transport: TypeAlias = Literal["stdio", "auto", "streamable-http", "sse"]
Hint: TypeAlias = Literal["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_REFERENCE = re.compile(r"\$(?P<escape>\$)?\{(?P<body>[^}]*)(?P<close>\})?")
_VARIABLE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)
_DESKTOP_TYPES: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "streamable-http",
    "streamable-http": "streamable-http",
    "sse": "sse",
}
# The transports a desktop 'type' agrees with (VS Code's "http" falls back to SSE, as 'auto' does).
_AGREEING: Final[dict[str, tuple[str, ...]]] = {
    "stdio": ("stdio",),
    "http": ("streamable-http", "auto"),
    "streamable-http": ("streamable-http",),
    "sse": ("sse",),
}
_URL_TRANSPORTS = "'auto', 'streamable-http' or 'sse'"
# Read by desktop clients and editors only: Claude Desktop/Cursor's approvals, VS Code's debug
# settings (``dev``) and where its gallery installed a server from.
_IGNORED_KEYS = frozenset({"autoApprove", "alwaysAllow", "dev", "gallery", "version"})
_DESKTOP_KEYS = ("type", "disabled", "timeout", *sorted(_IGNORED_KEYS))
# Fields whose values are never repeated in an error: API keys, JWT and session secrets, and a
# Redis URL (it may carry a password).
_SECRET_FIELDS = frozenset({"key", "secret", "redis_url"})


class _Problems(ValueError):
    """Problems found by a validator, each at a path relative to the validated object.

    Pydantic keeps a raised ValueError in the error's ``ctx``, which lets a cross-field check
    report the exact field (``servers.x.transport``) instead of the whole object.
    """

    def __init__(self, items: Iterable[tuple[Loc, str]]) -> None:
        self.items = list(items)
        super().__init__("; ".join(message for _, message in self.items))


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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


_ENDPOINT_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


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
    # Calls waiting for an approver's decision (confirm rules with ``approver``), kept until a
    # minute after their deadline; at most 16 per caller.
    max_pending_approvals: int = Field(default=1_000, ge=1)
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
    # A take-over while Redis cannot be asked: refused (the client initializes again) or allowed.
    failure_mode: Literal["fail_open", "fail_closed"] = "fail_closed"

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return url


_ERA_ALIASES: Final = {"legacy": "handshake", "modern": "stateless"}


class ArgumentOverride(_Model):
    """How one argument of a tool is shaped: exactly one of ``fixed``, ``default``, ``hidden``."""

    fixed: Any = None  # always sent with this value; out of the listed schema; callers may not set it
    default: Any = None  # sent when the caller leaves it out; shown as the schema's default
    hidden: bool = False  # an optional argument out of the listed schema; never sent

    @model_validator(mode="after")
    def _one_way(self) -> ArgumentOverride:
        given: list[str] = [key for key in ("fixed", "default") if key in self.model_fields_set]
        if self.hidden:
            given.append("hidden")
        if len(given) != 1:
            got = " and ".join(given) if given else "none"
            raise _Problems([((), f"give exactly one of 'fixed', 'default' or 'hidden: true' (got {got})")])
        return self


class ToolOverride(_Model):
    """The operator's word on one of a server's tools, by the server's own tool name."""

    # Shown instead of the server's name, prefixed as any name is; the policy still matches the
    # canonical name (prefix + separator + the server's own name).
    name: str | None = Field(default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_./-]+$")
    title: str | None = Field(default=None, max_length=1024)
    description: str | None = Field(default=None, max_length=65536)
    arguments: dict[str, ArgumentOverride] = Field(default_factory=dict)


class ServerConfig(_Model):
    """One configured MCP server: a command (stdio) or a URL (HTTP)."""

    # Desktop configs write ports and flags in args/env as numbers; they are strings to the OS.
    model_config = ConfigDict(frozen=True, extra="forbid", coerce_numbers_to_str=True)

    id: str
    command: str | None = Field(default=None, min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, SecretStr] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    transport: Transport
    prefix: str
    enabled: bool = True
    connect_timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    request_timeout: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    # shared: one connection serves every client (the default, cheapest). per_client: one
    # connection per client: per session, and per identity for 2026-07-28 callers (which have no
    # session; per_identity is another name for it), for servers that keep per-user state or ask
    # clients things (sampling, elicitation, roots).
    session_mode: Literal["shared", "per_client"] = "shared"
    # The protocol era to speak: auto asks server/discover and falls back to initialize on any
    # error or silence. handshake skips the probe (a server that ignores unknown requests, or one
    # whose tools ask clients things the handshake way only); stateless never falls back.
    era: Literal["auto", "handshake", "stateless"] = "auto"
    # Whose credentials its requests carry (proxy.credentials): shared (the headers/env above, for
    # everybody) or each identity's own; any mode but shared implies session_mode: per_client.
    credentials: ServerCredentials = SharedCredentials()

    @model_validator(mode="before")
    @classmethod
    def _own_credentials_own_connection(cls, data: Any) -> Any:
        """A server reached with each identity's own credentials is reached on each client's own
        connection: ``session_mode: per_client`` is implied, and ``shared`` is a contradiction."""
        if not isinstance(data, Mapping):
            return data
        credentials = data.get("credentials")
        mode = credentials.get("mode", "shared") if isinstance(credentials, Mapping) else "shared"
        if mode == "shared":
            return data
        given = data.get("session_mode")
        if given == "shared":
            raise _Problems(
                [
                    (
                        ("session_mode",),
                        f"must be per_client (or left out) with credentials.mode {mode!r}: each "
                        "client reaches the server on a connection of its own, built with its "
                        "identity's credentials",
                    )
                ]
            )
        return {**data, "session_mode": given if given is not None else "per_client"}

    @field_validator("session_mode", mode="before")
    @classmethod
    def _per_identity(cls, value: object) -> object:
        return "per_client" if value == "per_identity" else value

    @field_validator("era", mode="before")
    @classmethod
    def _earlier_era_names(cls, value: object) -> object:
        """``legacy`` and ``modern``, the names of earlier releases, still work."""
        return _ERA_ALIASES.get(value, value) if isinstance(value, str) else value

    # Annotation trust: an untrusted server's hints are replaced by the spec's cautious
    # defaults; per-tool overrides (by the server's own tool name) are the operator's word.
    trusted: bool = False
    required: bool = False  # /readyz answers 503 until every required server is up
    annotations: dict[str, dict[Hint, bool]] = Field(default_factory=dict)
    # Per tool, by the server's own name: a new name, title, description, annotations (moved to
    # ``annotations`` above) and argument shaping (proxy.catalog.shaping).
    tools: dict[str, ToolOverride] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _tool_annotations(cls, data: Any) -> Any:
        """``tools.<tool>.annotations`` is ``annotations.<tool>``, given where the rest is."""
        if not isinstance(data, Mapping) or not isinstance(data.get("tools"), Mapping):
            return data
        tools = dict(data["tools"])
        annotations = dict(data.get("annotations") or {})
        problems: list[tuple[Loc, str]] = []
        for tool, override in tools.items():
            if isinstance(override, Mapping) and "annotations" in override:
                if tool in annotations:
                    problems.append(
                        (("tools", tool, "annotations"), f"given in 'annotations.{tool}' too; give them once")
                    )
                annotations[tool] = override["annotations"]
                tools[tool] = {key: value for key, value in override.items() if key != "annotations"}
        if problems:
            raise _Problems(problems)
        return {**data, "tools": tools, "annotations": annotations}

    @property
    def kind(self) -> Literal["stdio", "http"]:
        """``stdio`` for a command server, ``http`` for a URL server."""
        return "stdio" if self.command is not None else "http"

    def resolved_env(self) -> dict[str, str]:
        """The environment to add for the server process, secrets revealed."""
        return {name: value.get_secret_value() for name, value in self.env.items()}

    def resolved_headers(self) -> dict[str, str]:
        """The HTTP headers to send to the server, secrets revealed."""
        return {name: value.get_secret_value() for name, value in self.headers.items()}

    @model_validator(mode="before")
    @classmethod
    def _desktop_keys_and_defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = {key: value for key, value in data.items() if key not in _IGNORED_KEYS}
        problems: list[tuple[Loc, str]] = []
        if "type" in data:
            kind = data.pop("type")
            if not (isinstance(kind, str) and kind in _DESKTOP_TYPES):
                problems.append(
                    (("type",), f"must be one of {', '.join(map(repr, _DESKTOP_TYPES))} (got {kind!r})")
                )
            elif "transport" in data:
                # Both are fine when they say the same: a file shared by a desktop client and us.
                transport = data["transport"]
                if transport not in _AGREEING[kind]:
                    problems.append(
                        (
                            ("type",),
                            f"'type' is {kind!r} but 'transport' is {transport!r}; they disagree (give one, "
                            f"or a 'transport' of {' or '.join(map(repr, _AGREEING[kind]))})",
                        )
                    )
            else:
                data["transport"] = _DESKTOP_TYPES[kind]
        if "disabled" in data:
            disabled = data.pop("disabled")
            if "enabled" in data:
                problems.append((("disabled",), "give either 'disabled' or 'enabled', not both"))
            elif isinstance(disabled, bool):
                data["enabled"] = not disabled
            else:
                problems.append((("disabled",), f"must be true or false (got {disabled!r})"))
        if "timeout" in data:
            millis = data.pop("timeout")
            if type(millis) not in (int, float) or not 0 < millis < math.inf:  # bool is not a number here
                problems.append((("timeout",), f"must be a positive number of milliseconds (got {millis!r})"))
            else:
                data.setdefault("request_timeout", millis / 1000)
        if problems:
            raise _Problems(problems)
        if data.get("transport") is None:
            data["transport"] = "stdio" if data.get("url") is None else "auto"
        if data.get("prefix") is None and "id" in data:
            data["prefix"] = data["id"]
        return data

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and (urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc):
            raise ValueError(f"must be an http:// or https:// URL (got {redact_url(url)!r})")
        return url

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if (self.command is None) == (self.url is None):
            got = "neither" if self.command is None else "both"
            raise _Problems([((), f"needs exactly one of 'command' (stdio) or 'url' (HTTP) (got {got})")])
        problems: list[tuple[Loc, str]] = []
        if self.command is not None and self.transport != "stdio":
            problems.append(
                (("transport",), f"must be 'stdio' for a command server (got {self.transport!r})")
            )
        if self.url is not None:
            if self.transport == "stdio":
                problems.append((("transport",), f"must be {_URL_TRANSPORTS} for a url server (got 'stdio')"))
            # Process settings on an HTTP server would be ignored; say so rather than guess.
            for name in ("args", "env", "cwd"):
                if getattr(self, name):
                    problems.append(((name,), "only applies to command servers; this server has a 'url'"))
        if self.command is not None and self.headers:
            problems.append((("headers",), "only applies to url servers; this server has a 'command'"))
        problems += self._credential_problems()
        if problems:
            raise _Problems(problems)
        return self

    def _credential_problems(self) -> list[tuple[Loc, str]]:
        credentials = self.credentials
        if credentials.mode == "secret":
            if self.command is not None and credentials.env is None:
                return [
                    (
                        ("credentials", "env"),
                        "required for a command server: the variable its process finds the "
                        "identity's secret in",
                    )
                ]
            if self.url is not None and credentials.env is not None:
                return [
                    (
                        ("credentials", "env"),
                        "only applies to command servers; this server has a 'url' (use 'header')",
                    )
                ]
        if credentials.mode == "oauth" and self.command is not None:
            return [
                (("credentials", "mode"), "'oauth' only applies to url servers; this server has a 'command'")
            ]
        return []


class Config(_Model):
    """The whole validated configuration. Build it with :func:`load_config`."""

    listen: ListenConfig = ListenConfig()
    naming: NamingConfig = NamingConfig()
    catalog: CatalogConfig = CatalogConfig()
    sessions: SessionsConfig = SessionsConfig()
    limits: LimitsConfig = LimitsConfig()
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    auth: AuthSettings = AuthSettings()
    policy: PolicySettings = PolicySettings()
    rate_limits: RateLimitSettings = RateLimitSettings()
    metrics: MetricsSettings = MetricsSettings()
    logging: LogSettings = LogSettings()
    discovery: DiscoverySettings = DiscoverySettings()
    credentials: CredentialStoreSettings = CredentialStoreSettings()
    servers: dict[str, ServerConfig] = Field(default_factory=dict)
    endpoints: dict[str, EndpointConfig] = Field(default_factory=dict)

    def enabled_servers(self) -> list[ServerConfig]:
        """The servers to start, in configured order."""
        return [server for server in self.servers.values() if server.enabled]

    @field_validator("log_level", mode="before")
    @classmethod
    def _lowercase_level(cls, level: Any) -> Any:
        return level.lower() if isinstance(level, str) else level

    @model_validator(mode="before")
    @classmethod
    def _servers_with_ids(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if "mcpServers" in data:
            if "servers" in data:
                raise _Problems([(("mcpServers",), "give either 'servers' or 'mcpServers', not both")])
            data["servers"] = data.pop("mcpServers")
        servers = data.get("servers")
        if isinstance(servers, Mapping):
            # The key is the id; an "id" inside the entry would contradict it or repeat it.
            if ids := [key for key, entry in servers.items() if isinstance(entry, Mapping) and "id" in entry]:
                raise _Problems((("servers", key, "id"), "unknown field (the id is the key)") for key in ids)
            data["servers"] = {
                key: {**e, "id": key} if isinstance(e, Mapping) else e for key, e in servers.items()
            }
        return data

    @model_validator(mode="after")
    def _names_fit_the_separator(self) -> Config:
        # Checked here, not per server: the separator is part of the rule, and a namespaced
        # name must split back into exactly one (prefix, original name).
        separator = self.naming.separator
        problems: list[tuple[Loc, str]] = []
        owners: dict[str, str] = {}  # non-empty prefix -> the first server id that has it
        for key, server in self.servers.items():
            names: list[tuple[Loc, str, str]] = [(("servers", key), "server id ", key)]
            if server.prefix not in ("", key):  # "" is allowed; a prefix equal to the id is reported once
                names.append((("servers", key, "prefix"), "", server.prefix))
            for loc, what, name in names:
                if not _NAME.fullmatch(name):
                    problems.append(
                        (loc, f"{what}may only contain letters, digits, '_' and '-' (got {name!r})")
                    )
                elif separator in name:
                    problems.append(
                        (loc, f"{what}must not contain the separator {separator!r} (got {name!r})")
                    )
            if server.prefix in owners:
                other = owners[server.prefix]
                problems.append(
                    (
                        ("servers", key, "prefix"),
                        f"{server.prefix!r} is already the prefix of server {other!r}",
                    )
                )
            elif server.prefix:
                owners[server.prefix] = key
        # A namespace (prefix + separator) belongs to one server: with a separator of several
        # characters, one could start another ("a" + "__" starts "a_" + "__"), and a name in it
        # would then be both servers'.
        spaces = {prefix + separator: key for prefix, key in owners.items()}
        reserved = RESERVED_PREFIX + separator  # Manifold's own tools (progressive discovery)
        for space, key in spaces.items():
            if space.startswith(reserved) or reserved.startswith(space):
                problems.append(
                    (
                        ("servers", key, "prefix"),
                        f"the namespace {space!r} is reserved for Manifold's own tools "
                        f"({reserved}search_tools …); give this server another prefix",
                    )
                )
            for other_space, other in spaces.items():
                if other != key and space.startswith(other_space):
                    problems.append(
                        (
                            ("servers", key, "prefix"),
                            f"names in the namespace {space!r} would also be in the namespace "
                            f"{other_space!r} of server {other!r}; choose prefixes that do not "
                            "start one another's namespace",
                        )
                    )
        if problems:
            raise _Problems(problems)
        return self

    @model_validator(mode="after")
    def _credential_store_sealed(self) -> Config:
        store = self.credentials
        users = [key for key, server in self.servers.items() if server.credentials.mode == "secret"]
        if users and store.store != "env" and store.key is None:
            raise _Problems(
                [
                    (
                        ("credentials", "key"),
                        f"required: server {users[0]!r} has credentials.mode 'secret' and "
                        f"credentials.store is {store.store!r}, whose entries are sealed with this key "
                        "(make one with `manifold credentials keygen`; give it with ${VAR})",
                    )
                ]
            )
        oauth = [key for key, server in self.servers.items() if server.credentials.mode == "oauth"]
        if oauth and (store.store == "env" or store.key is None):
            raise _Problems(
                [
                    (
                        ("credentials", "store" if store.store == "env" else "key"),
                        f"server {oauth[0]!r} has credentials.mode 'oauth': each user's tokens are kept "
                        "sealed in the credential store, so it must be file or redis, with a key "
                        "(make one with `manifold credentials keygen`)",
                    )
                ]
            )
        return self

    @model_validator(mode="after")
    def _endpoints_name_servers(self) -> Config:
        problems: list[tuple[Loc, str]] = []
        for name, endpoint in self.endpoints.items():
            if not _ENDPOINT_NAME.fullmatch(name):
                shown = name if len(name) <= 80 else name[:80] + "..."
                problems.append(
                    (
                        ("endpoints", shown),
                        "an endpoint name is 1..64 of letters, digits, '_' and '-' (it is a URL "
                        f"path segment, /mcp/<name>) (got {shown!r})",
                    )
                )
            if endpoint.naming is not None:
                problems += _separator_problems(self.servers, endpoint.naming.separator, name)
            naming = endpoint.naming if endpoint.naming is not None else self.naming
            discovery = endpoint.discovery if endpoint.discovery is not None else self.discovery
            if discovery.enabled and (problem := _meta_tools_unfit(naming)) is not None:
                problems.append((("endpoints", name, "naming", "max_length"), problem))
            for server in endpoint.servers or ():
                if server not in self.servers:
                    problems.append(
                        (("endpoints", name, "servers"), f"names no configured server (got {server!r})")
                    )
        if self.discovery.enabled and (problem := _meta_tools_unfit(self.naming)) is not None:
            problems.append((("naming", "max_length"), problem))
        if problems:
            raise _Problems(problems)
        return self


def _meta_tools_unfit(naming: NamingConfig) -> str | None:
    """Why discovery's meta-tools cannot be named in ``naming`` (too long for it), if they cannot."""
    longest = f"{RESERVED_PREFIX}{naming.separator}describe_tools"
    if len(longest) <= naming.max_length:
        return None
    return (
        f"with discovery on, the meta-tools need names of {len(longest)} characters ({longest!r}); "
        f"raise max_length to at least {len(longest)} or switch discovery off here"
    )


def _separator_problems(
    servers: Mapping[str, ServerConfig], separator: str, endpoint: str
) -> list[tuple[Loc, str]]:
    """Why an endpoint's ``separator`` cannot name every server's tools apart: a prefix that
    contains it, or two namespaces (prefix + separator) of which one starts the other, or one
    that overlaps Manifold's own (``manifold`` + separator)."""
    loc: Loc = ("endpoints", endpoint, "naming", "separator")
    prefixes = {s.prefix: key for key, s in servers.items() if s.prefix}
    problems = [
        (loc, f"{separator!r} is in the prefix {prefix!r} of server {key!r}; choose another separator")
        for prefix, key in prefixes.items()
        if separator in prefix
    ]
    for prefix, key in prefixes.items():
        for other, other_key in prefixes.items():
            if other_key != key and (prefix + separator).startswith(other + separator):
                problems.append(
                    (loc, f"the namespaces of servers {key!r} and {other_key!r} overlap with {separator!r}")
                )
    reserved = RESERVED_PREFIX + separator  # the endpoint's discovery meta-tools are named in it
    for prefix, key in prefixes.items():
        space = prefix + separator
        if space.startswith(reserved) or reserved.startswith(space):
            problems.append(
                (
                    loc,
                    f"with {separator!r} the namespace of server {key!r} overlaps Manifold's {reserved!r}",
                )
            )
    return problems


# The servers come from the file only: a command line or a URL set from the environment would be
# a way to run anything; their values take ${VAR} instead. Endpoints name those servers, so they
# are read with them.
_NOT_OVERRIDABLE: Final = frozenset({"servers", "endpoints"})


def load_config(
    path: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    max_bytes: int | None = None,  # refuse a bigger file, or one that is not a regular file
) -> Config:
    """Read, interpolate, override from ``MANIFOLD_*`` variables, and validate a config file.

    ``environ`` (default ``os.environ``) supplies both ``${VAR}`` values and overrides.

    Raises:
        ConfigError: the file is missing, unreadable, not YAML/JSON, or not a valid config;
            the message has one line per problem, naming file, field and value.
    """
    source = os.fspath(path)
    data = parse_document(read_text(source, max_bytes=max_bytes), source)
    if not isinstance(data, Mapping):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{source}: the top level must be a mapping of settings (got {got})")
    workspace = workspace_of(Path(source))
    config = config_from_mapping(data, source=source, environ=environ, workspace=workspace)
    return _relative_to(config, Path(source).parent)


def _relative_to(config: Config, base: Path) -> Config:
    """Files Manifold itself reads and writes (policies, pins, audit) are found next to the
    config file, as Prometheus finds its rule files, not wherever Manifold was started. So is a
    server's relative ``cwd`` (a desktop app starts Manifold wherever it likes). Server commands
    and their args are not touched: they run in the server's ``cwd``."""

    def resolve(path: str) -> str:
        return path if path == "-" or Path(path).is_absolute() else str(base / path)

    policy = config.policy
    audit = policy.audit
    servers = {
        key: server.model_copy(update={"cwd": resolve(server.cwd)}) if server.cwd else server
        for key, server in config.servers.items()
    }
    credentials = config.credentials
    return config.model_copy(
        update={
            "servers": servers,
            "credentials": credentials.model_copy(update={"path": resolve(credentials.path)}),
            "policy": policy.model_copy(
                update={
                    "files": tuple(resolve(f) for f in policy.files),
                    "pins": policy.pins.model_copy(update={"path": resolve(policy.pins.path)}),
                    "audit": audit.model_copy(update={"path": resolve(audit.path) if audit.path else None}),
                }
            ),
        }
    )


def config_from_mapping(
    data: Mapping[str, Any],
    *,
    source: str = "<config>",
    environ: Mapping[str, str] | None = None,
    workspace: str | None = None,
) -> Config:
    """Build a :class:`Config` from already-parsed data, exactly as :func:`load_config` does.
    ``workspace``: VS Code's ``${workspaceFolder}`` (:mod:`proxy.config.editor_files`).

    Raises:
        ConfigError: the data is not a valid config; ``source`` names it in the message.
    """
    environ = os.environ if environ is None else environ
    inputs, wrong = declared_inputs(data)
    problems: list[tuple[Loc, str]] = [(("inputs",), message) for message in wrong]
    variables = Variables(environ, workspace, inputs)
    # VS Code's inputs are resolved here (from INPUT_* variables) and are no setting of Manifold's.
    interpolated = _interpolate({k: v for k, v in data.items() if k != "inputs"}, (), variables, problems)
    if problems:
        raise ConfigError("\n".join(_line(source, loc, message) for loc, message in problems))
    overrides = read_overrides(Config, environ, exclude=_NOT_OVERRIDABLE)
    merged = _merge(interpolated, overrides.values)
    servers_key = "mcpServers" if "mcpServers" in data else "servers"
    try:
        return Config.model_validate(merged)
    except ValidationError as exc:
        # `from None`: the ValidationError's own text would print secret inputs in a traceback.
        raise ConfigError("\n".join(_describe(exc, source, servers_key, overrides))) from None


def _interpolate(value: Any, loc: Loc, variables: Variables, problems: list[tuple[Loc, str]]) -> Any:
    """``value`` with ``${VAR}`` references in every string replaced; problems are collected."""
    if isinstance(value, str):
        return _REFERENCE.sub(lambda match: _resolve(match, loc, variables, problems), value)
    if isinstance(value, Mapping):
        return {key: _interpolate(item, (*loc, key), variables, problems) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_interpolate(item, (*loc, index), variables, problems) for index, item in enumerate(value)]
    return value


def _resolve(match: re.Match[str], loc: Loc, variables: Variables, problems: list[tuple[Loc, str]]) -> str:
    if match["escape"]:
        return match[0][1:]
    environ = variables.environ
    editor = variables.editor(match["body"]) if match["close"] else None
    if editor is not None:  # ${input:ID}, ${env:NAME}, ${workspaceFolder} (VS Code's mcp.json)
        value, problem = editor
        if problem is not None:
            problems.append((loc, problem))
        return value or ""
    variable = _VARIABLE.fullmatch(match["body"]) if match["close"] else None
    if variable is None:
        problems.append(
            (loc, f"bad reference {match[0]!r}: write ${{NAME}}, ${{NAME:-default}}, or $${{ for '${{'")
        )
        return ""
    name, default = variable["name"], variable["default"]
    value = environ.get(name)
    if default is not None and not value:  # shell semantics: the default also replaces ""
        return default
    if value is None:
        problems.append(
            (loc, f"environment variable {name!r} is not set (use ${{{name}:-default}} for a default)")
        )
        return ""
    return value


def _merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _describe(exc: ValidationError, source: str, servers_key: str, overrides: Overrides) -> list[str]:
    lines = []
    for error in exc.errors(include_url=False):
        loc: Loc = _untagged(tuple(error["loc"]))
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, _Problems):
            found = [((*loc, *relative), message) for relative, message in cause.items]
        else:
            found = [(loc, _message(error, loc))]
        for where, message in found:
            blame = overrides.blame(where)
            if blame is not None:
                message += f" ({blame})"
            if where[:1] == ("servers",):
                where = (servers_key, *where[1:])
            lines.append(_line(source, where, message))
    return lines


_CREDENTIAL_MODES: Final = ("shared", "secret", "oauth", "exchange")


def _untagged(loc: Loc) -> Loc:
    """``loc`` without the mode pydantic puts after ``credentials`` (a discriminated union)."""
    if len(loc) > 4 and loc[0] == "servers" and loc[2] == "credentials" and loc[3] in _CREDENTIAL_MODES:
        return (*loc[:3], *loc[4:])
    return loc


def _message(error: ErrorDetails, loc: Loc) -> str:
    kind, input_value = error["type"], error["input"]
    if kind == "missing":
        return "required field is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        got = input_value.get("mode") if isinstance(input_value, Mapping) else None
        shown = f"got {redact_text(show_value(got))}" if got is not None else "it is missing"
        return f"'mode' must be one of {', '.join(map(repr, _CREDENTIAL_MODES))} ({shown})"
    if kind == "extra_forbidden":
        import difflib  # only to word a config error: not loaded by a good config

        close = difflib.get_close_matches(str(loc[-1]), _known_keys(loc[:-1]), n=1)
        return "unknown field" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "value_error":  # raised by our own validators, with the value where it helps
        return error["msg"].removeprefix("Value error, ")
    message = error["msg"].replace("Input should be", "must be").replace("String should", "must")
    if (loc[:1] == ("servers",) and len(loc) > 2 and loc[2] in ("env", "headers")) or (
        _SECRET_FIELDS & set(map(str, loc))
    ):
        return message  # secrets: never echo an env or header value, a key, a secret or a Redis URL
    return f"{message} (got {redact_text(show_value(input_value))})"


def _known_keys(parent: Loc) -> Iterable[str]:
    """The field names allowed at ``parent``, for "did you mean" hints."""
    model: type[BaseModel] = Config
    extra: list[str] = ["mcpServers"] if parent == () else []
    path = list(parent)
    if path[:1] == ["servers"] and len(path) >= 2:
        model, path = ServerConfig, path[2:]
        extra = [] if path else list(_DESKTOP_KEYS)
    for key in path:
        field = model.model_fields.get(str(key))
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return [*(name for name in model.model_fields if name != "id"), *extra]


def _line(source: str, loc: Loc, message: str) -> str:
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    return f"{source}: {path}: {message}" if path else f"{source}: {message}"
