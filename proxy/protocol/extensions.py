"""Which MCP extensions Manifold passes on, in either direction, and which it drops: pure.

2026-07-28 added ``extensions`` to client and server capabilities: a map of extension identifiers
(``io.modelcontextprotocol/ui``, ``com.example/thing``) to settings objects. Manifold sits
between the two sides, so what one side declares reaches the other only if Manifold can keep
the promise in between. The rule, one place for both directions:

* **Known and relayed** (:data:`KNOWN`, ``None``): Manifold understands the extension and does
  what it needs in between (MCP Apps: ``ui://`` resources namespaced, tools' ``_meta.ui``
  rewritten, :mod:`proxy.catalog.apps`).
* **Known and dropped** (:data:`KNOWN`, a reason): passing the declaration on would make a
  promise Manifold breaks. Tasks (``io.modelcontextprotocol/tasks``): a server would hand the
  client its own task ids, which no ``tasks/*`` call through Manifold can use; Manifold declares
  the extension itself where it serves it (:mod:`proxy.tasks.modern`), and to a 2026-07-28
  server on exactly the requests whose task handle it takes for the caller
  (:class:`HoldingTasks`, :mod:`proxy.tasks.modern_servers`).
* **Any other official extension** (``io.modelcontextprotocol/…``): dropped. Official extensions
  change the protocol itself (new methods, result types, ids), which Manifold must route.
* **A third party's** (any other well-formed identifier): relayed. Such extensions ride on
  ``_meta`` keys and result fields, which Manifold passes on intact; a method it does not know
  is answered ``-32601`` (method not found), the error the spec allows for an extension one
  side lacks.

Whatever the kind, an identifier that breaks the ``_meta`` key rules (a prefix is mandatory), a
settings value that is not an object or is over :data:`MAX_SETTINGS_BYTES` encoded, or a
declaration past the first :data:`MAX_EXTENSIONS` is dropped. Servers' declarations are merged
into the one list clients are shown (:func:`merge`): an extension two servers declare with
different settings cannot be shown as one, so it is dropped too. Every drop comes back with its
reason for the caller to log.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

__all__ = [
    "KNOWN",
    "MAX_EXTENSIONS",
    "MAX_SETTINGS_BYTES",
    "OWN",
    "TASKS",
    "UI",
    "MAX_KEPT_BYTES",
    "Dropped",
    "HoldingTasks",
    "kept",
    "merge",
    "relayable",
]

UI: Final = "io.modelcontextprotocol/ui"
TASKS: Final = "io.modelcontextprotocol/tasks"
_OFFICIAL: Final = "io.modelcontextprotocol/"

# Known extensions -> None (relayed: Manifold does what it needs in between) or why dropped.
KNOWN: Final[Mapping[str, str | None]] = {
    UI: None,
    TASKS: "Manifold serves the tasks extension itself, over servers' tasks under its own task ids",
}
# What Manifold declares to servers on a connection it shares between clients: it relays MCP
# Apps to whoever can render them (a client that cannot ignores ``_meta.ui``: text only).
OWN: Final[Mapping[str, Any]] = {UI: {"mimeTypes": ["text/html;profile=mcp-app"]}}

MAX_EXTENSIONS: Final = 8  # per declaration: a client's are kept in its session and its id
MAX_SETTINGS_BYTES: Final = 256
# What a client's session keeps of its declared extensions (signed into its id, which must stay
# well under the 2 KiB a session id may be): the first relayable ones that fit, encoded.
MAX_KEPT_BYTES: Final = 512
_MAX_ID: Final = 128
_LABEL: Final = r"[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_NAME: Final = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_IDENTIFIER: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*/{_NAME}")


@dataclass(frozen=True, slots=True)
class Dropped:
    """One declaration not passed on, and why (for a log line)."""

    extension: str
    reason: str


class HoldingTasks(dict[str, Any]):
    """A caller's capabilities as one request goes out to a 2026-07-28 server on which Manifold
    takes the server's task handle for the caller: the tasks extension is declared to the server
    (Manifold's own declaration, whatever the caller's; :func:`relayable` drops a caller's)."""


def _problem(extension: object, settings: object) -> str | None:
    if not isinstance(extension, str) or len(extension) > _MAX_ID or not _IDENTIFIER.fullmatch(extension):
        return "not an extension identifier (prefix/name, as _meta keys)"
    if (reason := KNOWN.get(extension)) is not None:
        return reason
    if extension.startswith(_OFFICIAL) and extension not in KNOWN:
        return "an official extension Manifold does not know"
    if not isinstance(settings, dict):
        return "its settings are not an object"
    try:
        size = len(orjson.dumps(settings))
    except (TypeError, orjson.JSONEncodeError):
        return "its settings are not JSON"
    if size > MAX_SETTINGS_BYTES:
        return f"its settings are over {MAX_SETTINGS_BYTES} bytes"
    return None


def relayable(declared: object) -> tuple[dict[str, Any], tuple[Dropped, ...]]:
    """What of one side's ``extensions`` capability Manifold passes on, and what it drops.
    Linear in the first :data:`MAX_EXTENSIONS` entries; the rest is not looked at."""
    if not isinstance(declared, dict):
        return {}, (() if declared is None else (Dropped("extensions", "not an object"),))
    kept: dict[str, Any] = {}
    dropped: list[Dropped] = []
    for extension, settings in itertools.islice(declared.items(), MAX_EXTENSIONS):
        problem = _problem(extension, settings)
        if problem is None:
            kept[extension] = settings
        else:
            dropped.append(Dropped(str(extension)[:_MAX_ID], problem))
    if len(declared) > MAX_EXTENSIONS:
        dropped.append(Dropped("extensions", f"more than {MAX_EXTENSIONS} declared; the rest dropped"))
    return kept, tuple(dropped)


def kept(declared: object) -> dict[str, Any]:
    """What a client's session keeps of its ``extensions``: :func:`relayable`, then the first ones
    whose identifiers and settings fit in :data:`MAX_KEPT_BYTES` together (encoded)."""
    room = MAX_KEPT_BYTES
    out: dict[str, Any] = {}
    for extension, settings in relayable(declared)[0].items():
        size = len(extension) + len(orjson.dumps(settings)) + 6  # quotes, colon, comma
        if size > room:
            break
        out[extension], room = settings, room - size
    return out


def merge(
    declarations: Iterable[tuple[str, object]],
) -> tuple[dict[str, Any], tuple[tuple[str, Dropped], ...]]:
    """The ``extensions`` clients are shown for servers' declarations ``(server id, extensions)``
    in config order, and each (server id, drop). An extension declared with different settings
    by two servers is dropped (for the second server, naming the first)."""
    shown: dict[str, Any] = {}
    first: dict[str, str] = {}  # extension -> the first server that declared it
    conflicted: set[str] = set()
    dropped: list[tuple[str, Dropped]] = []
    for server_id, declared in declarations:
        kept, problems = relayable(declared)
        dropped.extend((server_id, d) for d in problems)
        for extension, settings in kept.items():
            if extension not in first:
                first[extension], shown[extension] = server_id, settings
            elif extension not in conflicted and shown[extension] != settings:
                conflicted.add(extension)
                reason = f"declared with other settings than {first[extension]}'s"
                dropped.append((server_id, Dropped(extension, reason)))
    for extension in conflicted:
        del shown[extension]
    return shown, tuple(dropped)
