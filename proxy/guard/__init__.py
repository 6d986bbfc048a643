"""Guardrails: what flows through Manifold, read for secrets, personal data and injected instructions.

:mod:`proxy.guard.detect` is the detection core: text in, :class:`~proxy.guard.detect.Finding`
spans out. It is pure: no I/O, no anyio, no clock; every regular expression runs on RE2, so its
cost is linear in the text whatever a client or a server sends. Walking JSON, byte and depth
bounds, the policy effects (deny, redact, confirm, quarantine, audit) and the external hooks live
with the enforcement side and call into it.

May import: nothing of Manifold's (pinned in tests/test_architecture.py); the standard library and RE2 only.
"""
