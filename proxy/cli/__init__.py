"""``manifold``: the command line (main), the commands that look inside a configured gateway
(inspection: tools, explain, pins accept), and ``manifold credentials`` (credentials).

May import: app, auth, config, core, credentials, enforce, inbound, observe, policy, protocol
(pinned in tests/test_architecture.py).
"""
