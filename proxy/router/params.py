"""What one request's params say, read strictly: its session (handshake era only), a string it
must carry, and the refusal of a request past the in-flight bound."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.clients.session import ClientSession, InboundRequest
from proxy.core.errors import InvalidParams, InvalidRequest, LimitExceeded, MethodNotFound

__all__ = ["session_of", "string_param", "too_many"]


def session_of(inbound: InboundRequest) -> ClientSession:
    """The session of a request only the handshake era has (2026-07-28 removed it).

    Raises:
        MethodNotFound: a stateless caller sent it.
    """
    if not isinstance(inbound.session, ClientSession):
        raise MethodNotFound("Method not found")
    return inbound.session


def too_many(duplicate: bool, maximum: int) -> InvalidRequest:
    if duplicate:  # its cancellation could not tell the two apart, nor its end free the right one
        return InvalidRequest("a request with this id is still in flight in this session")
    return LimitExceeded(
        "too many requests in flight in this session", limit="max_in_flight_per_session", maximum=maximum
    )


def string_param(params: Mapping[str, Any], key: str, method: str) -> str:
    value = params.get(key)
    if not isinstance(value, str):
        raise InvalidParams(f'{method} needs a string "{key}"')
    return value
