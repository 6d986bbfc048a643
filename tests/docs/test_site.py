"""``make docs``: the site builds, strictly and offline, and the strictness holds.

The build runs MkDocs as ``make docs`` does (``mkdocs build --strict``) into a temporary
directory. Strict means a warning fails the build; ``mkdocs.yml``'s ``validation:`` makes a link
to a missing page or anchor, an absolute link, and a page the nav leaves out warnings. The two
last tests build a copy of ``docs/`` with one such mistake and expect the build to fail, so the
first one cannot pass by accident. The built pages must name nothing to fetch from elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs.reference import DOCS, REPO

pytestmark = pytest.mark.slow

_EXTERNAL_ASSET = re.compile(r"<(?:link|script|img)\b[^>]*\b(?:href|src)=\"(?:https?:)?//", re.IGNORECASE)


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` into ``site``, from the repository root (where the
    included files are found), bounded in time."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site),
        ],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def with_docs(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of ``docs/`` and an ``mkdocs.yml`` that builds it: ``(config, docs)``."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    settings = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    settings["docs_dir"] = str(docs)
    config = tmp_path / "mkdocs.yml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return config, docs


def test_the_site_builds_strictly_and_loads_nothing_from_elsewhere(tmp_path: Path) -> None:
    built = build(REPO / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stderr
    pages = list((tmp_path / "site").rglob("*.html"))
    assert len(pages) >= 20
    external = [str(page) for page in pages if _EXTERNAL_ASSET.search(page.read_text(encoding="utf-8"))]
    assert external == []
    # The included files are pages of the site.
    policy = (tmp_path / "site" / "reference" / "policy" / "index.html").read_text(encoding="utf-8")
    assert "Asking before a call" in policy


def test_a_link_to_a_missing_anchor_fails_the_build(tmp_path: Path) -> None:
    config, docs = with_docs(tmp_path)
    with (docs / "index.md").open("a", encoding="utf-8") as page:
        page.write("\n[gone](reference/config.md#no-such-section)\n")
    built = build(config, tmp_path / "site")
    assert built.returncode != 0
    assert "no-such-section" in built.stderr


def test_a_page_left_out_of_the_nav_fails_the_build(tmp_path: Path) -> None:
    config, docs = with_docs(tmp_path)
    (docs / "reference" / "orphan.md").write_text("# Nobody links here\n", encoding="utf-8")
    built = build(config, tmp_path / "site")
    assert built.returncode != 0
    assert "orphan.md" in built.stderr
