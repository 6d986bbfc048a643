"""The sign-in stage, as a hostile caller meets it: nobody reaches an ``oauth`` server without a
token of their own, however they retry."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, cast

import pytest

from proxy.credentials.oauth_client import OAuthUnusable
from proxy.credentials.on_behalf import OnBehalf, SignIn
from proxy.pipeline.bridge.state import RequestStates
from proxy.pipeline.context import CallContext
from proxy.pipeline.stages.sign_in import SIGN_IN_KEY, SignInStage
from proxy.policy.model import Identity

pytestmark = pytest.mark.anyio

ALICE = Identity("alice", frozenset(), "oauth", "https://idp", "alice")
BOB = Identity("bob", frozenset(), "oauth", "https://idp", "bob")
URL_ELICITATION: dict[str, Any] = {"elicitation": {"url": {}}}


class Flow:
    """An OnBehalf stand-in: who holds a token, and the sign-ins begun."""

    servers: Mapping[str, object] = {"gh": object()}

    def __init__(self) -> None:
        self.holders: set[tuple[str, ...]] = set()
        self.begun = 0
        self.signed_in_on_ask = False
        self.refused: dict[str, str] = {}  # state -> why its callback was refused

    async def access_token(self, identity: Identity, server_id: str) -> str | None:
        return "token" if identity.key in self.holders else None

    async def begin(self, identity: Identity, server_id: str) -> SignIn:
        self.begun += 1
        return SignIn(f"https://as.example/auth?state=s{self.begun}", f"s{self.begun}", 1e12)

    async def wait(
        self, identity: Identity, server_id: str, timeout: float, state: str | None = None
    ) -> bool:
        return identity.key in self.holders

    def refusal(self, state: str) -> str | None:
        return self.refused.pop(state, None)


class Caller:
    def __init__(
        self, identity: Identity, *, stateless: bool, capabilities: dict[str, Any], answer: Any = None
    ):
        self.identity = identity
        self.stateless = stateless
        self.capabilities = capabilities
        self.answer = answer
        self.asked: list[tuple[str, Any]] = []
        self.notified: list[Any] = []
        self.flow: Flow | None = None

    def supports(self, method: str, params: dict[str, Any] | None) -> bool:
        from proxy.clients.session import declared

        return declared(self.capabilities, method, params)

    async def request(self, method: str, params: Any) -> Any:
        self.asked.append((method, params))
        if self.flow is not None and self.answer == {"action": "accept"}:
            self.flow.holders.add(self.identity.key)  # the user signs in meanwhile
        return self.answer

    def notify(self, message: Any) -> None:
        self.notified.append(message)


def context(caller: Caller, params: Mapping[str, Any] | None = None, server_id: str = "gh") -> CallContext:
    return CallContext(
        cast(Any, caller), 1, "tools/call", server_id, "gh.whoami", params or {"name": "whoami"}
    )


def stage(flow: Flow) -> SignInStage:
    return SignInStage(cast(OnBehalf, flow), RequestStates(os.urandom(32), ttl=600))


class Next:
    def __init__(self) -> None:
        self.calls: list[CallContext] = []

    async def __call__(self, ctx: CallContext) -> Any:
        self.calls.append(ctx)
        return {"content": [], "isError": False}


async def test_a_server_in_another_mode_is_not_touched() -> None:
    flow, forward = Flow(), Next()
    caller = Caller(ALICE, stateless=False, capabilities={})
    await stage(flow)(context(caller, server_id="other"), forward)
    assert len(forward.calls) == 1
    assert flow.begun == 0


async def test_a_stateless_caller_without_a_token_is_asked_and_its_retry_goes_on_once_signed_in() -> None:
    flow, forward = Flow(), Next()
    signin = stage(flow)
    caller = Caller(ALICE, stateless=True, capabilities=URL_ELICITATION)
    first = await signin(context(caller), forward)
    assert first["resultType"] == "input_required"
    question = first["inputRequests"][SIGN_IN_KEY]
    assert question["method"] == "elicitation/create"
    assert question["params"]["mode"] == "url"
    assert question["params"]["url"].startswith("https://as.example/auth?state=")
    retry = {
        "name": "whoami",
        "requestState": first["requestState"],
        "inputResponses": {SIGN_IN_KEY: {"action": "accept"}},
    }
    # Retried before signing in (it did not complete): refused, nothing forwarded.
    again = await signin(context(caller, retry), forward)
    assert again["isError"] is True
    assert again["_meta"]["dev.manifold/outcome"] == "sign_in_required"
    assert forward.calls == []
    flow.holders.add(ALICE.key)
    await signin(context(caller, retry), forward)
    [forwarded] = forward.calls
    assert dict(forwarded.params) == {"name": "whoami"}  # Manifold's state and answers stripped


async def test_a_forged_or_borrowed_request_state_does_not_skip_the_sign_in() -> None:
    flow, forward = Flow(), Next()
    signin = stage(flow)
    alice = Caller(ALICE, stateless=True, capabilities=URL_ELICITATION)
    flow.holders.add(ALICE.key)
    bob = Caller(BOB, stateless=True, capabilities=URL_ELICITATION)
    asked = await signin(context(bob), forward)
    for state in (asked["requestState"] + "x", "forged"):
        # Bob's own state, altered; made up: neither is a token for Bob.
        result = await signin(context(bob, {"name": "whoami", "requestState": state}), forward)
        assert result["resultType"] == "input_required"
    # His real one, without having signed in: refused.
    result = await signin(context(bob, {"name": "whoami", "requestState": asked["requestState"]}), forward)
    assert result["isError"] is True
    assert forward.calls == []
    # Bob's state on Alice's request is not Manifold's for her: passed on as it is, to be refused
    # where server states are checked; she has a token, so the call may go on.
    await signin(context(alice, {"name": "whoami", "requestState": asked["requestState"]}), forward)
    assert forward.calls[0].params["requestState"] == asked["requestState"]


async def test_a_handshake_client_is_asked_with_a_url_elicitation_and_the_call_goes_on() -> None:
    flow, forward = Flow(), Next()
    caller = Caller(ALICE, stateless=False, capabilities=URL_ELICITATION, answer={"action": "accept"})
    caller.flow = flow
    await stage(flow)(context(caller), forward)
    [(method, params)] = caller.asked
    assert method == "elicitation/create"
    assert params["mode"] == "url"
    assert len(forward.calls) == 1
    [done] = caller.notified
    assert done["method"] == "notifications/elicitation/complete"
    assert done["params"]["elicitationId"] == params["elicitationId"]


async def test_a_declined_sign_in_makes_no_call() -> None:
    flow, forward = Flow(), Next()
    caller = Caller(ALICE, stateless=False, capabilities=URL_ELICITATION, answer={"action": "decline"})
    result = await stage(flow)(context(caller), forward)
    assert result["isError"] is True
    assert result["_meta"]["dev.manifold/outcome"] == "sign_in_required"
    assert forward.calls == []


async def test_a_client_that_cannot_be_asked_gets_the_link() -> None:
    flow, forward = Flow(), Next()
    options: list[dict[str, Any]] = [{}, {"elicitation": {"form": {}}}]
    for capabilities in options:  # form mode only: no URLs there
        caller = Caller(ALICE, stateless=False, capabilities=capabilities)
        result = await stage(flow)(context(caller), forward)
        assert result["isError"] is True
        link = result["_meta"]["dev.manifold/sign_in"]
        assert link in result["content"][0]["text"]
        assert caller.asked == []
    assert forward.calls == []


async def test_a_sign_in_refused_at_the_callback_says_why_not_that_it_was_too_slow() -> None:
    flow, forward = Flow(), Next()
    flow.refused["s1"] = "you signed in as somebody else than the user who asked"
    caller = Caller(ALICE, stateless=False, capabilities=URL_ELICITATION, answer={"action": "accept"})
    result = await stage(flow)(context(caller), forward)
    text = result["content"][0]["text"]
    assert text.startswith("The sign-in to gh was refused: you signed in as somebody else")
    assert "not completed in time" not in text
    assert forward.calls == []


async def test_a_stateless_retry_after_a_refused_sign_in_says_why() -> None:
    flow, forward = Flow(), Next()
    signin = stage(flow)
    caller = Caller(ALICE, stateless=True, capabilities=URL_ELICITATION)
    first = await signin(context(caller), forward)
    flow.refused["s1"] = "the authorization code was refused: invalid_grant"
    retry = {
        "name": "whoami",
        "requestState": first["requestState"],
        "inputResponses": {SIGN_IN_KEY: {"action": "accept"}},
    }
    again = await signin(context(caller, retry), forward)
    assert "was refused: the authorization code was refused: invalid_grant" in again["content"][0]["text"]


class Unusable(Flow):
    async def begin(self, identity: Identity, server_id: str) -> SignIn:
        raise OAuthUnusable(
            "https://as.example/.well-known/oauth-authorization-server: PKCE with S256 is not supported"
        )


async def test_an_authorization_server_without_pkce_is_reported_as_unusable_not_unreachable() -> None:
    caller = Caller(ALICE, stateless=False, capabilities=URL_ELICITATION)
    result = await stage(Unusable())(context(caller), Next())
    text = result["content"][0]["text"]
    assert "cannot be used to sign you in" in text
    assert "PKCE with S256 is not supported" in text
    assert "try again later" not in text
