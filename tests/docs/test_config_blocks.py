"""Every complete config in the documentation passes ``manifold check``.

A complete config is a fenced block titled ``manifold.yaml`` (```` ```yaml title="manifold.yaml" ````),
in README.md or any page under ``docs/``. Each is written to a directory of its own beside links
to the repository's ``policies/`` and ``examples/`` (which configs name relative to themselves),
and checked by ``manifold check`` run in-process, with every variable it needs (``${VAR}``,
``env:VAR``) set to a value good for any secret: 32 bytes in urlsafe base64.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from tests.docs.reference import DOCS, REPO
from tests.docs.reference import manifold_main as manifold

_FENCE = re.compile(r'^```ya?ml title="manifold\.yaml"\n(.*?)^```', re.MULTILINE | re.DOTALL)
# A variable with a default (``${VAR:-default}``) is left unset: the default is what is shown.
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\benv:([A-Za-z_][A-Za-z0-9_]*)")
_SECRET = base64.urlsafe_b64encode(bytes(range(32))).decode()


def complete_configs() -> list[tuple[str, str]]:
    """``(where, text)`` of every complete config in the documentation."""
    pages = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
    found: list[tuple[str, str]] = []
    for page in pages:
        for index, match in enumerate(_FENCE.finditer(page.read_text(encoding="utf-8"))):
            found.append((f"{page.relative_to(REPO)}#{index + 1}", match.group(1)))
    return found


CONFIGS = complete_configs()


def test_the_documentation_has_complete_configs_to_check() -> None:
    assert len(CONFIGS) >= 10
    assert any(where.startswith("docs/reference/config.md") for where, _ in CONFIGS)


@pytest.mark.parametrize(("where", "text"), CONFIGS, ids=[where for where, _ in CONFIGS])
def test_a_complete_config_in_the_docs_passes_manifold_check(
    where: str, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("policies", "examples"):
        (tmp_path / name).symlink_to(REPO / name)
    config = tmp_path / "manifold.yaml"
    config.write_text(text, encoding="utf-8")
    for braces, env in _VARIABLE.findall(text):
        monkeypatch.setenv(braces or env, _SECRET)
    code = manifold(["check", "--config", str(config)])
    printed = capsys.readouterr()
    assert code == 0, f"{where}:\n{printed.err}"
    assert ": OK (" in printed.out


def test_a_broken_config_in_a_fence_would_be_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "manifold.yaml"
    config.write_text("servers:\n  broken: {command: x, url: 'http://127.0.0.1:1/mcp'}\n", encoding="utf-8")
    assert manifold(["check", "--config", str(config)]) == 2
    assert "exactly one of 'command'" in capsys.readouterr().err
