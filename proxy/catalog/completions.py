"""What a resource template's completion values would address, and leaving out what may not be read.

A ``completion/complete`` on a ``ref/resource`` template (``file:///{+path}``) asks a server for
values of one of its variables. Each value names resources: filled into the template, with the
values the client already chose (``context.arguments``), it is a URI the caller could then read.
The policy decides on that URI, as for the resource lists; a value whose URI the policy hides
from the caller (one a read would answer as missing) is left out of the answer, as if the server
had not offered it (and ``total``, when given, counts it no more). A variable nobody gave a
value yet expands to nothing (RFC 6570), so completing ``{dir}`` of ``file:///{dir}/{name}``
decides on ``file:///secret/`` for the value ``secret``.

Pure: the result, the request's parameters and a ``readable(uri)`` predicate in; a result out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from proxy.catalog.uri_templates import expand

__all__ = ["completion_uri", "filter_completion"]

_EMPTY: Final = {"values": [], "hasMore": False}


def _chosen(params: Mapping[str, Any]) -> dict[str, str]:
    context = params.get("context")
    chosen = context.get("arguments") if isinstance(context, Mapping) else None
    if not isinstance(chosen, Mapping):
        return {}
    return {str(name): value for name, value in chosen.items() if isinstance(value, str)}


def completion_uri(template: str, params: Mapping[str, Any], value: str) -> str:
    """The URI ``template`` names when the argument being completed takes ``value``."""
    argument = params.get("argument")
    name = argument.get("name") if isinstance(argument, Mapping) else None
    values = _chosen(params)
    if isinstance(name, str):
        values[name] = value
    return expand(template, values)


def filter_completion(
    result: Any, template: str, params: Mapping[str, Any], readable: Callable[[str], bool]
) -> Any:
    """``result`` (a server's ``CompleteResult``) without the values whose URI is not ``readable``.

    A value that is not a string cannot be judged, and is left out too; so is everything when
    ``completion.values`` is not a list."""
    if not isinstance(result, Mapping):
        return result
    completion = result.get("completion")
    if not isinstance(completion, Mapping):
        return result
    values = completion.get("values")
    if not isinstance(values, list):
        return {**result, "completion": {**completion, **_EMPTY}}
    kept = [v for v in values if isinstance(v, str) and readable(completion_uri(template, params, v))]
    if len(kept) == len(values):
        return result
    filtered: dict[str, Any] = {**completion, "values": kept}
    total = completion.get("total")
    if isinstance(total, int) and not isinstance(total, bool):
        filtered["total"] = max(len(kept), total - (len(values) - len(kept)))
    return {**result, "completion": filtered}
