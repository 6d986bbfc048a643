"""Who may see and call which tool, and what to believe about it. Pure: no clock, no network, no files.

Deciding is apart from enforcing: this package decides and returns data; the request path
(``authorize`` middleware) hides, refuses and logs.

* :mod:`~proxy.policy.model`: identities, the rule language, decisions, server trust settings.
* :mod:`~proxy.policy.loader`: policy documents -> one :class:`Policy`, or a ConfigError saying where.
* :mod:`~proxy.policy.engine`: :class:`PolicyEngine` -> :class:`Decision` (deny overrides allow,
  default when nothing matches, independent of rule order).
* :mod:`~proxy.policy.annotations`: the *effective* annotations of a tool (trusted or not).
* :mod:`~proxy.policy.validation`: arguments and structured results against the tool's schemas.
* :mod:`~proxy.policy.pins`: tool definition hashes, drift, and the pins file's contents.
* :mod:`~proxy.policy.guardrails`, :mod:`~proxy.policy.guardrail_loader`,
  :mod:`~proxy.policy.guardrail_engine`: guardrail rules (what flows, read by detectors), their
  section of a policy file, and deciding on what the detectors found.

The files themselves are read and written by :mod:`proxy.config.policy_files`.

May import: catalog, core, guard (the detectors' names) (pinned in tests/test_architecture.py).
"""

from __future__ import annotations

from proxy.policy.annotations import (
    CAUTIOUS,
    EffectiveAnnotations,
    effective_annotations,
    effective_for_entry,
    rewrite_definition,
)
from proxy.policy.engine import PolicyEngine, Subject
from proxy.policy.loader import combine, document_from_mapping, parse_policy_text
from proxy.policy.model import (
    ANONYMOUS,
    Decision,
    Effect,
    Identity,
    Policy,
    PolicyDocument,
    Rule,
    ServerTrust,
)
from proxy.policy.pins import (
    Drift,
    PinMode,
    accept,
    blocked_names,
    compare,
    current_pins,
    parse_pins,
    pin_new,
    render_pins,
    tool_hash,
)
from proxy.policy.validation import SchemaValidators

__all__ = [
    "ANONYMOUS",
    "CAUTIOUS",
    "Decision",
    "Drift",
    "Effect",
    "EffectiveAnnotations",
    "Identity",
    "PinMode",
    "Policy",
    "PolicyDocument",
    "PolicyEngine",
    "Rule",
    "SchemaValidators",
    "ServerTrust",
    "Subject",
    "accept",
    "blocked_names",
    "combine",
    "compare",
    "current_pins",
    "document_from_mapping",
    "effective_annotations",
    "effective_for_entry",
    "parse_pins",
    "parse_policy_text",
    "pin_new",
    "render_pins",
    "rewrite_definition",
    "tool_hash",
]
