"""The small core every other package may lean on: the exception tree (errors), who is asking
(identity), keys and fingerprints (keys), per-owner counts (quotas), credentials out of text
(redaction), the documents operators write parsed strictly (documents), Manifold's own file I/O
(files), and which signing algorithms and hosts Manifold accepts (algorithms).

May import: nothing of Manifold's (pinned in tests/test_architecture.py).
"""
