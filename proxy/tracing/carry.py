"""What an outbound message carries of the trace: Manifold's context, or the caller's cleaned.

The outbound connection calls these for every request it sends to a server and every server
request it relays to a client. With tracing on and the request traced, the message carries the
context of Manifold's own span (in ``params._meta``, and in the HTTP headers of a request to a
server); otherwise the context the caller or the server put in ``_meta`` goes on only if it
parses (:func:`proxy.tracing.w3c.clean_meta`): a malformed one is never passed on as it came.
"""

from __future__ import annotations

from typing import Any

from proxy.protocol.jsonrpc import RequestId
from proxy.tracing import active
from proxy.tracing.active import ClientTrace, RelayTrace
from proxy.tracing.w3c import clean_meta

__all__ = ["to_client", "to_server"]


def _cleaned(params: Any) -> Any:
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and (cleaned := clean_meta(meta)) is not None:
        return {**params, "_meta": cleaned}
    return params


def to_server(
    method: str,
    params: dict[str, Any] | None,
    headers: dict[str, str] | None,
    server_id: str,
    request_id: RequestId,
) -> tuple[ClientTrace | None, dict[str, Any] | None, dict[str, str] | None]:
    """The span of a request to ``server_id`` (None: not traced), its params and its headers."""
    traced = active.CURRENT.get() if active.tracer is not None else None
    if traced is None:
        return None, _cleaned(params), headers
    span = traced.client(method, params, server_id, request_id)
    return span, span.params(params), {**(headers or {}), **span.headers()}


def to_client(
    call: ClientTrace | None, method: str, params: dict[str, Any] | None
) -> tuple[RelayTrace | None, dict[str, Any] | None]:
    """The span of a server's request relayed to the client during ``call`` (None: not traced),
    and its params."""
    if call is None:
        return None, _cleaned(params)
    relayed = call.relayed(method, params)
    return relayed, relayed.meta(params)
