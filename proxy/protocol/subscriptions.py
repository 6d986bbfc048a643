"""``subscriptions/listen`` (revision 2026-07-28) on the wire, pure: the filter and the messages.

A 2026-07-28 client hears of changes only on a listen stream: it sends ``subscriptions/listen``
with a filter (``params.notifications``) and the response *is* the stream. What goes on it, in
order, for a listen request with id ``L``:

1. :func:`acknowledgement`: ``notifications/subscriptions/acknowledged`` with the filter the
   server agreed to honour (a subset of the one asked for), tagged with ``L``;
2. the notifications :meth:`Filter.wants`, each passed through :func:`tagged` (``L`` in
   ``params._meta["io.modelcontextprotocol/subscriptionId"]``); never progress or log lines,
   which belong to the request they are about;
3. when the *server* ends the stream on its own initiative (shutdown), :func:`completion`: the
   response to the listen request. A client that disconnects gets nothing more, and a stream
   that ends without it tells the client to listen again.

Which subset is honoured is the caller's decision (Manifold's gateway: it knows what it can
deliver and what each identity may read); the shape of every message is decided here, so each
transport (SSE on HTTP, lines on stdio) writes the same messages. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from proxy.core.errors import InvalidParams
from proxy.protocol import jsonrpc
from proxy.protocol.jsonrpc import Message, RequestId

__all__ = [
    "ACKNOWLEDGED",
    "LISTEN",
    "MAX_RESOURCE_SUBSCRIPTIONS",
    "SUBSCRIPTION_ID_KEY",
    "UPDATED",
    "Filter",
    "acknowledgement",
    "completion",
    "event_key",
    "tagged",
]

LISTEN: Final = "subscriptions/listen"
ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
UPDATED: Final = "notifications/resources/updated"
SUBSCRIPTION_ID_KEY: Final = "io.modelcontextprotocol/subscriptionId"
# More URIs than this in one filter: the first ones are honoured, the rest left out of the
# acknowledgement (which the spec lets a server do), so one request cannot make Manifold send
# thousands of resources/subscribe to the servers behind it.
MAX_RESOURCE_SUBSCRIPTIONS: Final = 256

# The filter's flags and the notification each one lets through.
_FLAGS: Final = {
    "toolsListChanged": "notifications/tools/list_changed",
    "promptsListChanged": "notifications/prompts/list_changed",
    "resourcesListChanged": "notifications/resources/list_changed",
}
_URIS: Final = "resourceSubscriptions"


@dataclass(frozen=True, slots=True)
class Filter:
    """What one listen stream carries: the list changes it wants, and the resources it watches."""

    tools: bool = False
    prompts: bool = False
    resources: bool = False
    uris: tuple[str, ...] = ()  # in the order asked for, without repeats

    @classmethod
    def parse(cls, params: Mapping[str, Any]) -> Filter:
        """The filter of a listen request's ``params`` (unknown keys in it are ignored).

        Raises:
            InvalidParams: ``notifications`` is missing or not an object, a flag is not a
                boolean, or ``resourceSubscriptions`` is not a list of strings.
        """
        notifications = params.get("notifications")
        if not isinstance(notifications, Mapping):
            raise InvalidParams(f'{LISTEN} needs a "notifications" object (the filter)')
        flags: dict[str, bool] = {}
        for key in _FLAGS:
            value = notifications.get(key, False)
            if not isinstance(value, bool):
                raise InvalidParams(f"notifications.{key} must be a boolean")
            flags[key] = value
        uris = notifications.get(_URIS, [])
        if not isinstance(uris, list) or not all(isinstance(uri, str) for uri in uris):
            raise InvalidParams(f"notifications.{_URIS} must be a list of URI strings")
        return cls(
            tools=flags["toolsListChanged"],
            prompts=flags["promptsListChanged"],
            resources=flags["resourcesListChanged"],
            uris=tuple(dict.fromkeys(uris)),
        )

    def only(self, uris: Iterable[str]) -> Filter:
        """This filter watching only those of its URIs that are in ``uris``."""
        keep = set(uris)
        return replace(self, uris=tuple(uri for uri in self.uris if uri in keep))

    def watching(self, uris: Iterable[str]) -> Filter:
        """This filter with its URIs replaced by ``uris`` (without repeats): those honoured, as
        they will be named in updates."""
        return replace(self, uris=tuple(dict.fromkeys(uris)))

    def to_wire(self) -> dict[str, Any]:
        """The filter as ``notifications`` of an acknowledgement: what is off is left out."""
        wire: dict[str, Any] = {key: True for key, on in zip(_FLAGS, self._flags(), strict=True) if on}
        if self.uris:
            wire[_URIS] = list(self.uris)
        return wire

    def wants(self, message: Message) -> bool:
        """Whether a notification goes on a stream with this filter: a list change it asked
        for, or an update of a resource it watches. Nothing else, ever (progress, log lines)."""
        method = message.get("method")
        if method == UPDATED:
            params = message.get("params")
            return isinstance(params, Mapping) and params.get("uri") in self.uris
        return any(on and method == wanted for wanted, on in zip(_FLAGS.values(), self._flags(), strict=True))

    def _flags(self) -> tuple[bool, bool, bool]:
        return self.tools, self.prompts, self.resources


def event_key(message: Message) -> tuple[str, Any]:
    """What a notification says, for spotting a repeat still unread: the method, and the URI
    of an update. A list change is a level trigger: a second one, unread, says nothing new."""
    params = message.get("params")
    uri = params.get("uri") if message.get("method") == UPDATED and isinstance(params, Mapping) else None
    return str(message.get("method")), uri


def _meta(subscription_id: RequestId) -> dict[str, Any]:
    return {SUBSCRIPTION_ID_KEY: subscription_id}


def acknowledgement(subscription_id: RequestId, honoured: Filter) -> Message:
    """The first message of a listen stream: what it will carry."""
    return jsonrpc.notification(
        ACKNOWLEDGED, {"_meta": _meta(subscription_id), "notifications": honoured.to_wire()}
    )


def tagged(message: Message, subscription_id: RequestId) -> Message:
    """A copy of a notification for one listen stream: the stream's id in ``params._meta``,
    replacing any (a server's own listen id means nothing to our client)."""
    params = message.get("params")
    params = dict(params) if isinstance(params, Mapping) else {}
    meta = params.get("_meta")
    params["_meta"] = {**(meta if isinstance(meta, Mapping) else {}), **_meta(subscription_id)}
    return jsonrpc.notification(str(message["method"]), params)


def completion(subscription_id: RequestId) -> Message:
    """The listen request's response: the server ended the stream on purpose (a graceful end)."""
    return jsonrpc.result_response(
        subscription_id, {"resultType": "complete", "_meta": _meta(subscription_id)}
    )
