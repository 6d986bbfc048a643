"""What the code defines that the reference must document, derived from the code itself.

Four lists, each read where the code keeps it, as ``proxy/overrides.py`` derives the environment
variables from the config model:

* every config key: the pydantic ``Config`` model, walked recursively (sections, lists of
  models, mappings of models, the members of a union such as ``servers.<id>.credentials``);
* every CLI command and its options: the argparse parser of ``manifold``;
* every metric and its labels: a fresh ``Metrics`` registry;
* every limit: the fields of the ``limits`` section.

And what the documentation says, read from its Markdown: backticked config paths (a mapping key
may be written as any ``<placeholder>``, e.g. ``servers.<id>.url``), ``## manifold <command>``
headings, and table rows whose first cell names a metric or a limit.

Run ``python -m tests.docs.reference`` to print a reference row (key, type, default) for every
config key, e.g. to start the table of a new section.

The imports of the modules that define these lists (and of ``manifold`` itself, which the config
blocks are checked with) are the four at the top of this file: when a module moves, this is the
one place to follow it.
"""

from __future__ import annotations

import argparse
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from proxy.cli import main as manifold_main
from proxy.cli.commands import _parser as manifold_parser
from proxy.config.model import Config, LimitsConfig
from proxy.observe.metrics import Metrics

__all__ = [
    "DOCS",
    "REFERENCE",
    "REPO",
    "Command",
    "ConfigKey",
    "MetricFamily",
    "cli_commands",
    "config_keys",
    "documented_commands",
    "documented_paths",
    "first_cells",
    "limit_names",
    "manifold_main",
    "metric_families",
    "reference_text",
    "shown_default",
    "shown_type",
]

REPO: Final = Path(__file__).resolve().parents[2]
DOCS: Final = REPO / "docs"
REFERENCE: Final = DOCS / "reference"

_PLACEHOLDER: Final = re.compile(r"<[^>`]+>")
_BACKTICKED: Final = re.compile(r"`([^`\n]+)`")
_COMMAND_HEADING: Final = re.compile(r"^#{2,4} `?(manifold(?: [a-z][a-z-]*)+)`?\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key of the config file: its dotted path (``*`` for a mapping's keys, ``[]`` after a
    list of sections) and its model field."""

    path: str
    field: FieldInfo


@dataclass(frozen=True, slots=True)
class Command:
    """One ``manifold`` command (``manifold credentials set``) and the options it takes."""

    name: str
    options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MetricFamily:
    """One metric as Prometheus exposes it (counters with ``_total``) and its label names."""

    name: str
    labels: tuple[str, ...]


# --- config keys -------------------------------------------------------------------------------


def _models(annotation: Any) -> tuple[list[type[BaseModel]], str]:
    """The models an annotation holds, and how: ``""`` directly, ``".*"`` as a mapping's values,
    ``"[]"`` as a list's items."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], ""
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        found: list[type[BaseModel]] = []
        how = ""
        for member in typing.get_args(annotation):
            models, member_how = _models(member)
            found += models
            how = how or member_how
        return found, how
    if origin in (dict, typing.Mapping) or (
        origin is not None and getattr(origin, "__name__", "") == "Mapping"
    ):
        models, _ = _models(typing.get_args(annotation)[-1])
        return models, ".*"
    if origin in (tuple, list, frozenset, set):
        models = [m for arg in typing.get_args(annotation) if arg is not Ellipsis for m in _models(arg)[0]]
        return models, "[]"
    return [], ""


def _walk(model: type[BaseModel], prefix: str) -> Iterator[ConfigKey]:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield ConfigKey(path, field)
        models, how = _models(field.annotation)
        for inner in models:
            yield from _walk(inner, f"{path}{how}.")


def config_keys() -> list[ConfigKey]:
    """Every key of the config file, sections included, each path once, in the model's order."""
    seen: dict[str, ConfigKey] = {}
    for key in _walk(Config, ""):
        seen.setdefault(key.path, key)
    return list(seen.values())


def shown_type(field: FieldInfo) -> str:
    """The field's type in the reference's words."""
    return _type_words(field.annotation)


def _type_words(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if annotation is SecretStr:
        return "secret string"
    if annotation is typing.Any:
        return "any"
    if origin is typing.Literal:
        return " \\| ".join(str(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        members = [_type_words(arg) for arg in args if arg is not type(None)]
        words = " \\| ".join(dict.fromkeys(members))
        return f"{words} or null" if type(None) in args else words
    if origin in (tuple, list, frozenset, set):
        return f"list of {_type_words(args[0])}" if args else "list"
    if origin is dict or (origin is not None and getattr(origin, "__name__", "") == "Mapping"):
        return f"map of {_type_words(args[-1])}" if args else "map"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation)


def shown_default(field: FieldInfo) -> str:
    """The field's default as the reference shows it: ``required``, ``null``, or the YAML value."""
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return _yaml_value(value)


def _yaml_value(value: Any) -> str:
    if isinstance(value, BaseModel):
        return "(section)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple | list | frozenset | set):
        return "[" + ", ".join(_yaml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        plain = re.fullmatch(r"[A-Za-z0-9_./:-]*[A-Za-z0-9_/]", value) and value not in ("off", "on")
        return value if plain else f'"{value}"'
    return str(value)


def limit_names() -> list[str]:
    """Every field of the ``limits`` section."""
    return list(LimitsConfig.model_fields)


# --- CLI ---------------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        long = [option for option in action.option_strings if option.startswith("--")]
        if long:
            found.append(long[0])
        elif not action.option_strings and action.choices:
            found.extend(str(choice) for choice in action.choices)  # e.g. `pins accept`
    return tuple(found)


def cli_commands() -> list[Command]:
    """Every ``manifold`` command with subcommands expanded (``manifold credentials set``)."""
    found: list[Command] = []

    def visit(name: str, parser: argparse.ArgumentParser) -> None:
        children = _subcommands(parser)
        if not children:
            found.append(Command(name, _options(parser)))
        for child, sub in children.items():
            visit(f"{name} {child}", sub)

    visit("manifold", manifold_parser())
    return found


# --- metrics -----------------------------------------------------------------------------------


def metric_families() -> list[MetricFamily]:
    """Every ``manifold_*`` metric a gateway exposes, with its label names."""
    registry = Metrics(process_metrics=False).registry
    found: list[MetricFamily] = []
    for collector in registry._collector_to_names:  # the registry's own record of its metrics
        labels = tuple(getattr(collector, "_labelnames", ()))
        for family in collector.describe() if hasattr(collector, "describe") else collector.collect():
            if not family.name.startswith("manifold_"):
                continue
            name = f"{family.name}_total" if family.type == "counter" else family.name
            found.append(MetricFamily(name, labels))
    return sorted(found, key=lambda family: family.name)


# --- what the documentation says ---------------------------------------------------------------


def reference_text() -> str:
    """Every page under ``docs/reference/``, and the repository files they include."""
    texts: list[str] = []
    for page in sorted(REFERENCE.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        texts.append(text)
        for included in re.findall(r'^--8<-- "([^"]+)"', text, re.MULTILINE):
            texts.append((REPO / included).read_text(encoding="utf-8"))
    return "\n".join(texts)


def documented_paths(text: str) -> set[str]:
    """Every backticked token of ``text``, placeholders (``<id>``) read as ``*``."""
    return {_PLACEHOLDER.sub("*", token) for token in _BACKTICKED.findall(text)}


def documented_commands(text: str) -> dict[str, str]:
    """``## manifold <command>`` headings, each with the text of its sections (a feature's page
    may have a section of its own for a command another page documents: both count)."""
    sections: dict[str, str] = {}
    matches = list(_COMMAND_HEADING.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        sections[match.group(1)] = sections.get(match.group(1), "") + text[match.end() : end]
    return sections


def first_cells(text: str) -> dict[str, list[str]]:
    """Table rows by the backticked names in their first cell (``| `a`, `b` | x | y |``)."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        for name in _BACKTICKED.findall(cells[0]):
            rows.setdefault(_PLACEHOLDER.sub("*", name), cells)
    return rows


def _skeleton() -> None:
    for key in config_keys():
        print(f"| `{key.path}` | {shown_type(key.field)} | `{shown_default(key.field)}` |  |")


if __name__ == "__main__":
    _skeleton()
