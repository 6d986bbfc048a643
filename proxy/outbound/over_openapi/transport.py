"""An OpenAPI-described REST API as an MCP server: a transport whose link answers the MCP
requests a server connection sends (``initialize``, ``ping``, ``tools/list``, ``tools/call``) by
itself, making one HTTP call per ``tools/call`` with Manifold's own HTTP client
(:mod:`proxy.outbound.over_http.h1`: keep-alive, connect timeout, TLS, gzip inflated in bounded
steps, redirects within the API's origin only). Everything above the transport (namespacing,
policy, credentials, rate limits, validation, audit, metrics) treats it as any other server.

The link speaks the handshake era (``server/discover`` is answered "method not found", so the
connection falls back to ``initialize``). ``notifications/cancelled`` cancels the HTTP call it
names. Every failure lands on one call: an API that cannot be reached, answers past
``max_response_bytes``, redirects elsewhere or answers an error status gives that call an
``isError`` result naming the problem.

Hot reload: a document read from a file is checked every :data:`WATCH_INTERVAL` seconds, one at
a URL fetched again every ``refresh_interval`` seconds (``If-None-Match`` its ETag: a 304 costs
nothing); when it changed, its tools are planned again and, if they differ, the link says
``notifications/tools/list_changed`` (the connection lists again and clients hear of it once).
A changed document that is unusable (unreachable, too large, invalid) keeps the tools in force
and is logged.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.abc
import orjson
import yarl

from proxy import __version__
from proxy.config.openapi import OpenApiSource
from proxy.core.errors import ServerUnavailable
from proxy.openapi.requests import BadArguments, build_request
from proxy.openapi.results import HttpAnswer, tool_result
from proxy.openapi.security import Placement, place
from proxy.openapi.tools import ToolPlan
from proxy.outbound.over_http import h1
from proxy.outbound.over_http.common import TRANSPORT_ERRORS, Inbox, describe, owned_task_group
from proxy.outbound.over_openapi.source import Loaded, load, modified, refetch
from proxy.outbound.transport import Link, Received
from proxy.protocol import jsonrpc, versions
from proxy.protocol.jsonrpc import Message, RequestId

__all__ = ["PAGE", "WATCH_INTERVAL", "OpenApiTransport"]

logger = logging.getLogger("proxy.outbound.over_openapi")

PAGE: Final = 200  # tools per tools/list page
WATCH_INTERVAL: Final = 2.0  # seconds between looks at a document file


class OpenApiTransport:
    """Opens links to one OpenAPI server."""

    def __init__(
        self,
        server_id: str,
        source: OpenApiSource,
        base_url: str | None,
        headers: Mapping[str, str] | None = None,
        *,
        connect_timeout: float = 30.0,
    ) -> None:
        self.server_id = server_id
        self._source = source
        self._base_url = base_url
        self._headers = dict(headers or {})
        self._connect_timeout = connect_timeout

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Link]:
        loaded = await load(self.server_id, self._source, self._base_url, self._connect_timeout)
        for skipped in loaded.skipped:
            logger.warning(
                "server %s: %s is not served: %s", self.server_id, skipped.operation, skipped.reason
            )
        placement = place(loaded.scheme, self._headers)
        timeout = self._connect_timeout
        client = h1.Client(
            loaded.base_url, placement.headers, server_id=self.server_id, connect_timeout=timeout
        )
        try:
            async with owned_task_group() as tg:
                link = _OpenApiLink(
                    self.server_id, self._source, self._base_url, loaded, client, placement, tg
                )
                if loaded.stamp is not None or self._source.is_url:
                    tg.start_soon(link.watch, self._connect_timeout)
                try:
                    yield link
                finally:
                    link.inbox.shut()
        finally:
            client.close()


class _OpenApiLink:
    def __init__(
        self,
        server_id: str,
        source: OpenApiSource,
        configured_url: str | None,
        loaded: Loaded,
        client: h1.Client,
        placement: Placement,
        tg: anyio.abc.TaskGroup,
    ) -> None:
        self._server_id = server_id
        self._source = source
        self._configured_url = configured_url
        self._client = client
        self._placement = placement
        self._tg = tg
        self._calls: dict[RequestId, anyio.CancelScope] = {}
        self.inbox = Inbox(server_id)
        self._install(loaded)

    def _install(self, loaded: Loaded) -> None:
        self._loaded = loaded
        self._tools = [plan.tool for plan in loaded.tools]
        self._plans: dict[str, ToolPlan] = {plan.tool["name"]: plan for plan in loaded.tools}
        base = yarl.URL(loaded.base_url)
        self._origin = str(base.origin())
        self._base_path = base.raw_path

    async def send(self, message: Message, *, headers: Mapping[str, str] | None = None) -> None:
        method = message.get("method")
        given = message.get("params")
        params: dict[str, Any] = given if isinstance(given, dict) else {}
        if "id" not in message:
            if method == "notifications/cancelled":
                cancelled = params.get("requestId")
                scope = self._calls.get(cancelled) if isinstance(cancelled, int | str) else None
                if scope is not None:
                    scope.cancel()
            return
        if self.inbox.ended:
            raise ServerUnavailable(self._server_id, "link closed")
        request_id: RequestId = message["id"]
        if method == "initialize":
            self.inbox.put(jsonrpc.result_response(request_id, self._introduction(params)))
        elif method == "ping":
            self.inbox.put(jsonrpc.result_response(request_id, {}))
        elif method == "tools/list":
            self.inbox.put(self._page(request_id, params.get("cursor")))
        elif method == "tools/call":
            scope = anyio.CancelScope()
            self._calls[request_id] = scope
            self._tg.start_soon(self._call, request_id, params, scope)
        else:
            said = f"method not found: {str(method)[:100]}"
            self.inbox.put(jsonrpc.error_response(request_id, -32601, said))

    async def receive(self) -> Received:
        return await self.inbox.get()

    def _introduction(self, params: Mapping[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        info = self._loaded.info
        result: dict[str, Any] = {
            "protocolVersion": asked if asked in versions.SUPPORTED else versions.LATEST,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {
                "name": str(info.get("title") or self._server_id)[:200],
                "version": str(info.get("version") or __version__)[:100],
            },
        }
        if isinstance(info.get("description"), str):
            result["instructions"] = info["description"][:4096]
        return result

    def _page(self, request_id: RequestId, cursor: Any) -> Message:
        start = 0
        if cursor is not None:
            if not (isinstance(cursor, str) and cursor.isdigit() and int(cursor) <= len(self._tools)):
                return jsonrpc.error_response(request_id, -32602, "invalid cursor")
            start = int(cursor)
        # A copy, as a transport that decodes bytes hands out: the plan is shared (source.load).
        result: dict[str, Any] = {"tools": orjson.loads(orjson.dumps(self._tools[start : start + PAGE]))}
        if start + PAGE < len(self._tools):
            result["nextCursor"] = str(start + PAGE)
        return jsonrpc.result_response(request_id, result)

    async def _call(self, request_id: RequestId, params: Mapping[str, Any], scope: anyio.CancelScope) -> None:
        try:
            with scope:
                plan = self._plans.get(params.get("name"))  # type: ignore[arg-type]
                if plan is None:
                    name = str(params.get("name"))[:200]
                    self.inbox.put(jsonrpc.error_response(request_id, -32602, f"unknown tool: {name}"))
                    return
                arguments = params.get("arguments") or {}
                result = await self._http(plan, arguments if isinstance(arguments, Mapping) else {})
                self.inbox.put(jsonrpc.result_response(request_id, result))
        except Exception:
            # A bug of ours fails this one call, never the link every other call shares.
            logger.exception("server %s: a call to the API failed unexpectedly", self._server_id)
            self.inbox.put(jsonrpc.error_response(request_id, -32603, "internal error calling the API"))
        finally:
            self._calls.pop(request_id, None)

    async def _http(self, plan: ToolPlan, arguments: Mapping[str, Any]) -> dict[str, Any]:
        try:
            request = build_request(plan.call, arguments, self._base_path)
        except BadArguments as exc:
            return _error(str(exc))
        target, request_headers = request.target, request.headers
        if self._placement.query:
            target += ("&" if "?" in target else "?") + "&".join(self._placement.query)
        if self._placement.cookies:
            cookies = [request_headers["Cookie"]] if "Cookie" in request_headers else []
            request_headers["Cookie"] = "; ".join([*cookies, *self._placement.cookies])
        url = self._origin + target
        limit = self._source.max_response_bytes
        try:
            exchange = self._client.request(request.method, url, body=request.body, headers=request_headers)
            async with exchange as response:
                body = await response.read(limit)
                answer = HttpAnswer(response.status, response.reason, response.content_type, body)
        except TRANSPORT_ERRORS as exc:
            return _error(f"the API could not be called: {describe(exc)}")
        if len(body) > limit:
            return _error(
                f"the API's response is larger than max_response_bytes ({limit} bytes): not returned"
            )
        return tool_result(plan.call, answer, url=url, max_error_bytes=self._source.max_error_bytes)

    async def watch(self, connect_timeout: float) -> None:
        """Plan the tools again whenever the document changes (see the module's docstring)."""
        stamp = self._loaded.stamp
        fetch: Awaitable[Loaded | None]
        while True:
            if self._source.is_url:
                await anyio.sleep(self._source.refresh_interval)
                fetch = refetch(
                    self._server_id, self._source, self._configured_url, connect_timeout, self._loaded.etag
                )
            else:
                await anyio.sleep(WATCH_INTERVAL)
                now = modified(self._source)
                if now is None or now == stamp:
                    continue
                stamp = now
                fetch = load(self._server_id, self._source, self._configured_url, connect_timeout)
            try:
                loaded = await fetch
            except ServerUnavailable as exc:
                logger.warning("server %s: the changed document is not used: %s", self._server_id, exc.reason)
                continue
            if loaded is not None:
                self._adopt(loaded)

    def _adopt(self, loaded: Loaded) -> None:
        if loaded.base_url != self._loaded.base_url:
            said = "the changed document names another base URL; restart to use it"
            logger.warning("server %s: %s", self._server_id, said)
            return
        changed = [p.tool for p in loaded.tools] != self._tools
        self._install(loaded)
        if changed:
            self.inbox.put(jsonrpc.notification("notifications/tools/list_changed"))


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}
