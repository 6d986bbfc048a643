"""Shared vocabulary for the decision tables: identities, subjects and the check itself.

Each ``test_<scenario>.py`` loads one shipped policy file and lists rows: who asks, about what,
and the expected effect and deciding rule ids. A row that fails names the file to fix.
"""

from __future__ import annotations

from pathlib import Path

from proxy.config.policy_files import load_policy
from proxy.policy.annotations import CAUTIOUS, EffectiveAnnotations
from proxy.policy.engine import PolicyEngine, Subject
from proxy.policy.model import ANONYMOUS, Effect, Identity

__all__ = [
    "ANONYMOUS",
    "DESTRUCTIVE",
    "READ_ONLY",
    "WRITES",
    "check",
    "engine_for",
    "log_level",
    "person",
    "prompt",
    "resource",
    "tool",
]

POLICIES = Path(__file__).resolve().parents[2] / "policies"

READ_ONLY = EffectiveAnnotations(
    read_only=True, destructive=False, idempotent=True, open_world=False, source="server"
)
WRITES = EffectiveAnnotations(
    read_only=False, destructive=False, idempotent=False, open_world=True, source="server"
)
DESTRUCTIVE = CAUTIOUS


def engine_for(name: str) -> PolicyEngine:
    """The engine for ``policies/<name>.yaml`` (``default``) or ``policies/examples/<name>.yaml``."""
    path = POLICIES / f"{name}.yaml"
    return PolicyEngine(load_policy(path if path.exists() else POLICIES / "examples" / f"{name}.yaml"))


def person(name: str, *roles: str, source: str = "jwt") -> Identity:
    return Identity(name=name, roles=frozenset(roles), source=source)


def tool(name: str, annotations: EffectiveAnnotations = DESTRUCTIVE) -> Subject:
    """A tool of the server named by the prefix (``github.get_issue`` is on ``github``)."""
    return Subject("tool", name, name.split(".", 1)[0], annotations)


def prompt(name: str) -> Subject:
    return Subject("prompt", name, name.split(".", 1)[0])


def resource(uri: str, server: str) -> Subject:
    return Subject("resource", uri, server)


def log_level(server: str) -> Subject:
    """Changing the level ``server``'s shared connection logs at (``logging/setLevel``)."""
    return Subject.log_level(server)


def check(
    engine: PolicyEngine, identity: Identity, subject: Subject, effect: Effect, rule_ids: tuple[str, ...]
) -> None:
    decision = engine.decide(identity, subject)
    assert (decision.effect, decision.rule_ids) == (effect, rule_ids), decision.reason
