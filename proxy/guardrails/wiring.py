"""Building the run-time :class:`~proxy.guardrails.guard.Guard` from a policy's guardrails and
the config's ``policy.guardrails`` settings (what ``manifold check`` and every reload run)."""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable

from proxy.config.guardrails import GuardrailSettings
from proxy.core.errors import ConfigError
from proxy.guard.detect import Scanner, ScannerSettings
from proxy.guardrails.guard import Guard
from proxy.guardrails.hooks import Hook
from proxy.guardrails.inspector import Inspector
from proxy.policy.guardrail_engine import GuardEngine
from proxy.policy.guardrail_loader import Guardrails

__all__ = ["build_guard", "needed_detectors"]


def needed_detectors(guardrails: Guardrails) -> frozenset[str] | None:
    """The detectors some rule can act on, or None for every one: a rule (or an unless) naming no
    detectors acts on any finding, and an ``inspect`` rule sends every finding to its hook. The
    rest are not run: each detector costs a pass over every message."""
    every = Scanner.DETECTORS | guardrails.custom
    names: set[str] = set()
    for rule in guardrails.rules:
        if rule.match.detectors is None:
            return None
        names.update(n for n in every if any(fnmatch.fnmatchcase(n, g) for g in rule.match.detectors))
    return frozenset(names)


def build_guard(
    guardrails: Guardrails, settings: GuardrailSettings, *, own_secrets: Iterable[str] = ()
) -> Guard:
    """The guard for ``guardrails`` (metrics and audit are attached by the caller).

    Raises:
        ConfigError: a rule names a hook the config does not configure, a custom pattern is not
            RE2, or a hook's mTLS files cannot be read.
    """
    missing = sorted(
        f"guardrail rule {rule.id!r} names hook {rule.hook!r}"
        for rule in guardrails.rules
        if rule.hook is not None and rule.hook not in settings.hooks
    )
    if missing:
        configured = ", ".join(sorted(settings.hooks)) or "none"
        raise ConfigError(
            "\n".join(
                f"{m}, which policy.guardrails.hooks does not configure (configured: {configured})"
                for m in missing
            )
        )
    base = ScannerSettings(
        own_secrets=tuple(s for s in own_secrets if s),
        custom_patterns=dict(guardrails.patterns),
        word_lists=dict(guardrails.words),
        allowed_hosts=guardrails.allowed_hosts,
    )
    detectors = needed_detectors(guardrails)
    try:
        scanner = Scanner(base, detectors)
        decoding = (
            Scanner(dataclasses.replace(base, decode=True), detectors)
            if any(r.decode for r in guardrails.rules)
            else None
        )
    except ValueError as exc:
        raise ConfigError(f"guardrails: {exc}") from None
    inspector = Inspector(
        GuardEngine(guardrails.rules),
        scanner,
        decoding=decoding,
        max_bytes=settings.max_bytes,
        max_depth=settings.max_depth,
    )
    hooks: dict[str, Hook] = {}
    for name in sorted(guardrails.hooks()):
        try:
            hooks[name] = Hook(name, settings.hooks[name])
        except OSError as exc:  # ssl.SSLError is one
            raise ConfigError(f"policy.guardrails.hooks.{name}.tls: cannot be used: {exc}") from None
    return Guard(inspector, hooks, None, in_thread_bytes=settings.in_thread_bytes)
