"""What an inbound transport refuses, and the one function per transport kind that writes it.

A transport that will not serve a request raises :class:`Refused`, naming the error (a
:class:`~proxy.core.errors.ProtocolError`, which says the JSON-RPC code, message and data) and,
over HTTP, the status and headers. It never builds an error answer itself: the HTTP endpoint's
entry point catches the refusal and :func:`write_http` writes it; stdio writes
:func:`answer_of` as a line. Both go through :func:`proxy.observe.boundary.wire_error`, the one
place an exception becomes a JSON-RPC error.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.core.errors import ProtocolError
from proxy.inbound.asgi import JSON_HEADERS, Send, respond
from proxy.observe.boundary import wire_error
from proxy.protocol import jsonrpc, stateless
from proxy.protocol.jsonrpc import Message, RequestId

__all__ = ["Refused", "answer_of", "write_http"]


class Refused(Exception):  # a refusal, raised to the transport's entry point
    """A request this transport refuses: ``error`` answered with ``status`` over HTTP (None: the
    status revision 2026-07-28 gives the error's code, :func:`proxy.protocol.stateless.http_status`).

    ``stateless``: the client speaks 2026-07-28 (an unreadable id is left out, not ``null``).
    """

    def __init__(
        self,
        error: ProtocolError,
        status: int | None = 400,
        request_id: RequestId | None = None,
        *,
        headers: Sequence[tuple[bytes, bytes]] = (),
        stateless: bool = False,
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.status = status
        self.request_id = request_id
        self.headers = tuple(headers)
        self.stateless = stateless


def answer_of(refused: Refused) -> Message:
    """The JSON-RPC error response a refusal is written as."""
    return wire_error(refused.error, refused.request_id, stateless=refused.stateless)


async def write_http(send: Send, refused: Refused) -> None:
    """Write ``refused`` as an HTTP response: its status, JSON headers and its own, the error body."""
    answer = answer_of(refused)
    status = refused.status if refused.status is not None else stateless.http_status(answer)
    await respond(send, status, jsonrpc.encode(answer), [*JSON_HEADERS, *refused.headers])
