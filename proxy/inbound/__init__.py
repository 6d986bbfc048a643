"""Manifold as an MCP server: the HTTP and stdio endpoints clients talk to.

May import: auth, clients, config, core, credentials, enforce, observe, outbound, policy, protocol,
ratelimit (pinned in tests/test_architecture.py).
"""
