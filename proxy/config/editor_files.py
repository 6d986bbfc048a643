"""The variables of MCP files editors write (VS Code's ``.vscode/mcp.json``), read by Manifold.

VS Code's file has ``servers`` (Manifold's own key) and ``inputs``: values it asks the user for
(an API key, ``"password": true``) and substitutes where a server's value says ``${input:ID}``.
Manifold asks nobody, so it reads each input from the environment, as GitHub Actions reads an
action's inputs: ``${input:github-token}`` is ``$INPUT_GITHUB_TOKEN`` (``INPUT_`` and the id in
capitals, every character but a letter or digit made ``_``). ``${env:NAME}`` is ``$NAME``, and
``${workspaceFolder}`` the folder that holds ``.vscode/`` (for any other file, its own folder).

Pure: the environment and the file's place are passed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = ["Variables", "declared_inputs", "input_variable", "workspace_of"]

_NOT_NAME: Final = re.compile(r"[^A-Za-z0-9]")
_MAX_INPUTS: Final = 1000


def input_variable(input_id: str) -> str:
    """The environment variable an input is read from: ``github-token`` -> ``INPUT_GITHUB_TOKEN``."""
    return "INPUT_" + _NOT_NAME.sub("_", input_id).upper()


def workspace_of(config_path: Path) -> str:
    """VS Code's ``${workspaceFolder}`` for a file at ``config_path``."""
    folder = config_path.resolve().parent
    return str(folder.parent if folder.name == ".vscode" else folder)


def declared_inputs(data: Mapping[str, Any]) -> tuple[frozenset[str] | None, list[str]]:
    """The input ids a file's ``inputs`` declares (None: it has no ``inputs``), and what is wrong
    with the list (each input needs a string ``id``)."""
    inputs = data.get("inputs")
    if inputs is None:
        return None, []
    if not isinstance(inputs, list) or len(inputs) > _MAX_INPUTS:
        return frozenset(), [f"must be a list of at most {_MAX_INPUTS} inputs, each with a string 'id'"]
    ids: set[str] = set()
    problems = []
    for index, item in enumerate(inputs):
        found = item.get("id") if isinstance(item, Mapping) else None
        if not isinstance(found, str) or not found:
            problems.append(f"input #{index} has no string 'id'")
        else:
            ids.add(found)
    return frozenset(ids), problems


@dataclass(frozen=True)
class Variables:
    """What ``${...}`` references are resolved from."""

    environ: Mapping[str, str]
    workspace: str | None = None  # ${workspaceFolder}; None: the data came from no file
    inputs: frozenset[str] | None = None  # the ids ``inputs`` declares; None: no ``inputs`` list
    used: dict[str, str] = field(default_factory=dict)  # input id -> the variable it was read from

    def editor(self, body: str) -> tuple[str | None, str | None] | None:
        """An editor's variable (``input:ID``, ``env:NAME``, ``workspaceFolder``): its value, or
        the problem; None when ``body`` is not one."""
        if body == "workspaceFolder":
            if self.workspace is None:
                return None, "${workspaceFolder} is known only for a config file"
            return self.workspace, None
        kind, colon, name = body.partition(":")
        if not colon or kind not in ("input", "env") or not name:
            return None
        if kind == "env":
            value = self.environ.get(name)
            return (value, None) if value is not None else (None, f"environment variable {name!r} is not set")
        if self.inputs is not None and name not in self.inputs:
            return None, f"names input {name!r}, which 'inputs' does not declare"
        variable = input_variable(name)
        value = self.environ.get(variable)
        if value is None:
            return None, (
                f"input {name!r} is read from the environment variable {variable} (Manifold asks "
                "nobody), which is not set"
            )
        self.used[name] = variable
        return value, None
