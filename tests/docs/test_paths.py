"""The documentation names only source files that exist (modules move: see issue #26)."""

from __future__ import annotations

import re

from tests.docs.reference import DOCS, REPO

_SOURCE_PATH = re.compile(r"\bproxy/[a-z0-9_/]*(?:\.py|/)")


def test_every_source_path_the_documentation_names_exists() -> None:
    pages = [REPO / "README.md", REPO / "policies" / "README.md", REPO / "deploy" / "README.md"]
    pages += sorted(DOCS.rglob("*.md"))
    missing = [
        f"{page.relative_to(REPO)}: {path}"
        for page in pages
        for path in sorted(set(_SOURCE_PATH.findall(page.read_text(encoding="utf-8"))))
        if not (REPO / path).exists()
    ]
    assert missing == []
