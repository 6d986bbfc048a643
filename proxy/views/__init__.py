"""What each client is shown: the merged catalogs and each identity's view of them (catalogs),
the views of ``per_client`` identities (per_client), named endpoints (endpoints), and
progressive discovery's state and answers (discovery).

May import: catalog, clients, config, core, enforce, observe, outbound, pipeline, policy, protocol,
servers (pinned in tests/test_architecture.py).
"""
