"""Binary content: what a text field or a content block carries that is not text.

Three signals, for the scanner: a ``data:`` URI with a base64 payload of a non-text type, a long
base64 run that decodes to binary (a file's magic number, or mostly non-text bytes), and control
characters that no text contains (NUL and friends; tab, newlines and ANSI escape are text). And
two helpers for the enforcement side, which sees MIME types on image/audio/resource blocks:
:func:`binary_kind` names a file type from its first bytes, :func:`text_mime` says whether a MIME
type is text.
"""

from __future__ import annotations

import base64
import binascii
import string
from typing import Final

from proxy.guard.detect.engine import ALL_KINDS, Rule

__all__ = ["RULES", "binary_kind", "decoded_head", "text_mime"]

_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"RIFF", "application/riff"),
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
    (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed"),
    (b"\x7fELF", "application/x-elf"),
    (b"MZ", "application/x-msdownload"),
    (b"\xca\xfe\xba\xbe", "application/java-vm"),
    (b"\xcf\xfa\xed\xfe", "application/x-mach-binary"),
    (b"\x00asm", "application/wasm"),
    (b"BZh", "application/x-bzip2"),
    (b"\xfd7zXZ\x00", "application/x-xz"),
    (b"OggS", "audio/ogg"),
    (b"ID3", "audio/mpeg"),
    (b"fLaC", "audio/flac"),
)
_TEXT_BYTES: Final = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D, 0x1B}
_TEXT_TYPES: Final = (
    "text/",
    "application/json",
    "application/xml",
    "application/javascript",
    "application/x-yaml",
    "application/yaml",
    "application/toml",
    "image/svg+xml",
)


def binary_kind(data: bytes) -> str | None:
    """A MIME type for ``data`` when its first bytes are a known binary format's magic number,
    ``application/octet-stream`` when a quarter or more of its first 512 bytes are not text
    (UTF-8 multibyte sequences count as text), else ``None``."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    head = data[:512]
    if not head:
        return None
    try:
        head.decode("utf-8")
        return None if b"\x00" not in head else "application/octet-stream"
    except UnicodeDecodeError as error:
        if error.start >= len(head) - 3:  # a multibyte sequence cut by the 512-byte window
            return None
    odd = sum(b not in _TEXT_BYTES for b in head)
    return "application/octet-stream" if odd * 4 >= len(head) else None


def text_mime(mime_type: str) -> bool:
    """Whether ``mime_type`` (parameters allowed) names text: ``text/*``, JSON, XML, YAML,
    JavaScript, SVG and the ``+json``/``+xml`` suffixes."""
    base = mime_type.split(";", 1)[0].strip().lower()
    return base.startswith(_TEXT_TYPES) or base.endswith(("+json", "+xml"))


def decoded_head(b64: str, size: int = 768) -> bytes | None:
    """The first bytes of a base64 (or base64url) string, or ``None`` when it is not base64."""
    chunk = b64[: size // 3 * 4]
    chunk = chunk.replace("-", "+").replace("_", "/")
    chunk += "=" * (-len(chunk) % 4)
    try:
        return base64.b64decode(chunk, validate=True)
    except (binascii.Error, ValueError):
        return None


def _data_uri(text: str, start: int, end: int) -> bool:
    header, _, payload = text[start:end].partition(",")
    mime = header[5:].split(";", 1)[0]
    if mime and text_mime(mime):
        return False
    head = decoded_head(payload)
    return head is not None and (binary_kind(head) is not None or bool(mime))


def _blob(text: str, start: int, end: int) -> bool:
    head = decoded_head(text[start:end])
    return head is not None and binary_kind(head) is not None


RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "binary_content",
        "content",
        r"(?i)(data:(?:[a-z]+/[a-z0-9.+-]+)?(?:;[a-z0-9-]+=[^;,\s]+)*;base64,[A-Za-z0-9+/]{64,}={0,2})",
        1,
        _data_uri,
        ALL_KINDS,
        needs=r"(?i);base64,",
    ),
    Rule(
        "binary_content",
        "content",
        r"([A-Za-z0-9+/]{256,}={0,2})(?:[^A-Za-z0-9+/=]|$)",
        1,
        _blob,
        ALL_KINDS,
        not_after=string.ascii_letters + string.digits + "+/:,",
        needs_run=(string.ascii_letters + string.digits + "+/", 256),
    ),
    Rule(
        "binary_content",
        "content",
        r"([\x00-\x08\x0e-\x1a\x1c-\x1f\x7f](?:[^\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]{0,16}"
        r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]){2,})",
        1,
        None,
        ALL_KINDS,
        needs=r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f][^\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]{0,16}[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]",
    ),
)
