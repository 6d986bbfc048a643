"""What the site build cannot see: the README (read on GitHub and PyPI, outside ``docs/``) stays
one or two screens and links only to files that exist, and no page names a source file that is
gone (modules move: see issue #26)."""

from __future__ import annotations

import re

from tests.docs.reference import DOCS, REPO

_SOURCE_PATH = re.compile(r"\bproxy/[a-z0-9_/]*(?:\.py|/)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_README_LINES_AT_MOST = 120


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


def test_the_readmes_relative_links_reach_files() -> None:
    broken: list[str] = []
    for readme in (REPO / "README.md", REPO / "policies" / "README.md", REPO / "deploy" / "README.md"):
        for target in _LINK.findall(readme.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the page itself
            if not (readme.parent / target.split("#")[0]).exists():
                broken.append(f"{readme.relative_to(REPO)}: {target}")
    assert broken == []


def test_the_readme_stays_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= _README_LINES_AT_MOST, "move details into docs/ and link them from the README's map"


def test_the_quick_start_shows_the_readmes_client_snippet() -> None:
    """The README's snippet is run against a real ``manifold serve`` (tests/interaction/
    test_user_files.py); the quick start shows the same one, so it is run too."""

    def snippets(text: str) -> list[str]:
        return re.findall(r"```python\n(.*?)```", text, re.DOTALL)

    readme = snippets((REPO / "README.md").read_text(encoding="utf-8"))
    quick_start = snippets((DOCS / "guides" / "quick-start.md").read_text(encoding="utf-8"))
    assert len(readme) == 1
    assert quick_start == readme
