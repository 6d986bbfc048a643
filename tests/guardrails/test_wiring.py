"""Building the guard from a policy and the config: what ``manifold check`` and every reload
refuse before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config.guardrails import GuardrailSettings, HookSettings
from proxy.config.model import ServerConfig
from proxy.config.policy import PinSettings, PolicySettings
from proxy.core.errors import ConfigError
from proxy.enforce.access import Access, own_secrets

HOOKED = """\
version: 1
guardrails:
  rules:
    - {id: dlp, effect: inspect, hook: dlp, match: {}}
"""


def access(tmp_path: Path, policy: str, guardrails: GuardrailSettings | None = None) -> Access:
    (tmp_path / "p.yaml").write_text(policy)
    settings = PolicySettings(
        files=(str(tmp_path / "p.yaml"),),
        pins=PinSettings(mode="off", path=str(tmp_path / "pins.json")),
        guardrails=guardrails or GuardrailSettings(),
    )
    return Access(settings, {})


def test_a_rule_naming_an_unconfigured_hook_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"guardrail rule 'dlp' names hook 'dlp', which policy\.guardrails\.hooks"
    ):
        access(tmp_path, HOOKED).load()


def test_a_configured_hook_is_built(tmp_path: Path) -> None:
    hooks = {"dlp": HookSettings(url="http://127.0.0.1:9/inspect")}
    loaded = access(tmp_path, HOOKED, GuardrailSettings(hooks=hooks))
    loaded.load()
    assert loaded.guard is not None
    assert set(loaded.guard.hooks) == {"dlp"}


def test_unreadable_mtls_files_are_refused(tmp_path: Path) -> None:
    tls = {"cert": str(tmp_path / "missing.pem"), "key": str(tmp_path / "missing.key")}
    hooks = {"dlp": HookSettings.model_validate({"url": "https://127.0.0.1:9/inspect", "tls": tls})}
    with pytest.raises(ConfigError, match=r"policy.guardrails.hooks.dlp.tls: cannot be used"):
        access(tmp_path, HOOKED, GuardrailSettings(hooks=hooks)).load()


def test_a_bad_reload_keeps_the_guard_in_force(tmp_path: Path) -> None:
    hooks = {"dlp": HookSettings(url="http://127.0.0.1:9/inspect")}
    loaded = access(tmp_path, HOOKED, GuardrailSettings(hooks=hooks))
    loaded.load()
    guard = loaded.guard
    (tmp_path / "p.yaml").write_text(HOOKED.replace("hook: dlp", "hook: nope"))
    assert not loaded.reload()
    assert loaded.guard is guard


def test_own_secrets_are_header_values_and_secret_looking_environment_only() -> None:
    server = ServerConfig.model_validate(
        {
            "id": "gh",
            "command": "x",
            "env": {"GITHUB_TOKEN": "ghp_0123456789abcdef", "NODE_ENV": "production", "API_KEY": "short"},
        }
    )
    remote = ServerConfig.model_validate(
        {"id": "r", "url": "http://127.0.0.1:1/mcp", "headers": {"X-Api": "header-secret-value"}}
    )
    assert own_secrets({"gh": server, "r": remote}) == ("ghp_0123456789abcdef", "header-secret-value")


def test_only_the_detectors_rules_name_are_run() -> None:
    from proxy.guardrails.wiring import needed_detectors
    from proxy.policy.guardrail_loader import Guardrails
    from proxy.policy.guardrails import GuardRule

    def rules(*matches: dict[str, object]) -> Guardrails:
        made = [
            GuardRule.model_validate({"id": f"r{i}", "effect": "deny", "match": m})
            for i, m in enumerate(matches)
        ]
        return Guardrails(tuple(made), patterns={"ticket": "T-[0-9]+"})

    named = needed_detectors(rules({"detectors": ["aws_*"]}, {"detectors": ["custom:*", "inspection_limit"]}))
    assert named == frozenset({"aws_access_key", "aws_secret_key", "custom:ticket"})
    assert needed_detectors(rules({"detectors": ["email"]}, {"servers": ["gh"]})) is None


def test_the_guard_runs_only_the_detectors_its_rules_name(tmp_path: Path) -> None:
    """An e-mail address is not looked for (nor counted) when every rule names secrets only."""
    policy = """\
version: 1
guardrails:
  rules:
    - {id: keys, effect: deny, match: {directions: [tool_results], detectors: ["aws_*"]}}
"""
    loaded = access(tmp_path, policy)
    loaded.load()
    assert loaded.guard is not None
    scanner = loaded.guard.inspector._scanner
    assert scanner.detectors == frozenset({"aws_access_key", "aws_secret_key"})
    found = scanner.scan("mail ann@example.com, key AKIAQ3EGZ5TJ7LMB4XHN")
    assert [f.detector for f in found] == ["aws_access_key"]
