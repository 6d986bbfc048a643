"""One 2026-07-28 request as every inbound transport runs it: a caller made from its envelope,
the router's answer, and what the request says before it on a bounded channel.

The transport decides only how to write (HTTP: JSON or SSE; stdio: lines) and what cancels it.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Final

import anyio

from proxy.clients.contract import Endpoint
from proxy.clients.session import StatelessCaller
from proxy.policy.model import Identity
from proxy.protocol.jsonrpc import Message
from proxy.protocol.stateless import Envelope

__all__ = ["Exchange", "caller_of"]

logger = logging.getLogger("proxy.inbound.exchange")

_BUFFERED: Final = 256  # notifications waiting to be written; a client that lags more loses some
_callers = itertools.count(1)


def caller_of(envelope: Envelope, identity: Identity, transport: str) -> StatelessCaller:
    """The caller of one 2026-07-28 request, from its envelope."""
    return StatelessCaller(
        id=f"{next(_callers):08x}-request",  # the first 8 characters (what logs keep) differ
        transport=transport,
        protocol_version=envelope.protocol_version,
        capabilities=dict(envelope.capabilities),
        identity=identity,
        client_info=dict(envelope.client_info or {}),
        log_level=envelope.log_level,
    )


class Exchange:
    """Run with ``tg.start_soon(exchange.run)``; read :attr:`notes` until it ends, then
    :attr:`answer` is the response. ``on_note`` is called after each notification queued."""

    def __init__(
        self,
        endpoint: Endpoint,
        caller: StatelessCaller,
        message: Message,
        on_note: Callable[[], None] | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._caller = caller
        self._message = message
        self._on_note = on_note
        self._sink, self.notes = anyio.create_memory_object_stream[Message](_BUFFERED)
        self.answer: Message | None = None

    async def run(self) -> None:
        with self._sink:
            self.answer = await self._endpoint.handle_stateless(self._caller, self._message, self._emit)

    def _emit(self, note: Message) -> None:
        try:
            self._sink.send_nowait(note)
        except anyio.WouldBlock:
            logger.debug(
                "request %r: dropped a %s the client read too slowly", self._message["id"], note["method"]
            )
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the request is answered: a late notification has nowhere to go
        else:
            if self._on_note is not None:
                self._on_note()
