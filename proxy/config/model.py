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
        tasks: relay           # relay | held: Manifold runs task-augmented calls as tasks
        credentials: {mode: secret, env: GITHUB_TOKEN}  # whose: shared (default) | secret |
                               # oauth | exchange (docs/guides/per-user-credentials.md)
      search:
        url: http://127.0.0.1:9000/mcp       # ... or an HTTP server
        headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
        transport: auto        # auto (Streamable HTTP, falling back to SSE) | streamable-http | sse
        tools:                 # per tool, by the server's own name (proxy.catalog.shaping)
          query: {name: find, description: "...", arguments: {index: {fixed: web}}}
          reindex: {tasks: held}  # this tool's task-augmented calls held (over servers.<id>.tasks)
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

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from proxy.catalog.naming import RESERVED_PREFIX
from proxy.config.admin import AdminSettings
from proxy.config.auth import AuthSettings
from proxy.config.base import Loc
from proxy.config.base import Problems as _Problems
from proxy.config.base import Section as _Model
from proxy.config.credentials import CredentialStoreSettings
from proxy.config.discovery import DiscoverySettings
from proxy.config.observe import LogSettings, MetricsSettings
from proxy.config.policy import PolicySettings
from proxy.config.ratelimit import RateLimitSettings
from proxy.config.sections import (
    CatalogConfig,
    EndpointConfig,
    LimitsConfig,
    ListenConfig,
    NamingConfig,
    SessionsConfig,
)
from proxy.config.servers import ArgumentOverride, ServerConfig, ToolOverride
from proxy.config.tracing import TracingSettings

__all__ = [
    # Re-exported: the sections a Config is made of, so one import gives the whole schema.
    "ArgumentOverride",
    "CatalogConfig",
    "Config",
    "EndpointConfig",
    "LimitsConfig",
    "ListenConfig",
    "NamingConfig",
    "ServerConfig",
    "SessionsConfig",
    "ToolOverride",
]


_NAME = re.compile(r"[A-Za-z0-9_-]+")

_ENDPOINT_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


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
    tracing: TracingSettings = TracingSettings()
    admin: AdminSettings | None = None  # the admin API (proxy.admin): off unless configured
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
