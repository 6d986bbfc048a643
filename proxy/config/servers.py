"""One configured server (``servers.<id>``): how it is reached, named, timed, shaped, and whose
credentials it gets; desktop-client and editor spellings accepted as they are."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlsplit

from pydantic import (
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from proxy.config.base import Loc
from proxy.config.base import Problems as _Problems
from proxy.config.base import Section as _Model
from proxy.config.credentials import ServerCredentials, SharedCredentials
from proxy.config.openapi import OpenApiSource
from proxy.core.redaction import redact_url

Transport: TypeAlias = Literal["stdio", "auto", "streamable-http", "sse"]
Hint: TypeAlias = Literal["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]

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
IGNORED_KEYS = frozenset({"autoApprove", "alwaysAllow", "dev", "gallery", "version"})

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
    # A task-augmented call of this tool (proxy.tasks.held): held or relay, over the server's ``tasks``.
    tasks: Literal["relay", "held"] | None = None


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
    # A REST API described by an OpenAPI document (proxy.openapi): ``url`` is its base URL then.
    openapi: OpenApiSource | None = None
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
    # A task-augmented tools/call to a server that runs no tasks: relay (passed on; the server
    # answers it as a plain call) or held (Manifold runs the call as a task itself: proxy.tasks.held).
    tasks: Literal["relay", "held"] = "relay"
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

    def holds(self, tool: str) -> bool:
        """Whether Manifold holds a task-augmented call of ``tool`` (the server's own name) as a
        task itself: the tool's ``tasks`` if it is given, else the server's."""
        override = self.tools.get(tool)
        chosen = override.tasks if override is not None and override.tasks is not None else self.tasks
        return chosen == "held"

    @property
    def holds_any(self) -> bool:
        """Whether a task-augmented call of any of its tools may be held."""
        return self.tasks == "held" or any(o.tasks == "held" for o in self.tools.values())

    @property
    def kind(self) -> Literal["stdio", "http", "openapi"]:
        """``stdio`` for a command server, ``openapi`` for a REST API, ``http`` for a URL server."""
        if self.openapi is not None:
            return "openapi"
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
        data = {key: value for key, value in data.items() if key not in IGNORED_KEYS}
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
            data["transport"] = "stdio" if data.get("url") is None and data.get("openapi") is None else "auto"
        if data.get("openapi") is not None and "trusted" not in data:
            # The hints are Manifold's own, from each operation's HTTP method (proxy.openapi.tools).
            data["trusted"] = True
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
    def _held_on_the_shared_connection(self) -> ServerConfig:
        """A held call runs on after its request was answered, on the server's shared connection:
        a ``per_client`` server's connections are its clients' (and end with their sessions)."""
        if self.session_mode != "per_client" or not self.holds_any:
            return self
        where: list[Loc] = [("tasks",)] if self.tasks == "held" else []
        where += [("tools", tool, "tasks") for tool, o in self.tools.items() if o.tasks == "held"]
        why = "held tasks need session_mode: shared (a held call outlives the client's own connection)"
        raise _Problems([(loc, why) for loc in where])

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if self.openapi is not None:
            return self._openapi_problems()
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

    def _openapi_problems(self) -> ServerConfig:
        problems: list[tuple[Loc, str]] = []
        if self.command is not None:
            problems.append((("command",), "give either 'command' or 'openapi', not both"))
        for name in ("args", "env", "cwd"):
            if getattr(self, name):
                problems.append(((name,), "only applies to command servers; this server is 'openapi'"))
        if self.transport not in ("auto", "streamable-http"):
            problems.append(
                (("transport",), f"does not apply to an 'openapi' server (got {self.transport!r})")
            )
        if self.era == "stateless":
            problems.append(
                (("era",), "an 'openapi' server is answered in the handshake era: use 'auto' or 'handshake'")
            )
        mode = self.credentials.mode
        if mode in ("oauth", "exchange") and self.url is None:
            problems.append(
                (("url",), f"required with credentials.mode {mode!r}: the API's base URL names the audience")
            )
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
