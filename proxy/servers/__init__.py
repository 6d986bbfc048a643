"""Every connection to the configured servers: the shared ones and which connection a caller
reaches a server on (connections), ``per_client`` connections, one per identity and server
(per_client), and servers' questions outside any call waiting for a 2026-07-28 caller
(held_questions).

May import: clients, config, core, credentials, observe, outbound, pipeline, policy, protocol
(pinned in tests/test_architecture.py).
"""
