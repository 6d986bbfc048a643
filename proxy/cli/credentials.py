"""``manifold credentials``: keep, revoke and list per-identity credentials; never print one.

    manifold credentials keygen                       # a key for credentials.key
    manifold credentials set -c CONFIG --server S --identity SUBJECT [--source api_key]
                             [--issuer ISS] --secret-stdin
    manifold credentials revoke -c CONFIG --server S --identity SUBJECT [--source …] [--issuer …]
    manifold credentials list -c CONFIG [--server S]

An identity is named as Manifold keys it: ``--identity`` is its subject (an API key's configured
name, a token's ``sub``), ``--source`` how it signs in (``api_key`` unless an ``--issuer`` is
given, then ``jwt`` or ``oauth`` must be said) and ``--issuer`` who vouches for it. The secret is
read from standard input only (a command-line argument would be in the shell's history and the
process list).
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

from proxy.cli.secret_input import read_secret
from proxy.config.model import Config
from proxy.credentials.sealing import new_key
from proxy.credentials.secret import KIND
from proxy.credentials.store import SecretStore, StoreError
from proxy.credentials.stores import open_store
from proxy.policy.model import IdentityKey

__all__ = ["add_parser", "keygen", "run"]

_SOURCES: Final = ("api_key", "jwt", "oauth", "stdio")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``credentials`` and its actions to ``manifold``'s commands."""
    help_text = "Per-identity credentials to servers (credentials.mode: secret): set, revoke, list."
    credentials = commands.add_parser("credentials", help=help_text, description=help_text)
    actions = credentials.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("keygen", help="print a new key for credentials.key")

    def action(name: str, help_text: str, *, identity: bool) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--config", "-c", required=True, help="Manifold's config (its credentials store)")
        sub.add_argument("--server", required=identity, help="the server id")
        sub.add_argument("--log-level", help=argparse.SUPPRESS)
        if identity:
            sub.add_argument("--identity", required=True, help="the identity's subject (an API key's name)")
            sub.add_argument("--source", choices=_SOURCES, help="how it signs in (default: api_key)")
            sub.add_argument("--issuer", default="", help="who vouches for it (a token's iss)")
        return sub

    put = action(
        "set", "Keep a secret for one identity and server (read from standard input).", identity=True
    )
    put.add_argument("--secret-stdin", action="store_true", required=True, help="read the secret from stdin")
    action("revoke", "Forget an identity's credentials to a server.", identity=True)
    action("list", "List whose credentials are kept (never the values).", identity=False)


def keygen() -> int:
    print(new_key())
    return 0


def _holder(args: argparse.Namespace) -> IdentityKey:
    source = args.source
    if source is None:
        if args.issuer:
            raise ValueError("--issuer names a token's issuer: say --source jwt or --source oauth too")
        source = "api_key"
    if source in ("api_key", "stdio") and args.issuer:
        raise ValueError(f"an identity of source {source} has no issuer (Manifold's config vouches for it)")
    if source in ("jwt", "oauth") and not args.issuer:
        raise ValueError(f"an identity of source {source} needs --issuer (the token's iss)")
    return (source, args.issuer, args.identity)


async def run(config: Config, args: argparse.Namespace) -> int:
    """Run ``manifold credentials <action>``: 0 done, 1 nothing to revoke, 2 refused, 3 forgotten
    here but not revoked at the authorization server (its refusal or unreachability printed)."""
    if args.server is not None and args.server not in config.servers:
        print(f"manifold: no server {args.server!r} is configured", file=sys.stderr)
        return 2
    try:
        store = open_store(config.credentials, redis_url=config.rate_limits.redis_url)
    except StoreError as exc:
        print(f"manifold: {exc}", file=sys.stderr)
        return 2
    try:
        return await _act(config, args, store)
    except (ValueError, StoreError) as exc:  # messages name the problem, never a value
        print(f"manifold: {exc}", file=sys.stderr)
        return 2
    finally:
        await store.aclose()


async def _act(config: Config, args: argparse.Namespace, store: SecretStore) -> int:
    if args.action == "list":
        rows = [e for e in await store.entries() if args.server is None or e.server == args.server]
        # Tab-separated under a header line. Kind oauth-client rows are Manifold's own OAuth
        # clients (dynamically registered; source "manifold", the authorization server as the
        # issuer, the callback URL as the subject), not anybody's credential.
        print("SERVER\tKIND\tSOURCE\tISSUER\tSUBJECT")
        for entry in sorted(rows, key=lambda e: (e.server, e.holder, e.kind)):
            source, issuer, subject = entry.holder
            print(f"{entry.server}\t{entry.kind}\t{source}\t{issuer or '-'}\t{subject}")
        return 0
    holder = _holder(args)
    if args.action == "set":
        mode = config.servers[args.server].credentials.mode
        if mode != "secret":
            raise ValueError(
                f"server {args.server!r} has credentials.mode {mode!r}; set takes secrets for 'secret'"
            )
        secret = read_secret(sys.stdin)  # one line, whole, or refused (nothing dropped)
        await store.put(KIND, args.server, holder, secret)
        print(f"stored a secret for {holder[2]} ({holder[0]}) to server {args.server}")
        return 0
    problem = note = None
    if config.servers[args.server].credentials.mode == "oauth":
        from proxy.credentials.revoke import revoke_at_issuer

        revocation = await revoke_at_issuer(config, store, args.server, holder)
        problem, note = revocation.problem, revocation.note
    removed = [
        e.kind
        for e in await store.entries()
        if e.server == args.server and e.holder == holder and await store.delete(e.kind, e.server, holder)
    ]
    if not removed:
        print(
            f"manifold: nothing is kept for {holder[2]} ({holder[0]}) to server {args.server}",
            file=sys.stderr,
        )
        return 1
    what = f"{', '.join(sorted(removed))} of {holder[2]} ({holder[0]}) to server {args.server}"
    if problem is not None:
        # Forgotten here all the same: Manifold will not use them again; the user should know
        # the grant may live on at the authorization server.
        print(f"forgotten here: {what}")
        print(
            f"manifold: NOT revoked at the authorization server: {problem}; the tokens stay valid "
            "there until they expire or are revoked there",
            file=sys.stderr,
        )
        return 3
    print(f"revoked {what}" + (f" ({note})" if note else ""))
    return 0
