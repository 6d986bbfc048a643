"""How Manifold reports on itself: Prometheus metrics, logs (JSON or plain, redacted), the audit
log's line writer, and the fault boundary, the one place an exception becomes a JSON-RPC error.

May import: config, core, protocol (pinned in tests/test_architecture.py).
"""
