"""``manifold``: the command line (commands; :func:`main` is its entry point), the commands that
look inside a configured gateway (inspection: tools, explain, pins accept), and ``manifold
credentials`` (credentials).

May import: app, auth, config, core, credentials, enforce, inbound, observe, policy, protocol
(pinned in tests/test_architecture.py).
"""

from proxy.cli.commands import main

__all__ = ["main"]
