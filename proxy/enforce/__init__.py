"""The policy in force at run time: who sees what of the merged catalogs (access), the pins file
kept current (pins_writer), and asking a person before a call (confirm/).

May import: catalog, config, core, guardrails, observe, policy (pinned in tests/test_architecture.py).
"""
