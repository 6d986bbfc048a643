"""How big the parts of a client's request may be that Manifold keeps or passes on whole: the
capabilities and clientInfo a client declares (``initialize``, or a 2026-07-28 ``_meta``
envelope), a request's ``_meta``, and a ``tools/call``'s arguments.

Measuring a part means encoding it again, so it is measured only when the message it came in is
bigger than the limit: a part is never bigger than its message. On the common path the checks
cost a comparison of integers. Pure: a message and its size in, a refusal out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.errors import LimitExceeded
from proxy.protocol.jsonrpc import Message
from proxy.protocol.stateless import CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY

__all__ = ["PartBounds"]


def _size(value: Any) -> int:
    """The encoded size of a decoded value (0 for an absent one)."""
    if value is None:
        return 0
    try:
        return len(orjson.dumps(value))
    except orjson.JSONEncodeError:  # decoded deeper than orjson writes: bigger than any limit
        return 1 << 62


@dataclass(frozen=True, slots=True)
class PartBounds:
    """The ``limits.max_*_bytes`` of the parts of one client message."""

    max_capabilities_bytes: int
    max_meta_bytes: int
    max_argument_bytes: int

    def check(self, message: Message, size: int) -> None:
        """Refuse ``message`` (which took ``size`` bytes on the wire, or fewer) if a part is too big.

        Raises:
            LimitExceeded: naming ``limits.max_capabilities_bytes``, ``max_meta_bytes`` or
                ``max_argument_bytes``.
        """
        if size <= min(self.max_capabilities_bytes, self.max_meta_bytes, self.max_argument_bytes):
            return
        params = message.get("params")
        if not isinstance(params, dict):
            return
        method = message.get("method")
        caps = self.max_capabilities_bytes
        if method == "initialize" and size > caps:
            declared = _size(params.get("capabilities")) + _size(params.get("clientInfo"))
            if declared > caps:
                raise LimitExceeded(
                    f"initialize declares {declared} bytes of capabilities and clientInfo",
                    limit="max_capabilities_bytes",
                    maximum=caps,
                )
        meta = params.get("_meta")
        if isinstance(meta, dict):
            if size > caps:
                declared = _size(meta.get(CLIENT_CAPABILITIES_KEY)) + _size(meta.get(CLIENT_INFO_KEY))
                if declared > caps:
                    raise LimitExceeded(
                        f"_meta declares {declared} bytes of client capabilities and client info",
                        limit="max_capabilities_bytes",
                        maximum=caps,
                    )
            if size > self.max_meta_bytes and (measured := _size(meta)) > self.max_meta_bytes:
                raise LimitExceeded(
                    f"_meta takes {measured} bytes", limit="max_meta_bytes", maximum=self.max_meta_bytes
                )
        if method == "tools/call" and size > self.max_argument_bytes:
            measured = _size(params.get("arguments"))
            if measured > self.max_argument_bytes:
                raise LimitExceeded(
                    f"the tool call's arguments take {measured} bytes",
                    limit="max_argument_bytes",
                    maximum=self.max_argument_bytes,
                )
