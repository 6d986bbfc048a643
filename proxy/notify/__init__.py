"""What clients hear unprompted: list changes (list_changes), resource subscriptions
(subscriptions), server log lines by policy (server_logs), and the one listener of every
shared server connection that routes what it hears (server_events).

May import: clients, config, enforce, outbound, pipeline, policy, protocol, servers, views (pinned
in tests/test_architecture.py).
"""
