"""Validate a message against one definition of a revision's JSON Schema (vendored in
tests/fixtures/schemas)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from jsonschema.validators import validator_for

SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "schemas"


@cache
def validator(revision: str, definition: str) -> Callable[[Any], None]:
    """``validate(instance)`` for ``#/$defs/<definition>``; raises jsonschema.ValidationError."""
    schema = orjson.loads((SCHEMAS / f"{revision}.json").read_bytes())
    defs_key = "$defs" if "$defs" in schema else "definitions"
    root = {"$schema": schema["$schema"], defs_key: schema[defs_key], "$ref": f"#/{defs_key}/{definition}"}
    return validator_for(root)(root).validate
