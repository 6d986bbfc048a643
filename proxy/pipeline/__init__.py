"""What happens to a call: the context a forwarded request carries (context), its stages in the
order declared once (order, stages/), the innermost send to a server (forward), and the bridges
between protocol eras (bridge/).

May import: catalog, clients, config, core, credentials, enforce, guardrails, observe, outbound,
policy, protocol, ratelimit (pinned in tests/test_architecture.py).
"""
