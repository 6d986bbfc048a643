"""What every section of the config shares: the frozen, strict model base, and the problems a
cross-field check reports at exact paths."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
)

Loc: TypeAlias = tuple[str | int, ...]


class Problems(ValueError):
    """Problems found by a validator, each at a path relative to the validated object.

    Pydantic keeps a raised ValueError in the error's ``ctx``, which lets a cross-field check
    report the exact field (``servers.x.transport``) instead of the whole object.
    """

    def __init__(self, items: Iterable[tuple[Loc, str]]) -> None:
        self.items = list(items)
        super().__init__("; ".join(message for _, message in self.items))


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
