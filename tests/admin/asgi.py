"""Drive an ASGI app in memory: one request in, status, headers and body out."""

from __future__ import annotations

from typing import Any

import orjson


async def request(
    app: Any,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes | dict[str, Any] | None = None,
    query: str = "",
    client: str = "127.0.0.1",
) -> tuple[int, dict[str, str], bytes]:
    raw = body if isinstance(body, bytes) else b"" if body is None else orjson.dumps(body)
    sent = [
        (b"host", b"127.0.0.1:8080"),
        *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items()),
    ]
    if raw:
        sent.append((b"content-type", b"application/json"))
        sent.append((b"content-length", str(len(raw)).encode()))
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": sent,
        "client": (client, 50000),
        "server": ("127.0.0.1", 8080),
        "scheme": "http",
        "root_path": "",
        "http_version": "1.1",
    }
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:
            return {"type": "http.disconnect"}
        given = True
        return {"type": "http.request", "body": raw, "more_body": False}

    out: dict[str, Any] = {"body": b""}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            out["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return out["status"], out["headers"], out["body"]
