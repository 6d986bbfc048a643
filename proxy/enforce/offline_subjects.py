"""What ``manifold explain`` can decide on without starting a server: the policy's subject for a
name the config alone resolves. Pure: a config and a name in, a subject (or None) out.

A policy decides on a subject's canonical name, its server and, for a tool, its effective
annotations (:mod:`proxy.policy.annotations`). The config alone gives all three when:

- the name is in a configured server's namespace (``prefix + separator``): the merge keeps every
  other server out of it, so the rest of the name is that server's own name (or the name a tool
  override gave it, mapped back);
- for a tool, the server is not ``trusted`` (an untrusted server's hints are never believed: the
  effective annotations are the operator's overrides on the spec's cautious defaults), and
  ``policy.pins.mode`` is not ``block`` (whether a drifted definition is withheld is a matter of
  what the server lists now);
- for a server's log level, the name is a configured server's id.

Anything else (an unprefixed server's names, a trusted server's tool, a resource URI, which is
routed by what servers list) needs the live catalog: the caller starts the servers for it. Whether
a server actually lists a resolved name is not known here; the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from proxy.catalog.merge import Entry
from proxy.catalog.naming import NamingCodec
from proxy.config.model import Config, ServerConfig
from proxy.enforce.access import renames
from proxy.policy import Subject
from proxy.policy.annotations import EffectiveAnnotations, effective_for_entry
from proxy.policy.model import ServerTrust

__all__ = ["Resolved", "resolve"]

Kind = Literal["tool", "prompt", "log_level"]


@dataclass(frozen=True)
class Resolved:
    """A subject the config alone names, what clients are shown it as, and (tools) its annotations."""

    subject: Subject
    shown_as: str
    annotations: EffectiveAnnotations | None = None


def resolve(config: Config, kind: Kind, name: str) -> Resolved | None:
    """The subject ``name`` names, or None when only the live catalog can say."""
    servers = {s.id: s for s in config.enabled_servers()}
    if kind == "log_level":
        return Resolved(Subject.log_level(name), name) if name in servers else None
    codec = NamingCodec(config.naming.separator, config.naming.max_length)
    found = _in_namespace(servers, codec, name)
    if found is None:
        return None
    server, rest = found
    if kind == "prompt":
        canonical = codec.canonical(server.prefix, rest)
        entry = Entry(codec.render(server.prefix, rest), server.id, rest, {}, canonical)
        return Resolved(Subject.prompt(entry), entry.name)
    if server.trusted or config.policy.pins.mode == "block":
        return None
    given = renames({server.id: server})
    original = {new: old for (_, old), new in given.items()}.get(rest, rest)
    shown = codec.render(server.prefix, given.get((server.id, original), original))
    entry = Entry(shown, server.id, original, {}, codec.canonical(server.prefix, original))
    trust = ServerTrust(trusted=False, annotations=server.annotations)
    effective = effective_for_entry(entry, trust)
    return Resolved(Subject.tool(entry, effective), shown, effective)


def _in_namespace(
    servers: Mapping[str, ServerConfig], codec: NamingCodec, name: str
) -> tuple[ServerConfig, str] | None:
    """The server whose namespace ``name`` is in, and the rest of the name; None when an
    unprefixed server could own it too, or none does."""
    if any(not server.prefix for server in servers.values()):
        return None  # an unprefixed server's names are anything: only its list can tell
    for server in servers.values():
        space = codec.namespace(server.prefix)
        if name.startswith(space) and len(name) > len(space):
            return server, name[len(space) :]
    return None
