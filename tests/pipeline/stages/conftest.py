from tests.tracing.conftest import traces  # noqa: F401  # tracing on, in memory (test_traced.py)
