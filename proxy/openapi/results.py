"""An HTTP response as a tool result. Pure.

- 2xx JSON (by content type, and only if it parses): ``structuredContent`` (wrapped as
  ``{"result": …}`` where the operation's success schema is not an object) and the JSON as text.
- 2xx ``text/*``, or a body that is UTF-8 and claims nothing better: text. ``image/*``: an image.
  Anything else: an embedded resource (base64 blob) with its MIME type.
- An operation with an ``outputSchema`` whose success body is not usable JSON (the API lied about
  its content type, or sent something else): an error result saying so, not a result without
  the structured content its schema promises.
- 4xx/5xx: ``isError`` with the status and the start of the API's error body (``max_error_bytes``).
"""

from __future__ import annotations

import base64
import re
from typing import Any, Final

import orjson

from proxy.openapi.tools import CallPlan

__all__ = ["HttpAnswer", "tool_result"]

_JSON: Final = re.compile(r"application/(?:[\w.+-]+\+)?json")
_TEXTUAL: Final = re.compile(r"text/.*|application/(?:xml|[\w.+-]+\+xml|javascript|yaml|x-yaml)")


class HttpAnswer:
    """What came back: status, reason, media type (lower case, no parameters), body."""

    __slots__ = ("body", "media_type", "reason", "status")

    def __init__(self, status: int, reason: str, media_type: str, body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.media_type = media_type
        self.body = body


def _text(answer: HttpAnswer) -> str | None:
    try:
        return answer.body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def tool_result(call: CallPlan, answer: HttpAnswer, *, url: str, max_error_bytes: int) -> dict[str, Any]:
    """The ``tools/call`` result for ``answer`` to a call planned by ``call`` (``url``: the
    request's, for an embedded resource's URI)."""
    status = f"HTTP {answer.status} {answer.reason}".rstrip()
    if answer.status >= 400 or answer.status < 200:
        said = answer.body[:max_error_bytes].decode("utf-8", "replace")
        more = " (cut)" if len(answer.body) > max_error_bytes else ""
        return _error(f"{status} from {call.method} {call.path}: {said}{more}" if said else f"{status}")
    if _JSON.fullmatch(answer.media_type) or (call.has_output and answer.media_type in ("", "text/plain")):
        try:
            value = orjson.loads(answer.body) if answer.body.strip() else None
        except orjson.JSONDecodeError:
            value = orjson  # a sentinel: not JSON
        if value is not orjson:
            text = answer.body.decode("utf-8", "replace")
            if call.has_output:
                structured = {"result": value} if call.wraps_output else value
                if not isinstance(structured, dict):
                    return _error(f"{status}: the API's JSON is not the object its document describes")
                return {"content": [{"type": "text", "text": text}], "structuredContent": structured}
            return {"content": [{"type": "text", "text": text}]}
    if call.has_output:
        return _error(
            f"{status}: the API answered {answer.media_type or 'without a content type'}, not the JSON its "
            "document describes"
        )
    media = answer.media_type or "application/octet-stream"
    if _TEXTUAL.fullmatch(media) or _JSON.fullmatch(media):
        decoded = _text(answer)
        if decoded is not None:
            return {"content": [{"type": "text", "text": decoded}]}
    if media.startswith("image/"):
        data = base64.b64encode(answer.body).decode()
        return {"content": [{"type": "image", "data": data, "mimeType": media}]}
    if not answer.body:
        return {"content": [{"type": "text", "text": status}]}
    blob = base64.b64encode(answer.body).decode()
    resource = {"uri": url, "mimeType": media, "blob": blob}
    return {"content": [{"type": "resource", "resource": resource}]}
