"""One spelling per resource: RFC 3986 syntax-based normalization of the URIs clients name.

The policy's resource globs match text, and servers read resources, not text: a server that
resolves ``..``, decodes ``%73`` or ignores the case of a scheme reads ``file:///secret`` for
``FILE:///allowed/../%73ecret``, which a deny glob ``file:///secret*`` does not match. So every
URI a client names is normalized before anything routes it, decides on it or keeps it, and the
normalized URI is what goes to the server: the server reads what the policy decided on.

What :func:`normalize_uri` does (RFC 3986 §6.2.2, and RFC 8089 for ``file``):

* the scheme and the host are lower-cased;
* a percent-encoded unreserved character (``ALPHA DIGIT - . _ ~``) is decoded, and the hex of
  every other escape is upper-cased (``%2f`` → ``%2F``);
* dot segments are removed from the path (§5.2.4), after decoding, so ``%2e%2e`` is ``..``;
* ``file://localhost/`` becomes ``file:///``, ``file:/p`` becomes ``file:///p``, and runs of
  ``/`` in a ``file`` path become one before dot segments go (as the file system reads them);
* the empty path of an ``http(s)``/``ws(s)`` URI with a host becomes ``/``, and the scheme's
  default port (or an empty one) is dropped.

What it refuses (:class:`~proxy.core.errors.InvalidParams`, naming the problem), for every caller
alike, because no normalization can say what a server makes of it:

* a ``%`` not followed by two hex digits;
* control characters (C0 and DEL) anywhere;
* in the path: an encoded ``/`` (``%2F``), an encoded or bare ``\\`` (``%5C``) or an encoded NUL
  (``%00``): a server that decodes them walks directories the policy never saw (``%2F..%2F``);
  and those or ``.`` encoded twice (``%252F``, ``%252e``), for servers that decode twice;
* a path without a host that would begin with ``//`` (it would read back as a host).

The query and the fragment are normalized (escapes) but not interpreted. Characters outside
ASCII are kept as they are (an IRI's raw ``é`` and its escape ``%C3%A9`` stay two spellings).
Linear in the URI's length; pure.
"""

from __future__ import annotations

import re
from typing import Final

from proxy.core.errors import InvalidParams

__all__ = ["normalize_uri", "remove_dot_segments"]

_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_ESCAPE: Final = re.compile(r"%([0-9A-Fa-f]{2})")
_BAD_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_SLASHES: Final = re.compile(r"/{2,}")
_DEFAULT_PORTS: Final = {"http": "80", "https": "443", "ws": "80", "wss": "443"}
# Escapes a path may not hold, with what they are (already upper-cased when checked).
_REFUSED_IN_PATH: Final = {
    "%2F": "an encoded '/' (%2F)",
    "%5C": "an encoded '\\' (%5C)",
    "%00": "an encoded NUL (%00)",
}
# A server that decodes twice reads these as '/', '\', NUL or '.' (so '..'): refused as well.
_DOUBLE_ESCAPE: Final = re.compile(r"%25(?:2[Ff]|5[Cc]|00|2[Ee])")


def _escape(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()


def _escapes(part: str) -> str:
    return _ESCAPE.sub(_escape, part) if "%" in part else part


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4: ``/a/b/../c/./d`` → ``/a/c/d``; a ``..`` above the root stays at the root."""
    if "." not in path:
        return path
    segments = path.split("/")
    absolute = path.startswith("/")
    if absolute:
        segments = segments[1:]
    out: list[str] = []
    for segment in segments:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    # A final "." or ".." leaves the path ending in "/" (the segment it named is a directory).
    if segments and segments[-1] in (".", ".."):
        out.append("")
    joined = "/".join(out)
    return "/" + joined if absolute else joined


def _split(uri: str) -> tuple[str | None, str | None, str, str | None, str | None]:
    """RFC 3986 Appendix B: scheme, authority, path, query, fragment (``None`` when absent)."""
    rest, hash_sign, fragment = uri.partition("#")
    rest, question, query = rest.partition("?")
    scheme: str | None = None
    colon = rest.find(":")
    if colon > 0 and "/" not in rest[:colon] and _SCHEME.fullmatch(rest[:colon]):
        scheme, rest = rest[:colon], rest[colon + 1 :]
    authority: str | None = None
    if rest.startswith("//"):
        end = rest.find("/", 2)
        end = len(rest) if end == -1 else end
        authority, rest = rest[2:end], rest[end:]
    return scheme, authority, rest, query if question else None, fragment if hash_sign else None


def _authority(scheme: str, authority: str) -> str:
    userinfo, at, hostport = authority.rpartition("@")
    host, port = hostport, None
    if hostport.startswith("["):  # an IP literal: its colons are not the port's
        close = hostport.find("]")
        if close != -1 and hostport[close + 1 : close + 2] == ":":
            host, port = hostport[: close + 1], hostport[close + 2 :]
    elif ":" in hostport:
        host, _, port = hostport.rpartition(":")
    # Decoded, lower-cased, and the escapes left (not unreserved) upper-cased again.
    host = _escapes(_escapes(host).lower())
    if port is not None and (port == "" or port == _DEFAULT_PORTS.get(scheme)):
        port = None
    userinfo = _escapes(userinfo)
    if scheme == "file" and host == "localhost" and not at and port is None:
        host = ""
    return f"{userinfo}{at}{host}" + ("" if port is None else f":{port}")


def normalize_uri(uri: str) -> str:
    """The normal form of ``uri`` (see the module docstring): equal URIs, equal strings.

    Raises:
        InvalidParams: the URI holds a malformed escape, a control character, or, in its path,
            an encoded ``/``, ``\\`` or NUL, a bare ``\\``, or (without a host) a leading ``//``.
    """
    if (bad := _CONTROL.search(uri)) is not None:
        raise InvalidParams(
            f"a URI may not hold control characters (U+{ord(bad.group()):04X} at {bad.start()})"
        )
    if (bad := _BAD_ESCAPE.search(uri)) is not None:
        raise InvalidParams(
            f"invalid percent-encoding in URI at {bad.start()}: '%' must be followed by two hex digits"
        )
    scheme, authority, path, query, fragment = _split(uri)
    if scheme is not None:
        scheme = scheme.lower()
    path = _escapes(path)
    for escape, what in _REFUSED_IN_PATH.items():
        if escape in path:
            raise InvalidParams(
                f"a resource URI's path may not hold {what}: servers would decode it past the policy"
            )
    if (double := _DOUBLE_ESCAPE.search(path)) is not None:
        raise InvalidParams(
            f"a resource URI's path may not hold a double-encoded {double.group()!r}: "
            "servers that decode twice would read it past the policy"
        )
    if "\\" in path:
        raise InvalidParams(
            "a resource URI's path may not hold '\\': servers may read it as '/' past the policy"
        )
    if scheme == "file":
        # Before dot segments: the file system reads /a//../b as /a/../b, which is /b.
        path = _SLASHES.sub("/", path)
    path = remove_dot_segments(path)
    if scheme == "file" and authority is None and path.startswith("/"):
        authority = ""  # file:/p is file:///p (RFC 8089)
    if authority is not None:
        authority = _authority(scheme or "", authority)
        if path == "" and scheme in _DEFAULT_PORTS:
            path = "/"
    elif path.startswith("//"):
        raise InvalidParams(
            "a URI without a host may not have a path that begins with '//' (after '..' is resolved)"
        )
    out = [] if scheme is None else [scheme, ":"]
    if authority is not None:
        out += ["//", authority]
    out.append(path)
    if query is not None:
        out += ["?", _escapes(query)]
    if fragment is not None:
        out += ["#", _escapes(fragment)]
    return "".join(out)
