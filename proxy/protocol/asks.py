"""What a server may ask a client, and the client capability each question needs.

One table, read by everything that relays, parks or unrolls a server's question: a question is
passed on only to a client that declared the capability it needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["ASKABLE", "ASKED_CAPABILITIES", "NEEDS"]

# A server's request to a client -> the client capability it needs.
NEEDS: Final[Mapping[str, str]] = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
ASKABLE: Final = frozenset(NEEDS)  # the methods
ASKED_CAPABILITIES: Final = tuple(dict.fromkeys(NEEDS.values()))  # the capabilities, in order
