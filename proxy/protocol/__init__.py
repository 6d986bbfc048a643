"""Pure protocol code: bytes and messages in, messages and events out. No I/O imports.

May import: core (pinned in tests/test_architecture.py).
"""
