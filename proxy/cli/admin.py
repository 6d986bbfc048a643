"""``manifold admin …``: the admin API (:mod:`proxy.admin`) from a shell, for scripts and for
operators without a browser. It only speaks HTTP to a running Manifold; it reads no config.

Where: ``--url`` (default ``$MANIFOLD_ADMIN_URL``, else ``http://127.0.0.1:8080``). Who: the API
key or token in ``$MANIFOLD_ADMIN_KEY``, or one line on standard input with ``--key-stdin``
(never an argument: it would be in the shell's history and the process list).

Exit codes: 0 done; 1 the API refused (its message on stderr); 2 bad usage, or Manifold cannot
be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import urllib.request

__all__ = ["add_parser", "run"]

DEFAULT_URL: Final = "http://127.0.0.1:8080"
_TIMEOUT: Final = 30.0
_MAX_ANSWER: Final = 64 * 1024 * 1024


def _opener() -> urllib.request.OpenerDirector:
    """An opener that refuses redirects: the key must not travel to wherever one points.

    urllib.request (http.client, email, ...) is imported here, not with the module: the parser
    is built on every ``manifold`` command, ``serve`` included, which never uses it (#34)."""
    import urllib.request

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(NoRedirects())


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``admin`` and its actions to ``manifold``'s commands."""
    help_text = "Drive a running Manifold's admin API (admin:): servers, sessions, tools, reloads."
    admin = commands.add_parser("admin", help=help_text, description=help_text)
    actions = admin.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "--url", help=f"Manifold's base URL (default $MANIFOLD_ADMIN_URL, else {DEFAULT_URL})"
        )
        sub.add_argument(
            "--key-stdin", action="store_true", help="read the key from stdin, not $MANIFOLD_ADMIN_KEY"
        )
        sub.add_argument("--json", action="store_true", help="print the API's JSON answer")
        return sub

    action("servers", "List the servers: state, errors, call rates.")
    action("restart", "Restart a server on every replica.").add_argument("server")
    action("drain", "No new calls to a server (in-flight ones finish), on every replica.").add_argument(
        "server"
    )
    action("undrain", "Calls to a drained server again.").add_argument("server")
    action("sessions", "List the sessions open on the replica asked.")
    action("end", "End a session (its id, or 8+ characters of it) on every replica.").add_argument("session")
    revoke = action("revoke", "Forget a held credential.")
    revoke.add_argument("--server", required=True, help="the server id")
    revoke.add_argument("--kind", default="secret", help="the credential's kind (default: secret)")
    revoke.add_argument("--subject", required=True, help="whose: the identity's subject")
    revoke.add_argument("--source", default="api_key", help="how it signs in (default: api_key)")
    revoke.add_argument("--issuer", default="", help="who vouches for it (a token's iss)")
    tools = action("tools", "Switch a tool off (for everyone or a role, for a time) or on again.")
    tools.add_argument("switch", choices=["off", "on"])
    tools.add_argument("tool", help="the namespaced tool name")
    tools.add_argument("--role", help="only for this role (default: everyone)")
    tools.add_argument("--minutes", type=float, default=60.0, help="how long it stays off (default: 60)")
    tools.add_argument("--reason", default="", help="why, shown to callers")
    reload = action("reload", "Show the reload plan for a config, or apply it.")
    mode = reload.add_mutually_exclusive_group(required=True)
    mode.add_argument("--plan", action="store_true", help="validate and show the plan; change nothing")
    mode.add_argument("--apply", action="store_true", help="apply it as a file reload does")
    reload.add_argument("--file", help="the config to plan (default: the file Manifold was started with)")


def _key(args: argparse.Namespace) -> str:
    """Raises: ValueError: no key given."""
    if args.key_stdin:
        from proxy.cli.secret_input import read_secret

        return read_secret(sys.stdin)
    key = os.environ.get("MANIFOLD_ADMIN_KEY", "")
    if not key:
        raise ValueError("give the admin key in $MANIFOLD_ADMIN_KEY, or on standard input with --key-stdin")
    return key


def _request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    """(method, path under /admin/api, body) for the action ``args`` names.

    Raises:
        ValueError: a file to plan cannot be read.
    """
    quote = urllib.parse.quote
    action = args.action
    if action in ("servers", "sessions"):
        return "GET", f"/{action}", None
    if action in ("restart", "drain", "undrain"):
        return "POST", f"/servers/{quote(args.server, safe='')}/{action}", {}
    if action == "end":
        return "POST", f"/sessions/{quote(args.session, safe='')}/end", {}
    if action == "revoke":
        holder = {"source": args.source, "issuer": args.issuer, "subject": args.subject}
        return "POST", "/credentials/revoke", {"server": args.server, "kind": args.kind, "holder": holder}
    if action == "tools":
        if args.switch == "on":
            return "POST", "/tools/on", {"tool": args.tool, "role": args.role}
        body = {"tool": args.tool, "role": args.role, "minutes": args.minutes, "reason": args.reason}
        return "POST", "/tools/off", body
    config = None
    if args.file is not None:
        try:
            with open(args.file, encoding="utf-8") as handle:
                config = handle.read(4 * 1024 * 1024 + 1)
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read {args.file}: {exc}") from None
    return "POST", "/reload/plan" if args.plan else "/reload/apply", {"config": config}


def run(args: argparse.Namespace) -> int:
    try:
        key = _key(args)
        method, path, body = _request(args)
    except ValueError as exc:
        print(f"manifold admin: {exc}", file=sys.stderr)
        return 2
    base = (args.url or os.environ.get("MANIFOLD_ADMIN_URL") or DEFAULT_URL).rstrip("/")
    if not base.startswith(("http://", "https://")):
        print(
            f"manifold admin: --url must start with http:// or https:// (got {base[:80]!r})", file=sys.stderr
        )
        return 2
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    opener = _opener()
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{base}/admin/api{path}", data=data, method=method, headers=headers)
    try:
        with opener.open(request, timeout=_TIMEOUT) as response:
            answer = json.loads(response.read(_MAX_ANSWER))
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read(64 * 1024)).get("message", exc.reason)
        except (ValueError, AttributeError):
            message = exc.reason
        print(f"manifold admin: {exc.code}: {message}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"manifold admin: cannot reach {base}: {reason}", file=sys.stderr)
        return 2
    print(json.dumps(answer, indent=2) if args.json else _shown(args.action, answer))
    return 0


def _shown(action: str, answer: Any) -> str:
    """The answer for a person: one line per item."""
    if action == "servers":
        return (
            "\n".join(
                f"{s['id']:<20} {s['state']:<9} {'drained ' if s['drained'] else ''}"
                f"{s['calls']['per_second']:.2f}/s errors {s['calls']['error_rate']:.1%} "
                f"p50 {_ms(s['calls']['p50_ms'])} p99 {_ms(s['calls']['p99_ms'])}"
                + (f"  last error: {s['last_error']}" if s["last_error"] else "")
                for s in answer
            )
            or "no servers"
        )
    if action == "sessions":
        return (
            "\n".join(
                f"{s['id']:<13} {s['identity']['name']:<20} {s['transport']:<5} in flight {s['in_flight']}"
                for s in answer
            )
            or "no sessions"
        )
    if isinstance(answer, dict) and "replicas" in answer:
        lines = [
            f"{r['replica']}: {'done' if r['acted'] else r.get('problem', 'not done')}"
            for r in answer["replicas"]
        ]
        if answer.get("unanswered"):
            lines.append(f"{answer['unanswered']} replica(s) did not answer")
        if answer.get("problem"):
            lines.append(answer["problem"])
        return "\n".join(lines)
    if isinstance(answer, dict) and "description" in answer:
        return str(answer["description"])
    if isinstance(answer, dict) and "plan" in answer:
        return f"{answer['outcome']}: {answer['plan']['description']}"
    return json.dumps(answer, indent=2)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}ms"
