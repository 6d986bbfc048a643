"""The bearer token the current request proved itself with, for the ``exchange`` mode.

The authenticator reports the token that let a request in (``Authenticator.on_bearer``), while it
handles that request; this keeps it in a context variable, so it belongs to that request (and
the tasks it starts) alone: the exchange uses the token *this* request presented, never another
request's of the same identity. Nothing outlives the request; it is read only to be exchanged
at the authorization server (RFC 8693), never sent to a server, never logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar

from proxy.policy.model import Identity

__all__ = ["InboundTokens"]

_CURRENT: ContextVar[tuple[tuple[str, ...], str, float] | None] = ContextVar(
    "manifold_inbound_bearer", default=None
)


class InboundTokens:
    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock

    def keep(self, identity: Identity, token: str, until: float) -> None:
        """The hook for ``Authenticator.on_bearer``: called in the request's own context."""
        _CURRENT.set((identity.key, token, until) if until > self._clock() else None)

    def current(self, identity: Identity) -> tuple[str, float] | None:
        """The token the current request presented for ``identity``, and its expiry, if unexpired."""
        held = _CURRENT.get()
        if held is None or held[0] != identity.key or held[2] <= self._clock():
            return None
        return held[1], held[2]
