"""The composition root: builds Manifold's parts, wires them together and runs them (gateway), and
applies config reloads to the running gateway (reloader).

May import: auth, catalog, clients, config, core, credentials, enforce, notify, observe, outbound,
pipeline, policy, router, servers, views (pinned in tests/test_architecture.py).
"""
