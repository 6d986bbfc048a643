"""The guardrail docs hold what runs: every complete config in them passes ``manifold check``,
and every policy snippet (a document, a ``guardrails:`` section or a rule) loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.cli.commands import main as manifold
from proxy.policy.loader import parse_policy_text

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "docs" / "guides" / "guardrails.md", REPO / "docs" / "reference" / "guardrails.md"]
_FENCE = re.compile(r'^```yaml( title="manifold\.yaml")?\n(.*?)^```', re.MULTILINE | re.DOTALL)


def blocks(complete: bool) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for index, match in enumerate(_FENCE.finditer(page.read_text(encoding="utf-8"))):
            if bool(match.group(1)) == complete:
                found.append((f"{page.name}#{index + 1}", match.group(2)))
    return found


CONFIGS = blocks(complete=True)
SNIPPETS = blocks(complete=False)


def test_the_docs_have_configs_and_snippets() -> None:
    assert len(CONFIGS) >= 2
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize(("where", "text"), CONFIGS, ids=[where for where, _ in CONFIGS])
def test_a_complete_config_passes_manifold_check(
    where: str, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "policies").symlink_to(REPO / "policies")
    config = tmp_path / "manifold.yaml"
    config.write_text(text, encoding="utf-8")
    for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text):
        monkeypatch.setenv(name, "a-secret-value-of-some-length-0123456789")
    monkeypatch.chdir(tmp_path)
    code = manifold(["check", "--config", str(config)])
    assert code == 0, f"{where}:\n{capsys.readouterr().err}"


@pytest.mark.parametrize(("where", "text"), SNIPPETS, ids=[where for where, _ in SNIPPETS])
def test_a_policy_snippet_loads(where: str, text: str) -> None:
    if text.startswith("version:"):
        document = text
    elif text.startswith("guardrails:"):
        document = "version: 1\n" + text
    else:  # a rule or two, indented as in a rules list
        document = "version: 1\nguardrails:\n  rules:\n" + text
    parse_policy_text(document, where)
