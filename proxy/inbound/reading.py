"""How every inbound transport reads one client message: bounded in bytes, nesting, objects and
arrays, and in the size of the parts Manifold keeps (``limits.max_request_bytes``,
``max_depth``, ``max_containers``, ``max_*_bytes``).

Each refusal made here is counted here (``manifold_limit_refusals_total{limit}``), once: the
transports answer these refusals themselves, outside :meth:`proxy.observe.boundary.Boundary.answer`.
"""

from __future__ import annotations

from typing import Any

from proxy.config.model import LimitsConfig
from proxy.core.errors import LimitExceeded, MessageTooLarge
from proxy.observe.boundary import Boundary
from proxy.protocol import jsonrpc
from proxy.protocol.bounds import PartBounds
from proxy.protocol.jsonrpc import Message

__all__ = ["Reader"]


class Reader:
    def __init__(self, limits: LimitsConfig, boundary: Boundary) -> None:
        self.max_bytes = limits.max_request_bytes
        self._max_depth = limits.max_depth
        self._max_containers = limits.max_containers
        self._parts = PartBounds(
            limits.max_capabilities_bytes, limits.max_meta_bytes, limits.max_argument_bytes
        )
        self._boundary = boundary

    def too_large(self, what: str) -> MessageTooLarge:
        """The refusal of a body or line past ``max_request_bytes``, counted."""
        refusal = MessageTooLarge(what, limit="max_request_bytes", maximum=self.max_bytes)
        self._boundary.refused(refusal)
        return refusal

    def decode(self, data: bytes) -> Any:
        """Decode one body or line.

        Raises:
            ParseError: not JSON.
            LimitExceeded: too deep, or too many objects and arrays (counted).
        """
        try:
            return jsonrpc.decode(data, max_depth=self._max_depth, max_containers=self._max_containers)
        except LimitExceeded as exc:
            self._boundary.refused(exc)
            raise

    def check(self, message: Message, size: int) -> None:
        """Refuse a message (at most ``size`` bytes) whose capabilities, ``_meta`` or arguments
        are too big.

        Raises:
            LimitExceeded: naming the limit (counted).
        """
        try:
            self._parts.check(message, size)
        except LimitExceeded as exc:
            self._boundary.refused(exc)
            raise
