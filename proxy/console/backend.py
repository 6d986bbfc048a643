"""What the console asks of the admin service layer: one typed seam, so the pages and routes
never reach into the gateway's parts themselves.

Every answer is plain JSON-like data (what ``/admin/api/`` answers for the same question), and
every value in it is untrusted text to the pages that show it. A read the service refuses
raises :class:`Refused`; anything else a read raises is the console's fault boundary's
(:mod:`proxy.console.routes`: logged, and a page saying so). Actions take the identity that
asked and the address it asked from (the audit trail's who and where) and answer a dict with at
least ``ok`` (bool) and ``message`` (a sentence to show).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeAlias

from proxy.core.identity import Identity

__all__ = ["Answer", "Backend", "Refused", "Rows"]

Rows: TypeAlias = Sequence[Mapping[str, Any]]
Answer: TypeAlias = Mapping[str, Any]


class Refused(Exception):
    """The service layer will not answer a read now (its store unreachable, say): ``message``
    is safe to show, ``status`` is the page's."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Backend(Protocol):
    """The reads and acts the console's pages make (each as the API's route of the same name)."""

    async def servers(self) -> Rows:
        """Each server: id, state, required, drained, restarts, last_error, lists (tools,
        prompts, resources), calls (per_second, error_rate, p50_ms, p99_ms, series)."""
        ...

    async def limits(self) -> Answer:
        """``buckets`` near their limit (rule, bucket, spent, burst, rate), or a ``problem``
        saying why they cannot be listed now, and the last ``refusals`` by a limit (at, limit),
        newest first."""
        ...

    async def server(self, server_id: str) -> Answer | None:
        """One server as in :meth:`servers`, with its redacted ``stderr_tail`` (lines)."""
        ...

    async def catalog(self, roles: Sequence[str], name: str) -> Answer:
        """What an identity named ``name`` holding ``roles`` sees: tools, prompts, resources,
        each with name, description, annotations, server, and where it came from."""
        ...

    async def policy(self) -> Answer:
        """The policy's rules (id, effect, description, file, line) and the overlays in force."""
        ...

    async def explain(self, name: str, roles: Sequence[str], who: str) -> Answer | None:
        """Why ``who`` holding ``roles`` may or may not call ``name``: effect, policy_effect,
        rules, reason, overlay; None when the live catalog has no such tool."""
        ...

    async def sessions(self) -> Rows:
        """Open sessions: id (shortened), identity, transport, endpoint, idle_seconds, replica."""
        ...

    async def approvals(self) -> Rows:
        """Approvals kept (pending and decided): id, tool, server, caller, state, deadline, link."""
        ...

    async def credentials(self) -> Rows:
        """Credentials held: server, kind, holder (source, issuer, subject; never a value)."""
        ...

    async def audit(self, filters: Mapping[str, str]) -> Rows:
        """Recent audit entries matching ``filters`` (identity, tool, outcome; since: seconds
        ago), newest first: ts, identity, name or action and target, outcome, rules, from."""
        ...

    async def restart(self, server_id: str, by: Identity, address: str) -> Answer: ...

    async def drain(self, server_id: str, on: bool, by: Identity, address: str) -> Answer:
        """Drain ``server_id`` (``on``: no new calls, in-flight ones finish) or undrain it."""
        ...

    async def end_session(self, session_id: str, by: Identity, address: str) -> Answer: ...

    async def revoke(
        self, server_id: str, kind: str, holder: Mapping[str, str], by: Identity, address: str
    ) -> Answer:
        """Revoke the ``kind`` credential ``holder`` (source, issuer, subject) holds for ``server_id``."""
        ...

    async def tool_off(
        self, tool: str, role: str | None, minutes: float, reason: str, by: Identity, address: str
    ) -> Answer:
        """Switch ``tool`` off for ``role`` (None: everyone) for ``minutes``, on every replica."""
        ...

    async def tool_on(self, tool: str, role: str | None, by: Identity, address: str) -> Answer: ...

    async def reload_plan(self, config_text: str | None) -> Answer:
        """The plan a reload would carry out (add, remove, restart, endpoints_added,
        endpoints_removed, endpoints_changed, needs_restart, held_back), or its ``problems``
        when the config is not valid; for the config file as it is now (None) or ``config_text``."""
        ...

    async def reload_apply(self, config_text: str | None, by: Identity, address: str) -> Answer: ...
