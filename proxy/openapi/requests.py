"""A tool call's arguments as the HTTP request its operation describes. Pure.

Parameters are serialised per OpenAPI's ``style`` and ``explode`` (path: simple, label, matrix;
query: form, spaceDelimited, pipeDelimited, deepObject; header: simple; cookie: form). Every
value is percent-encoded, slashes included, so a path parameter stays one segment: ``../``
becomes ``..%2F``, an encoded slash is encoded again (``%252F``), and a value that is ``.`` or
``..`` (a segment a server would resolve) is refused. The built path is checked to stay under
the base URL's path. Bodies: JSON, form or multipart as the operation declares (a multipart
file field's base64 string is decoded into a file part); any other media type is sent as the
string given.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import orjson

from proxy.openapi.tools import CallPlan, ParamPlan

__all__ = ["BadArguments", "HttpRequest", "build_request"]

_UNRESERVED: Final = "-._~"
_RESERVED: Final = ":/?#[]@!$&'()*+,;="


class BadArguments(ValueError):
    """The arguments cannot be sent as this operation's request; the message says which."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    target: str  # the path and query, under the base URL's path
    headers: dict[str, str]
    body: bytes


def _scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return ""
    if isinstance(value, int | float | str):
        return str(value)
    return orjson.dumps(value).decode()


def _enc(value: Any, *, reserved: bool = False) -> str:
    return quote(_scalar(value), safe=_UNRESERVED + (_RESERVED if reserved else ""))


def _path_value(plan: ParamPlan, value: Any) -> str:
    name = plan.name
    if isinstance(value, list):
        items = [_enc(v) for v in value]
        if plan.style == "label":
            return "." + ("." if plan.explode else ",").join(items)
        if plan.style == "matrix":
            if plan.explode:
                return "".join(f";{name}={v}" for v in items)
            return f";{name}=" + ",".join(items)
        return ",".join(items)
    if isinstance(value, dict):
        pairs = [(_enc(k), _enc(v)) for k, v in value.items()]
        joined = ",".join(f"{k}={v}" if plan.explode else f"{k},{v}" for k, v in pairs)
        if plan.style == "label":
            return "." + joined
        if plan.style == "matrix":
            return "".join(f";{k}={v}" for k, v in pairs) if plan.explode else f";{name}=" + joined
        return joined
    text = _enc(value)
    if plan.style == "label":
        return f".{text}"
    if plan.style == "matrix":
        return f";{name}={text}"
    return text


def _query_pairs(plan: ParamPlan, value: Any) -> list[str]:
    name = _enc(plan.name)

    def enc(value: Any) -> str:
        return _enc(value, reserved=plan.allow_reserved)

    if isinstance(value, list):
        if plan.style == "form" and plan.explode:
            return [f"{name}={enc(v)}" for v in value]
        sep = {"spaceDelimited": "%20", "pipeDelimited": "|"}.get(plan.style, ",")
        return [f"{name}={sep.join(enc(v) for v in value)}"]
    if isinstance(value, dict):
        if plan.style == "deepObject":
            return [f"{name}%5B{_enc(k)}%5D={enc(v)}" for k, v in value.items()]
        if plan.explode:
            return [f"{_enc(k)}={enc(v)}" for k, v in value.items()]
        return [f"{name}=" + ",".join(f"{enc(k)},{enc(v)}" for k, v in value.items())]
    return [f"{name}={enc(value)}"]


def _header_value(plan: ParamPlan, value: Any) -> str:
    if isinstance(value, list):
        text = ",".join(_scalar(v) for v in value)
    elif isinstance(value, dict):
        text = ",".join(f"{k}={v}" if plan.explode else f"{k},{v}" for k, v in value.items())
    else:
        text = _scalar(value)
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in text):
        raise BadArguments(f"argument {plan.argument!r}: a header value may not hold control characters")
    return text


def _form(value: Any) -> bytes:
    if not isinstance(value, Mapping):
        raise BadArguments("argument 'body': a form body must be an object")
    return "&".join(f"{_enc(k)}={_enc(v)}" for k, v in value.items()).encode()


def _file(key: str, item: Any) -> bytes:
    if not isinstance(item, str):
        raise BadArguments(f"argument 'body': file field {key!r} must be a base64 string")
    try:
        return base64.b64decode(item, validate=True)
    except binascii.Error:
        raise BadArguments(f"argument 'body': file field {key!r} is not valid base64") from None


def _multipart(value: Any, files: Mapping[str, str]) -> tuple[bytes, str]:
    """The parts, a file field's as a file (its name as the filename; a list: one part each)."""
    if not isinstance(value, Mapping):
        raise BadArguments("argument 'body': a multipart body must be an object")
    boundary = "manifold-" + secrets.token_hex(12)
    parts: list[bytes] = []
    for key, given in value.items():
        field = str(key).replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")
        media = files.get(str(key))
        items = given if media is not None and isinstance(given, list) else [given]
        for item in items:
            disposition = f'form-data; name="{field}"'
            if media is None:
                data, head = _scalar(item).encode(), ""
            else:
                data = _file(str(key), item)
                disposition += f'; filename="{field}"'
                head = f"Content-Type: {media}\r\n"
            head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n{head}\r\n"
            parts.append(head.encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def _body(call: CallPlan, arguments: Mapping[str, Any], headers: dict[str, str]) -> bytes:
    if call.body is None or "body" not in arguments:
        if call.body is not None and call.body.required:
            raise BadArguments("argument 'body' is required")
        return b""
    value, media = arguments["body"], call.body.media_type
    if media == "application/x-www-form-urlencoded":
        headers["Content-Type"] = media
        return _form(value)
    if media == "multipart/form-data":
        data, headers["Content-Type"] = _multipart(value, dict(call.body.files))
        return data
    headers["Content-Type"] = media
    if media.endswith("json"):
        try:
            return orjson.dumps(value)
        except TypeError as exc:
            raise BadArguments(f"argument 'body' cannot be sent as JSON ({exc})") from None
    return _scalar(value).encode()


def build_request(call: CallPlan, arguments: Mapping[str, Any], base_path: str) -> HttpRequest:
    """The request for ``arguments`` under ``base_path`` (the base URL's path, ``/v1`` or ``""``).

    Raises:
        BadArguments: a required argument is missing, or a value cannot be sent where it goes.
    """
    path = call.path
    query: list[str] = []
    headers: dict[str, str] = {"Accept": "application/json, */*;q=0.5"}
    cookies: list[str] = []
    for plan in call.params:
        if plan.argument not in arguments or arguments[plan.argument] is None:
            if plan.location == "path":
                raise BadArguments(f"argument {plan.argument!r} is required (a path parameter)")
            continue
        value = arguments[plan.argument]
        if plan.location == "path":
            text = _path_value(plan, value)
            if text in ("", ".", ".."):
                raise BadArguments(f"argument {plan.argument!r}: {text!r} is not a path segment")
            path = path.replace("{" + plan.name + "}", text)
        elif plan.location == "query":
            query += _query_pairs(plan, value)
        elif plan.location == "header":
            headers[plan.name] = _header_value(plan, value)
        else:
            cookies.append(f"{_enc(plan.name)}={_enc(value)}")
    if cookies:
        headers["Cookie"] = "; ".join(cookies)
    body = _body(call, arguments, headers)
    base = base_path.rstrip("/")
    target = base + path
    if any(segment in (".", "..") for segment in target.split("/")) or not target.startswith(base + "/"):
        raise BadArguments("the arguments would take the request out of the API's path")
    if query:
        target += "?" + "&".join(query)
    return HttpRequest(call.method, target, headers, body)
