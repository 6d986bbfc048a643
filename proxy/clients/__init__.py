"""Our side of every client: a client session and what it negotiated (session), the sessions of
one gateway (sessions), self-describing session ids (session_ids), SSE streams that survive a
dropped connection (streams), ``subscriptions/listen`` fan-out (listen_streams), ended session
ids (revocations), and what the inbound transports need of the centre (contract).

May import: auth, config, core, credentials, enforce, observe, policy, protocol (pinned in
tests/test_architecture.py).
"""
