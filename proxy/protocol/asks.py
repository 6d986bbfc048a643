"""What a server may ask a client, and the client capability each question needs.

One table, read by everything that relays, parks or unrolls a server's question: a question is
passed on only to a client that declared the capability it needs.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, Final

from proxy.protocol import extensions

__all__ = ["ASKABLE", "ASKED_CAPABILITIES", "NEEDS", "answer_problem", "kept_capabilities"]

# A server's request to a client -> the client capability it needs.
NEEDS: Final[Mapping[str, str]] = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
ASKABLE: Final = frozenset(NEEDS)  # the methods
ASKED_CAPABILITIES: Final = tuple(dict.fromkeys(NEEDS.values()))  # the capabilities, in order

_MAX_FLAGS: Final = 16  # sub-capabilities kept per capability (the spec defines two or three)
_MAX_FLAG_NAME: Final = 64


def kept_capabilities(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """What Manifold keeps of a client's declared capabilities: the ones a server may ask it for
    (:data:`ASKED_CAPABILITIES`), each with its flags one level down (``elicitation.url``,
    ``roots.listChanged``, ``sampling.tools``) and nothing deeper, and the ``extensions`` Manifold
    relays to servers (:func:`proxy.protocol.extensions.kept`: a few, small). Manifold acts on
    nothing else a client declares, and keeps this in every session and signs it into the
    session's id: so it is small and bounded, whatever the client sent."""
    kept: dict[str, Any] = {}
    for name in ASKED_CAPABILITIES:
        if name not in capabilities:
            continue
        value = capabilities[name]
        flags: dict[str, Any] = {}
        if isinstance(value, Mapping):
            for flag, setting in itertools.islice(value.items(), _MAX_FLAGS):
                if isinstance(flag, str) and len(flag) <= _MAX_FLAG_NAME:
                    flags[flag] = setting if isinstance(setting, bool) else {}
        kept[name] = flags
    if declared := extensions.kept(capabilities.get("extensions")):
        kept["extensions"] = declared
    return kept


_ACTIONS: Final = frozenset({"accept", "decline", "cancel"})


def answer_problem(method: str, answer: object) -> str | None:
    """What is wrong with a client's ``answer`` to a server's ``method`` request, for a client
    that answers in a request of its own (``inputResponses``): None when it has the result's
    shape (an ``ElicitResult``, a ``CreateMessageResult``, a ``ListRootsResult``)."""
    if not isinstance(answer, Mapping):
        return f"the result of {method} is an object"
    if method == "elicitation/create":
        if answer.get("action") not in _ACTIONS:
            return '"action" is one of accept, decline, cancel'
        if "content" in answer and not isinstance(answer["content"], Mapping | None):
            return '"content" is an object'
    elif method == "sampling/createMessage":
        if answer.get("role") not in ("user", "assistant") or not isinstance(answer.get("model"), str):
            return 'a CreateMessageResult has "role" (user or assistant), "model" and "content"'
        if not isinstance(answer.get("content"), Mapping | list):
            return '"content" is a content block or a list of them'
    elif method == "roots/list":
        roots = answer.get("roots")
        if not isinstance(roots, list) or not all(_is_root(r) for r in roots):
            return '"roots" is a list of {"uri": ...}'
    return None


def _is_root(root: object) -> bool:
    return isinstance(root, Mapping) and isinstance(root.get("uri"), str)
