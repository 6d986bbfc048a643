"""Tool overrides: what the operator changes of a server's tool, both ways.

An override is configuration (``servers.<id>.tools.<the server's own tool name>``): a new name,
title and description, and argument shaping:

* **fixed** ``owner: acme``: the argument is taken out of the listed schema (``properties`` and
  ``required``) and always sent with that value;
* **default** ``per_page: 50``: shown as the property's ``default``, no longer required, and sent
  when the caller leaves the argument out;
* **hidden**: an optional argument taken out of the listed schema and never sent.

A caller that sets a fixed or hidden argument anyway is **refused** (invalid arguments), not
overwritten: it asked for something the tool as listed does not have, and quietly replacing its
value would run the call on a target it did not name (``owner: evil`` run as ``owner: acme``).

An override is checked against the tool's ``inputSchema`` whenever the server lists it
(:func:`problems`): an argument the schema does not have, a hidden one the server requires, or a
schema Manifold cannot shape. A tool whose override does not fit is withheld (its problem names
server, tool and argument), never served unshaped: a fixed argument is often a boundary.

The pins (:mod:`proxy.policy.pins`) hash what the server sent; the override is applied after.
Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolShape", "offered_as_task", "problems", "runs_as_task", "shape_arguments", "shape_definition"]

_AS_TASK = frozenset({"optional", "required"})


@dataclass(frozen=True)
class ToolShape:
    """One tool's override, by the server's own tool name."""

    name: str | None = None  # shown instead of the server's name (then prefixed as any name)
    title: str | None = None
    description: str | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    hidden: frozenset[str] = frozenset()

    @property
    def shapes_arguments(self) -> bool:
        return bool(self.fixed or self.defaults or self.hidden)


def _schema_parts(definition: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[Any]] | None:
    schema = definition.get("inputSchema")
    if not isinstance(schema, Mapping):
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return None
    return properties, required


def problems(server_id: str, tool: str, definition: Mapping[str, Any], shape: ToolShape) -> list[str]:
    """Why ``shape`` does not fit the tool as its server listed it; empty when it does."""
    if not shape.shapes_arguments:
        return []
    where = f"server {server_id!r}, tool {tool!r}"
    parts = _schema_parts(definition)
    if parts is None:
        return [f"{where}: its inputSchema has no object 'properties' to shape arguments in"]
    properties, required = parts
    found = []
    for argument in (*shape.fixed, *shape.defaults, *sorted(shape.hidden)):
        if argument not in properties:
            known = ", ".join(map(repr, properties)) or "none"
            found.append(
                f"{where}: the override names argument {argument!r}, which its inputSchema does not "
                f"have (it has: {known})"
            )
    for argument in sorted(shape.hidden):
        if argument in required:
            found.append(
                f"{where}: argument {argument!r} is required by the server, so it cannot be hidden; "
                "give it a fixed value instead"
            )
    return found


def shape_definition(definition: Mapping[str, Any], shape: ToolShape) -> dict[str, Any]:
    """The definition as clients see it: title, description and ``inputSchema`` overridden.
    ``name`` is the merge's business (the namespaced name)."""
    shaped = dict(definition)
    if shape.title is not None:
        shaped["title"] = shape.title
    if shape.description is not None:
        shaped["description"] = shape.description
    parts = _schema_parts(definition)
    if not shape.shapes_arguments or parts is None:
        return shaped
    properties, required = parts
    gone = set(shape.fixed) | shape.hidden
    kept = {key: value for key, value in properties.items() if key not in gone}
    for argument, value in shape.defaults.items():
        described = kept.get(argument)
        kept[argument] = {**(described if isinstance(described, Mapping) else {}), "default": value}
    schema = dict(definition["inputSchema"])
    schema["properties"] = kept
    still = [name for name in required if name not in gone and name not in shape.defaults]
    if still or "required" in schema:
        schema["required"] = still
    shaped["inputSchema"] = schema
    return shaped


def shape_arguments(arguments: Mapping[str, Any], shape: ToolShape) -> dict[str, Any] | str:
    """The arguments the server gets, or why the caller's are refused (it set a fixed or hidden
    argument, which the tool as listed does not have)."""
    if not shape.shapes_arguments:
        return dict(arguments)
    refused = sorted(name for name in arguments if name in shape.fixed or name in shape.hidden)
    if refused:
        named = ", ".join(map(repr, refused))
        return f"this tool has no argument {named}: it is set by the gateway's configuration, not by callers"
    shaped = {**shape.defaults, **arguments}
    shaped.update(shape.fixed)
    return shaped


def runs_as_task(definition: Mapping[str, Any]) -> bool:
    """Whether a tool's definition says it may run as a task (``execution.taskSupport``
    ``optional`` or ``required``; absent or anything else is ``forbidden``)."""
    execution = definition.get("execution")
    return isinstance(execution, Mapping) and execution.get("taskSupport") in _AS_TASK


def offered_as_task(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The definition of a tool Manifold holds as a task (``proxy.tasks.held``): its
    ``execution.taskSupport`` is ``optional`` (a client may ask for a task, or call it plainly),
    unless the tool says it may run as a task already (then its server runs it: relayed)."""
    if runs_as_task(definition):
        return dict(definition)
    execution = definition.get("execution")
    kept = execution if isinstance(execution, Mapping) else {}
    return {**definition, "execution": {**kept, "taskSupport": "optional"}}
