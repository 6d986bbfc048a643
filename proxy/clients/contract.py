"""What the inbound transports need of the rest of Manifold, and nothing more.

A transport turns bytes into messages and messages into bytes. What a message means is the
:class:`Endpoint`'s business (:class:`proxy.router.dispatch.Router`); who a session is, the
:class:`SessionRegistry`'s (:class:`proxy.clients.sessions.Sessions`). The composition root
(:mod:`proxy.app.gateway`) hands each transport an :class:`Inbound`; no transport knows the root.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from proxy.auth.authenticator import Authenticator
from proxy.clients.listen_streams import Subscription
from proxy.clients.session import ClientSession, Deliver, StatelessCaller
from proxy.config.model import Config
from proxy.enforce.confirm.approvals import Approvals
from proxy.observe.boundary import Boundary
from proxy.observe.metrics import Metrics
from proxy.policy.model import Identity
from proxy.protocol.jsonrpc import Message, RequestId
from proxy.protocol.subscriptions import Filter

if TYPE_CHECKING:
    from proxy.credentials.on_behalf import OnBehalf

__all__ = ["Endpoint", "Health", "Inbound", "SessionRegistry"]


def _everyone(_: Identity) -> bool:
    return True


class Endpoint(Protocol):
    async def handle(
        self, session: ClientSession, message: Message, stream: Deliver | None = None
    ) -> Message | None:
        """Answer one validated message of a handshake-era session; None: nothing to send.
        Never raises but cancellation."""
        ...

    async def handle_stateless(self, caller: StatelessCaller, message: Message, stream: Deliver) -> Message:
        """Answer one validated 2026-07-28 request. Never raises but cancellation."""
        ...

    def listen(
        self, caller: StatelessCaller, subscription_id: RequestId, requested: Filter
    ) -> AbstractAsyncContextManager[Subscription]:
        """Open a ``subscriptions/listen`` stream, closed on exit."""
        ...

    def tool_definition(self, name: str, identity: Identity) -> Mapping[str, Any] | None:
        """The definition of a tool as ``identity`` is shown it, if it is shown it."""
        ...


class SessionRegistry(Protocol):
    def fresh(self, transport: str, identity: Identity) -> ClientSession: ...

    async def admit(self, session: ClientSession) -> str:
        """Raises: LimitExceeded: no room for another session."""
        ...

    def open(self, transport: str, identity: Identity) -> ClientSession: ...

    async def find(self, session_id: str, identity: Identity) -> ClientSession | None:
        """The live session, or one taken over from its signed id (asking the revocation store)."""
        ...

    async def end(self, session: ClientSession, *, revoke: bool = True) -> None: ...

    async def expire(self) -> None: ...


class Health(Protocol):
    def health(self) -> dict[str, dict[str, Any]]: ...

    def waiting_for(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Inbound:
    """Everything an inbound transport is given."""

    config: Config
    endpoint: Endpoint
    sessions: SessionRegistry
    auth: Authenticator
    metrics: Metrics
    health: Health
    boundary: Boundary  # where a transport's own failures end (proxy.observe.boundary)
    approvals: Approvals | None = None  # the approval page's requests (proxy.enforce.confirm.approvals)
    sign_in: OnBehalf | None = None  # /oauth/callback's sign-ins (credentials.mode: oauth)
    endpoint_name: str = ""  # the named endpoint this serves ("": the whole catalog, /mcp)
    admits: Callable[[Identity], bool] = _everyone  # who may use it (the endpoint's roles)
