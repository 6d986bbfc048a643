"""The sign-in stage: a call to a server in ``oauth`` credentials mode, by a user who has no token
for it yet, waits for that user to sign in, then goes on.

Last before the call is forwarded (after confirm: nobody signs in for a call that would be
refused). How the user is asked depends on their client:

* handshake era, ``elicitation.url`` declared: a URL-mode ``elicitation/create`` on the call's
  stream, with the authorization server's sign-in link (its ``state`` bound to this identity and
  server, single use, ``signin_ttl``); once the client accepts, the call waits (at most the
  sign-in's lifetime) until Manifold's callback has the token, tells the client
  ``notifications/elicitation/complete``, and goes on;
* 2026-07-28: the call is answered ``input_required`` with that elicitation and a
  ``requestState`` sealed for this call and caller; the retry waits (bounded) for the sign-in to
  complete and goes on, and is refused if the user declined or the sign-in failed;
* a client that cannot be asked gets an ``isError`` result with the link
  (``_meta["dev.manifold/outcome"] = "sign_in_required"``, ``dev.manifold/sign_in`` the URL).

A token that stops working (refused at refresh) is forgotten, so the next call asks again.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, Final

import anyio

from proxy.core.errors import InvalidRequestState, MethodNotFound, RemoteError
from proxy.credentials.oauth_client import OAuthClientError, OAuthUnusable
from proxy.credentials.on_behalf import OnBehalf
from proxy.pipeline.bridge.mrtr import boundary_of
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import CallContext, Handler, tool_error
from proxy.protocol import jsonrpc

__all__ = ["SIGN_IN_KEY", "SignInStage"]

logger = logging.getLogger("proxy.pipeline.stages.sign_in")

SIGN_IN_KEY: Final = "manifold-sign-in"  # the inputRequests key of Manifold's sign-in question
_ELICIT: Final = "elicitation/create"
_META_LINK: Final = "dev.manifold/sign_in"


class SignInStage:
    def __init__(
        self,
        on_behalf: OnBehalf,
        states: RequestStates,
        *,
        ask_timeout: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._flow = on_behalf
        self._clock = clock
        self._states = states  # its own key: a sign-in state never passes for another kind
        self._ask_timeout = ask_timeout

    async def __call__(self, ctx: CallContext, call_next: Handler) -> Any:
        if ctx.server_id not in self._flow.servers or ctx.method != "tools/call":
            return await call_next(ctx)
        if ctx.caller.stateless and "requestState" in ctx.params:
            try:
                sealed = self._states.open(ctx.params["requestState"], boundary_of(ctx))
            except InvalidRequestState:
                pass  # a server's state, checked where it is opened; the user still needs a token
            else:
                if sealed.kind != "signin":
                    raise InvalidRequestState()
                return await self._retried(ctx, call_next, sealed.payload)
        identity = ctx.caller.identity
        try:
            if await self._flow.access_token(identity, ctx.server_id) is not None:
                return await call_next(ctx)
            sign_in = await self._flow.begin(identity, ctx.server_id)
        except OAuthUnusable as exc:  # it answered: waiting will not help, the operator must act
            logger.warning("%s: its authorization server cannot be used: %s", ctx.server_id, exc)
            return tool_error(
                f"The authorization server of {ctx.server_id} cannot be used to sign you in: {exc}. "
                "Tell the operator; trying again will not help until that changes.",
                outcome="sign_in_unavailable",
            )
        except OAuthClientError as exc:
            logger.warning("%s: its authorization server cannot be reached: %s", ctx.server_id, exc)
            return tool_error(
                f"Manifold cannot reach the authorization server of {ctx.server_id} to sign you in; "
                "try again later.",
                outcome="sign_in_unavailable",
            )
        elicitation_id = secrets.token_urlsafe(16)
        params = {
            "mode": "url",
            "elicitationId": elicitation_id,
            "url": sign_in.url,
            "message": f"Sign in to {ctx.server_id} so that Manifold can call it as you.",
        }
        if not ctx.caller.supports(_ELICIT, params):
            return self._link(ctx, sign_in.url)
        if ctx.caller.stateless:
            state = self._states.seal(boundary_of(ctx), "signin", sign_in.state)
            return {
                "resultType": "input_required",
                "inputRequests": {SIGN_IN_KEY: {"method": _ELICIT, "params": params}},
                "requestState": state,
            }
        try:
            with anyio.fail_after(self._ask_timeout):
                answer = await ctx.caller.request(_ELICIT, params)
        except (TimeoutError, RemoteError, MethodNotFound) as exc:
            logger.info("the client did not ask its user to sign in to %s: %s", ctx.server_id, exc)
            return self._link(ctx, sign_in.url)
        if not isinstance(answer, dict) or answer.get("action") != "accept":
            return tool_error(
                f"You did not sign in to {ctx.server_id}, so the call was not made.",
                outcome="sign_in_required",
                meta={_META_LINK: sign_in.url},
            )
        left = max(0.0, sign_in.expires_at - self._clock())
        if not await self._flow.wait(identity, ctx.server_id, left, sign_in.state):
            if (why := self._flow.refusal(sign_in.state)) is not None:
                return self._refused(ctx, why)
            return self._link(ctx, sign_in.url, waited=True)
        ctx.caller.notify(
            jsonrpc.notification("notifications/elicitation/complete", {"elicitationId": elicitation_id})
        )
        return await call_next(ctx)

    async def _retried(self, ctx: CallContext, call_next: Handler, state: str) -> Any:
        """The retry of a call answered ``input_required``: declined, it is not made; accepted, it
        waits (bounded) for the sign-in to complete, and is asked again if it did not."""
        responses = ctx.params.get("inputResponses")
        answer = responses.get(SIGN_IN_KEY) if isinstance(responses, dict) else None
        params = {k: v for k, v in ctx.params.items() if k not in ("inputResponses", "requestState")}
        ctx = dataclasses.replace(ctx, params=params)
        if not isinstance(answer, dict) or answer.get("action") != "accept":
            return tool_error(
                f"You did not sign in to {ctx.server_id}, so the call was not made.",
                outcome="sign_in_required",
            )
        if await self._flow.wait(ctx.caller.identity, ctx.server_id, self._ask_timeout, state):
            return await call_next(ctx)
        if (why := self._flow.refusal(state)) is not None:
            return self._refused(ctx, why)
        return tool_error(
            f"The sign-in to {ctx.server_id} did not complete, so the call was not made; call the tool "
            "again for a new sign-in link.",
            outcome="sign_in_required",
        )

    def _refused(self, ctx: CallContext, why: str) -> Any:
        """The sign-in ended, refused (say why: not "not completed in time")."""
        return tool_error(
            f"The sign-in to {ctx.server_id} was refused: {why}. The call was not made; call the "
            "tool again for a new sign-in link.",
            outcome="sign_in_required",
        )

    def _link(self, ctx: CallContext, url: str, *, waited: bool = False) -> Any:
        first = "The sign-in was not completed in time. " if waited else ""
        return tool_error(
            f"{first}{ctx.server_id} needs you to sign in first: open {url} in your browser, "
            "then call the tool again.",
            outcome="sign_in_required",
            meta={_META_LINK: url},
        )
