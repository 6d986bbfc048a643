"""Loading the config: a file or a mapping in, a checked :class:`~proxy.config.model.Config` out,
with ``${VAR}`` interpolation, ``MANIFOLD_*`` overrides, and every problem worded with its
path and line."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import (
    BaseModel,
    ValidationError,
)
from pydantic_core import ErrorDetails

from proxy.config.base import Loc
from proxy.config.base import Problems as _Problems
from proxy.config.editor_files import Variables, declared_inputs, workspace_of
from proxy.config.every_problem import ROUNDS, Pruned, caused_by, pruned
from proxy.config.model import Config
from proxy.config.overrides import Overrides, read_overrides
from proxy.config.servers import IGNORED_KEYS, ServerConfig
from proxy.core.documents import parse_document, show_value
from proxy.core.errors import ConfigError
from proxy.core.files import read_text
from proxy.core.redaction import redact_text

_REFERENCE = re.compile(r"\$(?P<escape>\$)?\{(?P<body>[^}]*)(?P<close>\})?")
_VARIABLE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)
_DESKTOP_KEYS = ("type", "disabled", "timeout", *sorted(IGNORED_KEYS))
# Fields whose values are never repeated in an error: API keys, JWT and session secrets, and a
# Redis URL (it may carry a password).
_SECRET_FIELDS = frozenset({"key", "secret", "redis_url"})

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
    config file, as Prometheus finds its rule files, not wherever Manifold was started. So are an
    OpenAPI server's document file and a server's relative ``cwd`` (a desktop app starts Manifold
    wherever it likes). Server commands and their args are not touched: they run in the server's
    ``cwd``."""

    def resolve(path: str) -> str:
        return path if path == "-" or Path(path).is_absolute() else str(base / path)

    policy = config.policy
    audit = policy.audit
    servers = {
        key: server.model_copy(update={"cwd": resolve(server.cwd)}) if server.cwd else server
        for key, server in config.servers.items()
    }
    for key, server in servers.items():
        if server.openapi is not None and not server.openapi.is_url:  # an OpenAPI document file
            document = server.openapi.model_copy(update={"document": resolve(server.openapi.document)})
            servers[key] = server.model_copy(update={"openapi": document})
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
        found = _described(exc, source, servers_key, overrides)
    # Every problem, not the first layer of them (proxy.config.every_problem): validated again
    # without those found, a bounded number of rounds. `from None` below: the ValidationError's
    # own text would print secret inputs in a traceback.
    lines = [line for _, line in found]
    locs = [where for where, _ in found]
    pruning: list[Pruned] = []
    remaining: Mapping[str, Any] = merged
    for _ in range(ROUNDS):
        step = pruned(remaining, locs, servers_key=servers_key)
        if step is None:
            break
        pruning.append(step)
        remaining = step.data
        try:
            Config.model_validate(remaining)
        except ValidationError as more:
            again = _described(more, source, servers_key, overrides)
            locs = [where for where, _ in again]
            lines += [line for where, line in again if line not in lines and not caused_by(where, pruning)]
        else:
            break
    raise ConfigError("\n".join(lines)) from None


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


def _described(
    exc: ValidationError, source: str, servers_key: str, overrides: Overrides
) -> list[tuple[Loc, str]]:
    """Each problem's location (as the validator names it) and its line."""
    lines: list[tuple[Loc, str]] = []
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
            shown = (servers_key, *where[1:]) if where[:1] == ("servers",) else where
            lines.append((where, _line(source, shown, message)))
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
