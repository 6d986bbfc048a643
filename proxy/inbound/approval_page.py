"""The approval page: ``/approvals/{id}``, where somebody holding an approver role approves or
rejects a tool call that waits for them (a confirm rule with ``approver: {role: r}``).

GET shows what is asked (tool, server, who called it, why, the arguments summary, until when)
and, while it waits, the first form: the approver types their own credential (an API key or
token, as they would send to ``/mcp``; nothing is stored and no cookie is set), which must
authenticate, hold one of the approver roles, and not be the caller's own. Then the page shows
the second form, Approve or Reject, whose token is signed for that approver and that approval
and lasts a few minutes (:mod:`proxy.enforce.confirm.form_tokens`): the decision is recorded under the
name the token carries. Then the page shows the decision, as it does for anybody who opens it
afterwards; a question whose caller gave up shows that instead of a form, and a decision sent
after it changes nothing and says so.

Served under the same Host and Origin checks as ``/mcp``
(:class:`~proxy.inbound.streamable_http.OriginPolicy`), and also to the host and origin of
``policy.approvals_url`` (where the links point). A POST must come from the page itself: its
``Origin`` must be exactly the page's own (the Host asked, or ``policy.approvals_url``'s), not
merely an origin ``/mcp`` would allow (another loopback port is another page), and
``Sec-Fetch-Site``, when the browser sends it, must be ``same-origin`` (``same-site`` and
``cross-site`` are refused). The page loads nothing from anywhere
(``Content-Security-Policy: default-src 'none'``) and may not be framed.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from proxy.auth.authenticator import Authenticated, Authenticator
from proxy.enforce.confirm.approvals import Approval, Approvals, State
from proxy.enforce.confirm.form_tokens import Approver
from proxy.inbound.pages import PAGE_HEADERS, CredentialFlood, address_of, own_origin
from proxy.inbound.pages import refused as refused_here
from proxy.inbound.streamable_http import OriginPolicy

__all__ = ["approval_routes", "render"]

_MAX_FORM: Final = 16 * 1024
_MAX_ID: Final = 64
_STYLE: Final = """
body{font:16px/1.5 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1b1f24}
main{max-width:46rem;margin:2rem auto;padding:1.5rem 2rem;background:#fff;border-radius:8px;
box-shadow:0 1px 3px #0002}
h1{font-size:1.5rem;margin-top:0}dt{font-weight:600;margin-top:.5rem}dd{margin:0 0 0 1rem}
pre{background:#f0f2f5;padding:.75rem;border-radius:6px;white-space:pre-wrap;word-break:break-word;
max-height:28rem;overflow:auto}
label{display:block;font-weight:600;margin:1rem 0 .25rem}
input{font:inherit;width:100%;box-sizing:border-box;padding:.5rem;border:1px solid #8a94a0;border-radius:6px}
.actions{margin-top:1rem;display:flex;gap:1rem}
button{font:inherit;padding:.6rem 1.4rem;border-radius:6px;border:2px solid transparent;cursor:pointer}
button:focus-visible,input:focus-visible{outline:3px solid #1f6feb;outline-offset:2px}
.approve{background:#1a7f37;color:#fff}.reject{background:#cf222e;color:#fff}
.status{padding:.75rem;border-radius:6px;background:#fff8c5;border:1px solid #d4a72c}
.status.approved{background:#dafbe1;border-color:#1a7f37}.status.rejected{background:#ffebe9;border-color:#cf222e}
.identify{background:#1f6feb;color:#fff}
"""


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


_VERBS: Final = {"approved": "Approved", "rejected": "Rejected"}


def render(
    approval: Approval | None,
    *,
    token: str,
    now: float,
    message: str | None = None,
    approver: str | None = None,
) -> str:
    """The page for ``approval`` (None: unknown or expired), with ``message`` as a notice.
    ``approver``: the name a credential just authenticated as; the form is then the decision
    (``token`` a decision token), else the credential (``token`` the page's)."""
    e = html.escape
    parts = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Approve a tool call · Manifold</title><style>{_STYLE}</style></head><body><main>",
    ]
    if approval is None:
        parts.append(
            "<h1>Approval request not found</h1><p>It does not exist, or it expired: the call it was "
            "about has been refused. Ask the caller to try again.</p></main></body></html>"
        )
        return "".join(parts)
    roles = " or ".join(f"<code>{e(role)}</code>" for role in approval.roles)
    parts += [
        "<h1>Approve a tool call</h1>",
        f"<p>{e(approval.caller)} wants to run a tool that needs the approval of someone with the "
        f"role {roles}.</p>",
        "<dl>",
        f"<dt>Tool</dt><dd><code>{e(approval.tool)}</code></dd>",
        f"<dt>Server</dt><dd><code>{e(approval.server)}</code></dd>",
        f"<dt>Called by</dt><dd>{e(approval.caller)}</dd>",
        f"<dt>Why it needs approval</dt><dd>{e(approval.reason or 'no reason given')}</dd>",
        f"<dt>Answer needed by</dt><dd>{_when(approval.deadline)}</dd>",
        "</dl>",
        '<h2 id="arguments">Arguments</h2>',
        # Whole, never cut (proxy.enforce.confirm.question): scrolls when long; focusable to scroll
        # by keyboard.
        f'<pre aria-labelledby="arguments" tabindex="0">{e(approval.summary)}</pre>',
    ]
    if message:
        parts.append(f'<p class="status" role="alert">{e(message)}</p>')
    at = _when(approval.decided_at) if approval.decided_at is not None else ""
    if approval.state == "abandoned":
        parts.append(
            f'<p class="status abandoned" role="status" id="decision">Abandoned: {e(approval.caller)} '
            f"gave up waiting at {at}. Nothing ran, and a decision now would change nothing.</p>"
        )
    elif approval.state != "pending":
        parts.append(
            f'<p class="status {approval.state}" role="status" id="decision">{_VERBS[approval.state]} by '
            f"{e(approval.decided_by or '?')} at {at}.</p>"
        )
    elif now > approval.deadline:
        parts.append('<p class="status" role="status" id="decision">Expired: nobody decided in time.</p>')
    elif approver is None:
        parts += [
            '<form method="post">',
            f'<input type="hidden" name="token" value="{e(token)}">',
            '<input type="hidden" name="step" value="identify">',
            '<label for="credential">Your API key or token (as an approver)</label>',
            '<input id="credential" name="credential" type="password" autocomplete="off" required '
            'aria-describedby="credential-help">',
            '<p id="credential-help">It is checked once and not kept. You must hold the role above, '
            "and you cannot approve your own call.</p>",
            '<div class="actions"><button class="identify" type="submit">Continue</button></div>',
            "</form>",
        ]
    else:
        parts += [
            '<form method="post">',
            f'<input type="hidden" name="token" value="{e(token)}">',
            '<input type="hidden" name="step" value="decide">',
            f'<p id="approver">Deciding as <strong>{e(approver)}</strong> (for a few minutes).</p>',
            '<div class="actions"><button class="approve" type="submit" name="decision" value="approve">'
            "Approve</button>",
            '<button class="reject" type="submit" name="decision" value="reject">Reject</button></div>',
            "</form>",
        ]
    parts.append("</main></body></html>")
    return "".join(parts)


def approval_routes(
    approvals: Approvals,
    auth: Authenticator,
    origins: OriginPolicy,
    *,
    clock: Callable[[], float] = time.time,
) -> list[Route]:
    approvals.serving()  # calls may now wait for an approver here
    # Each sign-in on the page checks a credential: bounded per address and per approval, with the
    # rate_limits.http bucket when configured, else one decision every 2 s after a burst of 30.
    flood = approvals.flood
    interval, burst = (flood.rate.interval, flood.burst) if flood is not None else (2.0, 30)
    flood_guard = CredentialFlood(interval, burst)

    def flooded(request: Request, approval_id: str) -> Response | None:
        keys = [f"approval-post:{address_of(request)}", f"approval-post-to:{approval_id[:_MAX_ID]}"]
        return flood_guard.refusal(keys)

    def page(
        approval: Approval | None,
        approval_id: str,
        status: int = 200,
        message: str | None = None,
        *,
        approver: Approver | None = None,
    ) -> Response:
        now = clock()
        if approver is not None:
            token = approvals.decision_token(approval_id, approver, now=now)
        else:
            token = approvals.token(approval_id)
        name = approver.name if approver is not None else None
        body = render(approval, token=token, now=now, message=message, approver=name)
        return HTMLResponse(body, status_code=status if approval is not None else 404, headers=PAGE_HEADERS)

    def refused(request: Request, *, post: bool) -> Response | None:
        # Where the links point (policy.approvals_url) is where approvers' browsers come from.
        what = "a decision must come from the approval page"
        if (
            refusal := refused_here(request, origins, post=post, what=what, public=approvals.origin)
        ) is not None:
            return refusal
        if not post:
            return None
        # A decision comes from the page itself: not from another origin /mcp would take (any
        # loopback port), and not from a same-site page either.
        fetch_site = request.headers.get("sec-fetch-site")
        if not own_origin(request, approvals.origin) or fetch_site not in (None, "same-origin"):
            return Response(f"Forbidden: {what}\n", status_code=403)
        return None

    async def show(request: Request) -> Response:
        if (refusal := refused(request, post=False)) is not None:
            return refusal
        approval_id = request.path_params["approval_id"]
        return page(await approvals.store.get(approval_id), approval_id)

    async def identify(approval: Approval, approval_id: str, form: dict[str, str]) -> Response:
        """The first form: a credential that may decide gets the decision form."""
        if not approvals.token_ok(approval_id, form.get("token", "")):
            return page(
                approval, approval_id, 403, "This form is out of date or was not sent from this page."
            )
        verdict = await auth.authenticate({"authorization": f"Bearer {form.get('credential', '').strip()}"})
        if not isinstance(verdict, Authenticated):
            return page(approval, approval_id, 401, f"Your credential was not accepted: {verdict.message}.")
        identity = verdict.identity
        if identity.key == approval.caller_key:
            return page(approval, approval_id, 403, "You cannot approve your own call: ask someone else.")
        if identity.roles.isdisjoint(approval.roles):
            wanted = " or ".join(approval.roles)
            return page(approval, approval_id, 403, f"{identity.name} does not hold the role {wanted}.")
        return page(approval, approval_id, approver=Approver(identity.key, identity.name))

    async def decide(request: Request) -> Response:
        if (refusal := refused(request, post=True)) is not None:
            return refusal
        approval_id = request.path_params["approval_id"]
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM:
                return Response("Request body too large\n", status_code=413)
        try:
            form = {
                k: v[0] for k, v in parse_qs(body.decode(), strict_parsing=False, max_num_fields=8).items()
            }
        except (UnicodeDecodeError, ValueError):
            form = {}
        approval = await approvals.store.get(approval_id)
        if approval is None:
            return page(None, approval_id)
        if form.get("step") == "identify":  # checks a credential: bounded (guessing, floods)
            if (refusal := flooded(request, approval_id)) is not None:
                return refusal
            return await identify(approval, approval_id, form)
        approver = approvals.approver(approval_id, form.get("token", ""), now=clock())
        if approver is None:
            return page(
                approval, approval_id, 403, "This form is out of date or was not sent from this page."
            )
        decision = form.get("decision")
        if decision not in ("approve", "reject"):
            return page(approval, approval_id, 400, "Choose Approve or Reject.", approver=approver)
        if approver.key == approval.caller_key:  # signed for someone else's call: never
            return page(approval, approval_id, 403, "You cannot approve your own call: ask someone else.")
        state: State = "approved" if decision == "approve" else "rejected"
        decided = await approvals.store.decide(approval_id, state, approver.name, clock())
        if decided is not None and decided.state == "abandoned":
            return page(decided, approval_id, 409, "Your decision changed nothing: the caller gave up first.")
        return page(decided, approval_id)

    return [
        Route("/approvals/{approval_id}", show, methods=["GET"]),
        Route("/approvals/{approval_id}", decide, methods=["POST"]),
    ]
