"""The router: every client message, in either era, to the code that answers it.

May import: catalog, clients, config, core, notify, observe, outbound, pipeline, policy, protocol,
servers, views (pinned in tests/test_architecture.py).
"""
