"""The web console at ``/admin/``: server-rendered pages over the admin service layer, for
operators in a browser (sign-in, the overview, a server's detail, the catalog as a role sees it,
the policy and explain, sessions, approvals, credentials, audit, the reload plan, switching a
tool off). No script: every page reads and acts with plain links and forms.

May import: core, config, auth, inbound (the pages' shared checks), admin (the service layer).
"""
