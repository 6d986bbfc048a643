"""Where a server's credential goes, as the document's ``securitySchemes`` say. Pure.

Credentials reach an OpenAPI server as headers, as they reach any HTTP server (the configured
``headers``, or each identity's own from ``credentials``: a secret rendered into its ``header``,
an OAuth or exchanged token as ``Authorization: Bearer``). The scheme then says where they go:

- ``http`` (bearer, basic), ``oauth2``, ``openIdConnect``: the ``Authorization`` header, as is;
- ``apiKey`` in ``header``: as is (name the credential's header like the scheme's parameter);
- ``apiKey`` in ``query`` or ``cookie``: the header named like the scheme's parameter is taken
  out of the headers and sent as that query parameter or cookie instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from proxy.openapi.schemas import DocumentProblem

__all__ = ["Placement", "place", "scheme_of"]


@dataclass(frozen=True, slots=True)
class Placement:
    headers: dict[str, str]
    query: tuple[str, ...] = ()  # encoded name=value pairs
    cookies: tuple[str, ...] = ()


def scheme_of(document: Mapping[str, Any], name: str | None) -> Mapping[str, Any] | None:
    """The scheme named ``name``, or the document's only one when ``name`` is None.

    Raises:
        DocumentProblem: ``name`` is not among the document's securitySchemes.
    """
    components = document.get("components")
    schemes = components.get("securitySchemes") if isinstance(components, Mapping) else None
    schemes = schemes if isinstance(schemes, Mapping) else {}
    if name is None:
        only = list(schemes.values())
        return only[0] if len(only) == 1 and isinstance(only[0], Mapping) else None
    scheme = schemes.get(name)
    if not isinstance(scheme, Mapping):
        known = ", ".join(map(str, schemes)) or "none"
        raise DocumentProblem(f"security_scheme {name!r} is not in the document's securitySchemes ({known})")
    return scheme


def place(scheme: Mapping[str, Any] | None, headers: Mapping[str, str]) -> Placement:
    """``headers`` with the credential moved where ``scheme`` puts it."""
    if scheme is None or scheme.get("type") != "apiKey" or scheme.get("in") not in ("query", "cookie"):
        return Placement(dict(headers))
    wanted = str(scheme.get("name", "")).lower()
    kept = {k: v for k, v in headers.items() if k.lower() != wanted}
    moved = [v for k, v in headers.items() if k.lower() == wanted]
    if not moved:
        return Placement(kept)
    pair = f"{quote(str(scheme['name']), safe='-._~')}={quote(moved[0], safe='-._~')}"
    if scheme["in"] == "query":
        return Placement(kept, query=(pair,))
    return Placement(kept, cookies=(pair,))
