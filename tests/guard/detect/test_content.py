from __future__ import annotations

import base64
import random

from proxy.guard.detect.content import binary_kind, text_mime
from tests.guard.detect.helpers import detectors

RANDOM = random.Random(7)


def test_binary_kind_names_magic_numbers_and_mostly_non_text_bytes() -> None:
    assert binary_kind(b"\x89PNG\r\n\x1a\n....") == "image/png"
    assert binary_kind(b"\x7fELF\x02\x01") == "application/x-elf"
    assert binary_kind(bytes(range(256)) * 2) == "application/octet-stream"
    assert binary_kind("plain text, ünïcode too".encode()) is None


def test_text_mime_knows_text_types_and_suffixes() -> None:
    assert text_mime("text/plain; charset=utf-8")
    assert text_mime("application/vnd.api+json")
    assert not text_mime("image/png")
    assert not text_mime("application/octet-stream")


def test_binary_payloads_in_text_are_binary_content() -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + RANDOM.randbytes(600)).decode()
    assert "binary_content" in detectors(f"data:image/png;base64,{png}", kind="result")
    assert "binary_content" in detectors(f"file: {png}", kind="result")
    assert "binary_content" in detectors("raw \x00\x01\x02\x00 bytes", kind="result")


def test_base64_text_and_terminal_colours_are_not() -> None:
    text = base64.b64encode(b"hello world " * 40).decode()
    assert "binary_content" not in detectors(f"data:text/plain;base64,{text}")
    assert "binary_content" not in detectors(f"config: {text}")
    assert "binary_content" not in detectors("\x1b[31mred\x1b[0m\ttabbed\r\n")
