"""The admin API: see and act on a running Manifold without editing files (``admin:``, off
unless configured).

For code that runs in the same process (the web console), the service layer is
:class:`proxy.admin.service.Admin`, one per gateway (``manifold serve`` makes it:
:func:`proxy.admin.wiring.admin_parts`, whose :class:`~proxy.admin.wiring.AdminParts` also
holds the HTTP app and the mounts a console adds its own to). Every method returns plain,
JSON-ready data, the same the HTTP routes answer; none returns a secret; every string in it
that came from a server or client is untrusted text to escape.

Who: ``is_admin(identity)`` (authenticated, holding one of ``admin.roles``); authenticate with
the gateway's :class:`~proxy.auth.authenticator.Authenticator` (``gateway.auth``), as the routes do.

Reads (sync unless marked async)::

    servers()                  [server]: state, required, restarts, last_error and stderr_tail
                               (redacted), lists, drained, calls {per_second, error_rate,
                               p50_ms, p99_ms, series: calls per 2 s over the last minute}
    server(id)                 one of them (AdminError 404)
    endpoints()                /mcp and each named endpoint: servers, tools, roles
    catalog_as(identity)       tools/prompts as that identity sees them, with each name's server,
                               original name, annotations' source, and any overlay
    explain(identity, tool)    the decision, its rules, and the overlay that refuses, if any
    async policy()             rules with file and line, dry_run, the overlays
    overlays()                 the tools switched off now
    sessions()                 open sessions here (ids cut to 12 characters)
    async approvals()          approvals kept (from Redis when kept there), parked calls
    async credentials()        credentials held: server, kind, holder; never a value
    async near_limit()         rate-limit buckets with 80 % of their burst spent (memory or Redis)
    refusals()                 the last refusals by a limit
    audit(identity=, tool=, outcome=, since=, limit=)   recent calls' and admin actions' records

Acts (async; ``actor`` = :class:`~proxy.admin.service.Actor` (identity, address), audited;
those on per-process state answer ``{"replicas": [{"replica", "acted", "problem"?}],
"unanswered"}``)::

    restart(actor, id)   drain(actor, id, on=True|False)   end_session(actor, id_prefix)
    revoke_credential(actor, server, kind, holder)   accept_pins(actor, tools | None)
    switch_off(actor, tool, role | None, minutes, reason)   switch_on(actor, tool, role | None)
    plan_reload(config_text | None)   apply_reload(actor, config_text | None)

A refusal is :class:`~proxy.admin.service.AdminError` (``status``, ``message``: safe to show).
Over HTTP (:mod:`proxy.admin.routes`) the same under ``/admin/api/``; the routes and their
schemas are in ``/admin/api/openapi.json`` (:mod:`proxy.admin.openapi`).

May import: core, policy, config, observe, auth, credentials, enforce, ratelimit, inbound, app
(pinned in tests/test_architecture.py).
"""
