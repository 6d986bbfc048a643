"""Every section of Manifold's configuration: the schema (model, and one module per section that
belongs to a feature: auth, oauth, credentials, discovery, policy, ratelimit, observe), loading
and interpolation, ``MANIFOLD_*`` overrides, editor files, the operator's policy and pins files,
and the reload plan (old config and new in, a frozen plan out).

May import: catalog, core, policy, protocol (pinned in tests/test_architecture.py).
"""
