"""Matching URIs against RFC 6570 URI templates in time linear in the URI, whatever either holds.

Routing a ``resources/read`` by template runs before policy, for any identity, on any URI a
client sends. A backtracking regex for a template with two adjacent expressions
(``s3://{+bucket}/{+key}``, ``x://{a}{b}``) costs O(n²) or worse: 4 MiB of URI froze the event
loop. This matcher accepts exactly the URIs the old regexes accepted (a test compares the two),
but never backtracks.

How: a template is a chain of steps (one literal byte, or a run of bytes outside a stop set, or
an optional group of steps). The set of positions in the URI that the steps so far can reach is
held as a Python ``int`` used as a bit set (bit *p* = "after *p* bytes"), and each step updates
the whole set at once with a few big-integer operations, which run in C over machine words:

* a literal byte ``c``: ``reach = (reach & at[c]) << 1``;
* a run over the bytes in ``m``: ``reach |= ((reach & m) + m) ^ m`` (the carry of the addition
  walks forward through every position of ``m`` after a reachable one and stops just past it).

The cost is a few passes over the URI per step of the template, plus building one mask (one
``translate`` and one ``int`` parse, about 10 ms per 4 MiB) per distinct byte set the templates
need and the URI contains; masks are shared by every template tried for one URI. Matching is on
the URI's UTF-8 bytes: every operator's stop set is ASCII and the bytes of a multi-byte
character are never ASCII, so this matches what the regexes matched on characters.

What each operator may match is what the regexes allowed (simple strings stop at ``/ ? #``,
``+`` only at ``?``; see :func:`_expression`); level-3 lists (``{a,b}``) match like one name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = ["CompiledTemplate", "UriSubject", "compile_template", "expand"]

# RFC 6570 expressions; an unclosed "{" is literal text.
_EXPRESSION: Final = re.compile(r"\{([+#./;?&]?)([^}]*)\}")
_ENCODING: Final = "utf-8"
_ERRORS: Final = "surrogatepass"  # a JSON string may hold a lone surrogate: keep it, as a str would


class _Kind(Enum):
    BYTE = "byte"  # one byte from ``chars``
    RUN = "run"  # any number of bytes not in ``chars``
    OPTIONAL = "optional"  # ``inner`` once, or nothing


@dataclass(frozen=True, slots=True)
class _Step:
    kind: _Kind
    chars: frozenset[int] = frozenset()
    inner: tuple[_Step, ...] = ()


def _byte(chars: str) -> _Step:
    return _Step(_Kind.BYTE, frozenset(chars.encode()))


def _run(stops: str) -> _Step:
    return _Step(_Kind.RUN, frozenset(stops.encode()))


_SIMPLE_STOPS: Final = "/?#"


def _expression(operator: str) -> tuple[_Step, ...]:
    """The steps one expression is, mirroring the regexes routing used before."""
    if operator == "":
        return (_run(_SIMPLE_STOPS),)  # [^/?#]*
    if operator == "+":
        return (_run("?"),)  # [^?]*
    if operator == "#":
        return (_byte("#"), _run("\n"))  # #.*   (the regex's "." stopped at a newline)
    if operator in ("?", "&"):
        return (_Step(_Kind.OPTIONAL, inner=(_byte("?&"), _run("#"))),)  # (?:[?&][^#]*)?
    if operator == "/":
        # (?:/[^/?#]*)* is the same language as (?:/[^?#]*)?: cut before every "/".
        return (_Step(_Kind.OPTIONAL, inner=(_byte("/"), _run("?#"))),)
    return (_byte(operator), _run(_SIMPLE_STOPS))  # "." and ";": the operator, then [^/?#]*


@dataclass(frozen=True, slots=True)
class CompiledTemplate:
    """A template ready to match: the literal text before its first expression and after its
    last is compared directly; the steps in between are run over the bit set."""

    template: str
    prefix: bytes
    suffix: bytes
    steps: tuple[_Step, ...]

    def matches(self, subject: UriSubject) -> bool:
        """Whether the template can expand to the whole URI."""
        data = subject.data
        if len(data) < len(self.prefix) + len(self.suffix):
            return False
        if not (data.startswith(self.prefix) and data.endswith(self.suffix)):
            return False
        end = len(data) - len(self.suffix)
        if not self.steps:
            return end == len(self.prefix)
        # Every step only moves positions forward, so bytes past ``end`` (the suffix) cannot
        # change whether ``end`` is reached: the masks may cover the whole URI.
        reach = _advance(self.steps, 1 << len(self.prefix), subject)
        return (reach >> end) & 1 == 1


def compile_template(template: str) -> CompiledTemplate:
    """Compile ``template`` once (when the catalog changes), to match many URIs."""
    literals: list[bytes] = []  # the text around the expressions: one more than there are
    expressions: list[tuple[_Step, ...]] = []
    position = 0
    for match in _EXPRESSION.finditer(template):
        literals.append(template[position : match.start()].encode(_ENCODING, _ERRORS))
        expressions.append(_expression(match.group(1)))
        position = match.end()
    literals.append(template[position:].encode(_ENCODING, _ERRORS))
    if not expressions:
        return CompiledTemplate(template, literals[0], b"", ())
    steps: list[_Step] = list(expressions[0])
    for literal, expression in zip(literals[1:-1], expressions[1:], strict=True):
        steps.extend(_Step(_Kind.BYTE, frozenset((b,))) for b in literal)
        steps.extend(expression)
    return CompiledTemplate(template, literals[0], literals[-1], tuple(steps))


class UriSubject:
    """One URI about to be tried against templates: its bytes, and the masks built so far.

    ``mask(chars)`` has bit *p* set where byte *p* is in ``chars``. Built lazily and kept, so
    ten templates that all need the positions of "/" build that mask once.
    """

    def __init__(self, uri: str) -> None:
        self.data = uri.encode(_ENCODING, _ERRORS)
        self.everything = (1 << len(self.data)) - 1
        self._reversed: bytes | None = None
        self._masks: dict[frozenset[int], int] = {}
        self.masks_built = 0
        """Masks built (each is one pass over the URI): the measure of this subject's cost."""

    def mask(self, chars: frozenset[int]) -> int:
        mask = self._masks.get(chars)
        if mask is None:
            mask = self._build(chars)
            self._masks[chars] = mask
        return mask

    def _build(self, chars: Iterable[int]) -> int:
        present = [c for c in chars if self.data.find(c) != -1]
        if not present:
            return 0  # cheap, and common: most URIs hold no "?" or "#"
        self.masks_built += 1
        if self._reversed is None:
            self._reversed = self.data[::-1]  # int(…, 2) reads the most significant bit first
        table = bytearray(b"0" * 256)
        for c in present:
            table[c] = ord("1")
        # Base 2 is parsed in linear time, and int()'s digit limit does not apply to it.
        return int(self._reversed.translate(table), 2)


def _advance(steps: tuple[_Step, ...], reach: int, subject: UriSubject) -> int:
    for step in steps:
        if not reach:
            return 0
        if step.kind is _Kind.BYTE:
            reach = (reach & subject.mask(step.chars)) << 1
        elif step.kind is _Kind.RUN:
            allowed = subject.everything ^ subject.mask(step.chars)
            reach |= ((reach & allowed) + allowed) ^ allowed
        else:
            reach |= _advance(step.inner, reach, subject)
    return reach


# ---- expanding (RFC 6570 §3.2, string values): what a completion's values would address ----

_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_RESERVED: Final = frozenset(":/?#[]@!$&'()*+,;=")
_PCT: Final = re.compile(r"%[0-9A-Fa-f]{2}")
# operator -> (first, separator, named, if empty, reserved characters allowed): RFC 6570 appendix A.
_OPERATORS: Final[dict[str, tuple[str, str, bool, str, bool]]] = {
    "": ("", ",", False, "", False),
    "+": ("", ",", False, "", True),
    ".": (".", ".", False, "", False),
    "/": ("/", "/", False, "", False),
    ";": (";", ";", True, "", False),
    "?": ("?", "&", True, "=", False),
    "&": ("&", "&", True, "=", False),
    "#": ("#", ",", False, "", True),
}
_VARSPEC: Final = re.compile(r"([^:*]*)(?::([0-9]{1,4})|(\*))?")


def _encode(value: str, reserved: bool) -> str:
    allowed = _UNRESERVED | _RESERVED if reserved else _UNRESERVED
    out: list[str] = []
    position = 0
    while position < len(value):
        if reserved and _PCT.match(value, position):  # a triplet already encoded stays one
            out.append(value[position : position + 3])
            position += 3
            continue
        char = value[position]
        position += 1
        if char in allowed:
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode(_ENCODING, _ERRORS))
    return "".join(out)


def expand(template: str, values: Mapping[str, str]) -> str:
    """``template`` with ``values`` filled in; a variable without a value expands to nothing.

    String values only (what completions carry); an explode modifier is ignored, a prefix
    modifier (``{name:3}``) applies. Linear in the template and the values."""

    def one(match: re.Match[str]) -> str:
        first, separator, named, if_empty, reserved = _OPERATORS[match.group(1)]
        parts: list[str] = []
        for varspec in match.group(2).split(","):
            spec = _VARSPEC.fullmatch(varspec)
            name = spec.group(1) if spec is not None else varspec
            value = values.get(name)
            if value is None:
                continue
            if spec is not None and spec.group(2) is not None:
                value = value[: int(spec.group(2))]
            encoded = _encode(value, reserved)
            if named:
                parts.append(f"{name}={encoded}" if encoded else name + if_empty)
            else:
                parts.append(encoded)
        return first + separator.join(parts) if parts else ""

    return _EXPRESSION.sub(one, template)
