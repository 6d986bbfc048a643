"""Guardrails at run time: what flows through a call inspected by the policy's guardrail rules.

The rule language and deciding are policy (:mod:`proxy.policy.guardrails`,
:mod:`proxy.policy.guardrail_engine`, :mod:`proxy.policy.guardrail_loader`); the detectors are
:mod:`proxy.guard.detect`. This package puts them to work: :mod:`~proxy.guardrails.walk` (text
inside JSON, bounded), :mod:`~proxy.guardrails.inspector` (one message scanned and decided, pure),
:mod:`~proxy.guardrails.guard` (threads for big messages, hooks, metrics, audit),
:mod:`~proxy.guardrails.hooks` (external inspection services) and
:mod:`~proxy.guardrails.wiring` (built from a policy and the config). Nothing here is imported
unless a policy has guardrail rules.

May import: config, core, guard, observe, outbound, policy (pinned in tests/test_architecture.py).
"""
