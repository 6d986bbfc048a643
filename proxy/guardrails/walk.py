"""Text inside JSON, inspected as text: every string of a message (object keys too) as a block,
within a byte and depth bound, and edits written back without touching the rest.

:func:`texts` walks a JSON value depth first, in document order, and yields one
:class:`Texts`: the strings (``blocks``), where each one sits (``paths``), and whether the
walk stopped early (``truncated``: the byte bound, the depth bound or :data:`MAX_BLOCKS`
strings was reached; what lies past it was not inspected, and the caller says so). A block
that crosses the byte bound is cut at it: a span found in the cut block is a span in the
original string too.

A content block's ``type`` and ``mimeType`` are the protocol's structure, not text: left out.
Binary payloads are not text either: the ``data`` of image and audio content and the ``blob`` of
resource contents are left out (base64 of a picture is neither a secret nor an instruction),
and counted in :attr:`Texts.skipped_bytes`.

:func:`replace` writes new strings at some paths and returns a new value; everything off those
paths is shared with the old one.

Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

__all__ = ["KEY", "MAX_BLOCKS", "Path", "Texts", "one_text", "replace", "texts"]

KEY: Final = "\x00key"  # a path step meaning "the key itself" (``(KEY, name)``), not its value
MAX_BLOCKS: Final = 65_536  # strings kept per message; past it the walk stops ("count")
Step: TypeAlias = str | int | tuple[str, str]
Path: TypeAlias = tuple[Step, ...]
_BINARY_TYPES: Final = frozenset({"image", "audio"})
# A content block's own structure (its type and media type) is the protocol's, not text a peer
# chose: left out, so that text split over consecutive blocks is scanned as consecutive text.
_CONTENT_TYPES: Final = frozenset({"text", "image", "audio", "resource", "resource_link"})
_STRUCTURE: Final = frozenset({"type", "mimeType"})
_SEQUENCES: Final = (list, tuple)
_MAPPINGS: Final = (dict, Mapping)


@dataclass(slots=True)
class Texts:
    """The strings found in a value, where they are, and whether the walk stopped early."""

    blocks: list[str] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    truncated: bool = False
    why: str = ""  # "bytes", "depth" or "count" when truncated
    size: int = 0  # characters inspected
    cut: str | None = None  # the whole string of the last block, when the bound cut it
    skipped_bytes: int = 0  # binary payloads left out

    def add(self, text: str, path: Path, budget: int) -> bool:
        """Keep ``text`` (cut to what is left of ``budget``); False once the budget is spent."""
        if len(self.blocks) >= MAX_BLOCKS:  # a million one-letter strings: each costs a path
            self._stop("count")
            return False
        left = budget - self.size
        if left <= 0:
            self._stop("bytes")
            return False
        if len(text) > left:
            self.cut = text
            text = text[:left]
            self._stop("bytes")
        self.blocks.append(text)
        self.paths.append(path)
        self.size += len(text)
        return not self.truncated

    def _stop(self, why: str) -> None:
        if not self.truncated:
            self.truncated = True
            self.why = why


def texts(
    value: Any,
    *,
    max_chars: int,
    max_depth: int,
    keys: bool = True,
    content: bool = False,
    base: Path = (),
    into: Texts | None = None,
) -> Texts:
    """Every string in ``value`` (and its object keys when ``keys``), within the bounds.

    ``max_chars`` bounds the characters inspected (a UTF-8 byte bound would need encoding; a
    character is at least a byte, so a character bound is never looser than the configured bytes);
    ``max_depth`` bounds the nesting followed. ``content``: ``value`` holds MCP content (results,
    resource contents, messages), whose binary payloads and block structure are left out; never
    for what a client sends as arguments (an argument named ``blob`` is text like any other).
    ``base`` prefixes every path. ``into``: add to these texts (``max_chars`` then bounds them
    all together) rather than to new ones.
    """
    found = Texts() if into is None else into
    _walk(value, base, 0, found, max_chars, max_depth, keys, content)
    return found


def one_text(value: Any) -> str | None:
    """The text of content that is one text block and nothing else (``[{"type": "text",
    "text": ...}]``: most tool results), else None. What :func:`texts` with ``content`` finds in
    it is that string alone, at ``(0, "text")``, two levels down: found here without the walk."""
    if type(value) is list and len(value) == 1:
        block = value[0]
        if type(block) is dict and len(block) == 2 and block.get("type") == "text":
            text = block.get("text")
            if type(text) is str:
                return text
    return None


def _walk(
    value: Any, path: Path, depth: int, found: Texts, budget: int, max_depth: int, keys: bool, content: bool
) -> bool:
    """Depth first; False once a bound stopped the walk."""
    # Tuples of types, not ``list | tuple``: isinstance with a union object is the slower call,
    # and this runs once per JSON node.
    if isinstance(value, str):
        return found.add(value, path, budget)
    if isinstance(value, _SEQUENCES):  # before Mapping: an ABC's isinstance is the slow one
        if depth >= max_depth:
            found._stop("depth")
            return False
        for index, item in enumerate(value):
            if not _walk(item, (*path, index), depth + 1, found, budget, max_depth, keys, content):
                return False
        return True
    if isinstance(value, _MAPPINGS):  # dict first: the common case, a plain type check
        if depth >= max_depth:
            found._stop("depth")
            return False
        kind = value.get("type") if content else None
        block = isinstance(kind, str) and kind in _CONTENT_TYPES
        binary = kind in _BINARY_TYPES
        for key, item in value.items():
            if (binary and key == "data") or (content and key == "blob" and "uri" in value):
                found.skipped_bytes += len(item) if isinstance(item, str) else 0
                continue
            if block and key in _STRUCTURE and isinstance(item, str):
                continue
            if keys and isinstance(key, str) and not found.add(key, (*path, (KEY, key)), budget):
                return False
            if not _walk(item, (*path, key), depth + 1, found, budget, max_depth, keys, content):
                return False
    return True


def replace(value: Any, edits: Mapping[Path, str]) -> Any:
    """``value`` with the string at each path of ``edits`` replaced (a key path renames the key).

    Paths must come from :func:`texts` on this very value.
    """
    if not edits:
        return value
    if () in edits:
        return edits[()]
    tree: dict[Any, Any] = {}
    for path, text in edits.items():
        node = tree
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = _Leaf(text)
    return _apply(value, tree)


@dataclass(frozen=True, slots=True)
class _Leaf:
    text: str


def _apply(value: Any, tree: Mapping[Any, Any]) -> Any:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = tree.get(key)
            if isinstance(sub, _Leaf):
                item = sub.text
            elif sub is not None:
                item = _apply(item, sub)
            renamed = tree.get((KEY, key))
            out[renamed.text if isinstance(renamed, _Leaf) else key] = item
        return out
    if isinstance(value, list | tuple):
        items = list(value)
        for index, sub in tree.items():
            if isinstance(index, int) and 0 <= index < len(items):
                items[index] = sub.text if isinstance(sub, _Leaf) else _apply(items[index], sub)
        return items
    return value
