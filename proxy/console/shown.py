"""What a console page handler gives back, and the two shapes of handler: one that reads (a GET
with its query) and one that acts (a POST's form, with who asked and from where)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from proxy.console.backend import Answer, Backend
from proxy.console.markup import Html
from proxy.core.identity import Identity

__all__ = ["Act", "Build", "Shown", "after"]


@dataclass(frozen=True, slots=True)
class Shown:
    """A page to show: its title, its markup, which navigation entry it is, a notice."""

    title: str
    body: Sequence[Html]
    current: str = ""
    notice: tuple[str, str] | None = None  # (ok | bad, message)
    status: int = 200


Build: TypeAlias = Callable[[Backend, str, Mapping[str, str]], Awaitable[Shown]]
"""(backend, the viewer's CSRF token, the query and path parameters) -> the page."""
Act: TypeAlias = Callable[[Backend, str, Mapping[str, str], Identity, str], Awaitable[Shown]]
"""(backend, CSRF token, the form and path parameters, who acts, from which address) -> the page."""


def after(shown: Shown, answer: Answer) -> Shown:
    """``shown`` (the page an action returns to) with what the action answered as its notice:
    its message, and which replicas acted when it says (409 when it was refused)."""
    ok = bool(answer.get("ok"))
    message = str(answer.get("message") or ("Done." if ok else "Refused."))
    replicas = answer.get("replicas")
    if isinstance(replicas, Sequence) and not isinstance(replicas, str) and replicas:
        message += f" Replicas that acted: {', '.join(str(r) for r in replicas)}."
    return Shown(shown.title, shown.body, shown.current, ("ok" if ok else "bad", message), 200 if ok else 409)
