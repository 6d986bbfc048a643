"""What Manifold costs compared with no proxy at all: a load harness and its report.

Run ``python -m benchmarks.run`` (``make bench``); ``benchmarks/README.md`` says what is measured,
how, and what the last run found.
"""
