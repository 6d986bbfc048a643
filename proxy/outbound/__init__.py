"""Manifold as an MCP client: transports to servers, connections, the registry of servers.

May import: config, core, protocol (pinned in tests/test_architecture.py).
"""
