"""Parsing the documents operators write (config, policies): YAML or JSON, strictly. Pure.

Duplicate keys are errors here (plain YAML and JSON silently keep the last one, which turns a
pasted server or rule into a silent overwrite), and every error names the file and position.
Text in, data out: reading the files is :mod:`proxy.core.files`' job, so the policy package can
parse with this module and stay pure.
"""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import Any

import yaml

from proxy.core.errors import ConfigError

__all__ = ["parse_document", "parse_json", "parse_yaml", "show_value", "switch_word"]


def parse_document(text: str, source: str) -> Any:
    """JSON when ``source`` ends in .json, else YAML (a superset).

    Raises:
        ConfigError: naming the file, the line and column, and the problem.
    """
    is_json = PurePath(source).suffix.lower() == ".json"
    return parse_json(text, source) if is_json else parse_yaml(text, source)


def switch_word(value: Any) -> Any:
    """The word a YAML 1.1 boolean was written as, where a mode is expected: a bare ``off`` (or
    ``no``, ``false``) is read as false, ``on`` (``yes``, ``true``) as true, and an operator who
    wrote ``mode: off`` means the mode. Anything else is left to the mode's own validation (which
    refuses ``on`` where no mode is called that). Every setting with an ``off`` mode takes it
    (:mod:`proxy.policy.settings`, :mod:`proxy.discovery.settings`; a test pins that all do)."""
    if value is False:
        return "off"
    if value is True:
        return "on"
    return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that rejects duplicate keys, which plain YAML silently resolves to the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden by the keys after it; that is its point
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(f"{source}: invalid YAML: {where}{exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from None


def parse_json(text: str, source: str) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        for key in keys:
            if keys.count(key) > 1:
                raise ConfigError(f"{source}: invalid JSON: duplicate key {key!r}")
        return dict(pairs)

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{source}: invalid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None


def show_value(value: Any) -> str:
    # Only scalars are echoed: a list or mapping in the wrong place may hold secrets.
    if isinstance(value, str | int | float | bool) or value is None:
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    return f"a {type(value).__name__}"
