"""The bearer token each identity last proved itself with, for the ``exchange`` mode.

The authenticator reports every token that let a request in (``Authenticator.on_bearer``); this
keeps, per identity key, the latest one and its expiry, in memory only: the request that needs
an exchange is served by the replica that has just checked its token. It is read only to be
exchanged at the authorization server (RFC 8693), never sent to a server, never logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cachetools import TLRUCache

from proxy.policy.model import Identity

__all__ = ["InboundTokens"]


def _until(_key: tuple[str, ...], value: tuple[str, float], _now: float) -> float:
    return value[1]


class InboundTokens:
    def __init__(self, *, size: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._tokens: TLRUCache[tuple[str, ...], tuple[str, float]] = TLRUCache(
            maxsize=size, ttu=_until, timer=clock
        )

    def keep(self, identity: Identity, token: str, until: float) -> None:
        """The hook for ``Authenticator.on_bearer``."""
        if until > self._clock():
            self._tokens[identity.key] = (token, until)

    def current(self, identity: Identity) -> tuple[str, float] | None:
        """The identity's latest unexpired token and its expiry, if it presented one."""
        return self._tokens.get(identity.key)
