"""Building the run-time :class:`~proxy.guardrails.guard.Guard` from a policy's guardrails and
the config's ``policy.guardrails`` settings (what ``manifold check`` and every reload run)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from proxy.errors import ConfigError
from proxy.guard.detect import Scanner, ScannerSettings
from proxy.guardrails.engine import GuardEngine
from proxy.guardrails.guard import Guard
from proxy.guardrails.hooks import Hook
from proxy.guardrails.inspector import Inspector
from proxy.guardrails.loading import Guardrails
from proxy.policy.guardrail_settings import GuardrailSettings

__all__ = ["build_guard"]


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
    try:
        scanner = Scanner(base)
        decoding = (
            Scanner(dataclasses.replace(base, decode=True))
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
