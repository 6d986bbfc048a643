"""End to end, approval by somebody else (``approver: {role: r}``): the caller's SDK client gets
a URL-mode elicitation pointing at Manifold's approval page, the call waits, and an approver
decides on the real page in headless Chromium (driven over the DevTools protocol).

Written as the attack: a decision posted from another site, without the page's token, with a
bad credential, by someone without the role, by the caller approving their own call; a retry
replaying an approval; a caller whose client cannot open a link; nobody deciding in time.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitRequestParams, ElicitResult, TextContent

from proxy.pipeline.bridge.state import arguments_digest
from proxy.protocol import stateless, versions
from tests.interaction.browser import chromium, headless
from tests.interaction.harness import RunningManifold, fixture_server, post, running_manifold
from tests.ratelimit.redis_server import REDIS_SERVER, running_redis

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

V = versions.LATEST_STATELESS
KEYS = {
    "alice": ("mfd_alice-approvals-key-0123456789abcdefghijkl", ["staff"]),
    "mona": ("mfd_mona-approvals-key-0123456789abcdefghijklm", ["finance-managers"]),
    "eve": ("mfd_eve-approvals-key-0123456789abcdefghijklmn", ["staff"]),
    "frank": ("mfd_frank-approvals-key-0123456789abcdefghijk", ["staff", "finance-managers"]),
    "olga": ("mfd_olga-approvals-key-0123456789abcdefghijklm", ["observer"]),
}
POLICY = """\
version: 1
default: allow
rules:
  - id: refunds-need-a-manager
    effect: confirm
    description: money leaves the company
    match: {tools: ["fx.add"]}
    confirm: {approver: {role: finance-managers}, timeout: 60}
  - id: quick-approval
    effect: confirm
    match: {tools: ["fx.tool_000"]}
    confirm: {approver: {role: finance-managers}, timeout: 2}
"""


def _stored(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("approvals")
    (tmp / "policy.yaml").write_text(POLICY)
    config = {
        "auth": {
            "api_keys": [{"name": n, "key": _stored(k), "roles": r} for n, (k, r) in KEYS.items()],
        },
        "servers": {"fx": fixture_server("fx", tools=2)},
        "policy": {
            "files": [str(tmp / "policy.yaml")],
            "pins": {"mode": "off"},
            "audit": {"path": str(tmp / "audit.jsonl")},
        },
    }
    async with running_manifold(tmp, config) as running:
        yield running


class Caller:
    """The caller's elicitation callback: takes the approval link, says it opened it."""

    def __init__(self, action: str = "accept") -> None:
        self.action = action
        self.asked = anyio.Event()
        self.params: ElicitRequestParams | None = None

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.params = params
        self.asked.set()
        return ElicitResult(action=self.action)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        assert self.params is not None
        url = getattr(self.params, "url", None)
        assert isinstance(url, str)
        return url


@asynccontextmanager
async def client_as(url: str, who: str, mode: str, caller: Caller) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {KEYS[who][0]}"}
    options: dict[str, Any] = {"cache": None} if mode == V else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(
            streamable_http_client(url, http_client=http), mode=mode, elicitation_callback=caller, **options
        ) as client,
    ):
        yield client


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def _how(result: Any) -> str:
    assert result.is_error
    meta = result.model_dump(by_alias=True)["_meta"]
    assert meta["dev.manifold/outcome"] == "not_confirmed"
    return str(meta["dev.manifold/confirmation"])


async def _form_token(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get(url) as response:
        assert response.status == 200
        page = await response.text()
    return _token_in(page)


def _token_in(page: str) -> str:
    found = re.search(r'name="token" value="([^"]+)"', page)
    assert found is not None, page
    return found[1]


def _origin_of(url: str) -> str:
    return url.split("/approvals/")[0]


async def _signed_in(http: aiohttp.ClientSession, url: str, who: str) -> str:
    """The decision token the page gives ``who`` once their credential is accepted."""
    status, page = await _post_form(
        http, url, {"token": await _form_token(http, url), "step": "identify", "credential": KEYS[who][0]}
    )
    assert status == 200, page
    assert 'name="decision"' in page
    return _token_in(page)


async def _post_form(
    http: aiohttp.ClientSession, url: str, form: dict[str, str], headers: dict[str, str] | None = None
) -> tuple[int, str]:
    headers = {"Origin": _origin_of(url)} if headers is None else headers
    async with http.post(url, data=form, headers=headers) as response:
        return response.status, await response.text()


async def _decide(
    http: aiohttp.ClientSession,
    url: str,
    who: str | None,
    decision: str = "approve",
    *,
    token: str | None = None,
    origin: str | None = "same",
    credential: str | None = None,
) -> tuple[int, str]:
    """Sign in on the page's first form as ``who`` (or with ``credential``), then POST the
    decision form, both as a browser on ``origin`` would ("same": the page's own); ``token``
    replaces the decision token the first form gave."""
    headers = {}
    if origin is not None:
        headers["Origin"] = _origin_of(url) if origin == "same" else origin
    identify = {
        "token": await _form_token(http, url),
        "step": "identify",
        "credential": credential or (KEYS[who][0] if who else ""),
    }
    status, page = await _post_form(http, url, identify, headers)
    if token is None:
        if status != 200 or 'name="decision"' not in page:
            return status, page
        token = _token_in(page)
    return await _post_form(http, url, {"token": token, "step": "decide", "decision": decision}, headers)


@asynccontextmanager
async def waiting_call(
    manifold: RunningManifold, who: str, mode: str, tool: str = "fx.add", action: str = "accept"
) -> AsyncIterator[tuple[Caller, dict[str, Any]]]:
    """A call of ``tool`` by ``who`` that waits for its approval; the outcome lands in the dict
    once the block's end has waited for it."""
    caller = Caller(action)
    outcome: dict[str, Any] = {}
    async with client_as(manifold.url, who, mode, caller) as client, anyio.create_task_group() as tg:

        async def call() -> None:
            outcome["result"] = await client.call_tool(
                tool, {"a": 2, "b": 40, "api_key": "k-0123456789abcdef"}
            )

        tg.start_soon(call)
        with anyio.fail_after(30):
            await caller.asked.wait()
        yield caller, outcome


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (make system-deps)")
@pytest.mark.parametrize("mode", ["legacy", V])
async def test_an_approver_approves_on_the_page_in_chromium_while_the_caller_waits(
    manifold: RunningManifold, mode: str, tmp_path: Path
) -> None:
    async with waiting_call(manifold, "alice", mode) as (caller, outcome):
        assert caller.params is not None
        assert caller.params.mode == "url"
        assert "finance-managers" in caller.params.message
        async with headless(tmp_path / "profile") as browser:
            await browser.open(caller.url)
            shown = await browser.evaluate("document.body.innerText")
            assert "fx.add" in shown
            assert "alice" in shown
            assert "money leaves the company" in shown
            assert "a: 2" in shown
            assert "k-0123456789abcdef" not in shown  # redacted like a log line
            assert "outcome" not in outcome  # still waiting for the approver
            await browser.type_into("#credential", KEYS["mona"][0])
            await browser.click_and_wait("button.identify")
            assert "Deciding as mona" in await browser.evaluate("document.body.innerText")
            if mode == "legacy":  # looked at by eye once; kept out of the repository
                shot = await browser.screenshot()
                await anyio.Path(tmp_path / "approval-page.png").write_bytes(shot)
            await browser.click_and_wait("button.approve")
            decision = await browser.evaluate("document.getElementById('decision').textContent")
            assert decision.startswith("Approved by mona at ")
    assert _text(outcome["result"]) == "42"


ATTACK = """<!doctype html><html><body>
<form method="post" action="{url}">{fields}</form>
<script>document.forms[0].submit()</script>
</body></html>"""


@asynccontextmanager
async def attacker_page(html_of: dict[str, str]) -> AsyncIterator[str]:
    """Another site on this machine (another loopback port): serves each path's HTML."""
    from aiohttp import web

    async def serve(request: web.Request) -> web.Response:
        return web.Response(text=html_of[request.path], content_type="text/html")

    app = web.Application()
    app.router.add_get("/{name}", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _fields(form: dict[str, str]) -> str:
    return "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in form.items())


@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (make system-deps)")
async def test_a_page_on_another_local_port_auto_submitting_a_decision_is_refused_in_chromium(
    manifold: RunningManifold, tmp_path: Path
) -> None:
    """The CSRF of issue #27: a page on another loopback port (same-site, an origin /mcp would
    take) makes the approver's browser post a decision. Neither the one-form shape (the page's
    token, anybody's to read, with a credential) nor a decision token signed for the approver
    gets through: only the page itself may post."""
    async with (
        waiting_call(manifold, "alice", "legacy") as (caller, outcome),
        aiohttp.ClientSession() as http,
    ):
        url = caller.url
        credential_form = {
            "token": await _form_token(http, url),
            "step": "identify",
            "credential": KEYS["mona"][0],
            "decision": "approve",
        }
        decision_form = {
            "token": await _signed_in(http, url, "mona"),
            "step": "decide",
            "decision": "approve",
        }
        pages = {
            "/one-form": ATTACK.format(url=url, fields=_fields(credential_form)),
            "/decision": ATTACK.format(url=url, fields=_fields(decision_form)),
        }
        async with attacker_page(pages) as evil, headless(tmp_path / "profile") as browser:
            for path in pages:
                await browser.open(evil + path)  # loads, submits itself, lands on Manifold's answer
                with anyio.fail_after(10):
                    while "approvals" not in (await browser.evaluate("location.href")):  # noqa: ASYNC110
                        await anyio.sleep(0.05)  # the auto-submit's navigation: no event to wait on here
                    while not (shown := await browser.evaluate("document.body && document.body.innerText")):  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                assert "Forbidden" in shown, shown
                async with http.get(url) as response:
                    page = await response.text()
                assert "Approved by" not in page
                assert 'name="credential"' in page  # still waiting for a real decision
        status, page = await _decide(http, url, "mona", "reject")
        assert (status, "Rejected by mona" in page) == (200, True)
    assert _how(outcome["result"]) == "rejected"


async def test_a_decision_token_decides_only_its_approval_and_only_from_the_page_itself(
    manifold: RunningManifold,
) -> None:
    async with (
        waiting_call(manifold, "alice", "legacy") as (first, first_outcome),
        waiting_call(manifold, "eve", "legacy") as (second, second_outcome),
        aiohttp.ClientSession() as http,
    ):
        token = await _signed_in(http, first.url, "mona")
        decide = {"token": token, "step": "decide", "decision": "approve"}
        own = _origin_of(first.url)
        port = int(own.rsplit(":", 1)[1])
        elsewhere = {"Origin": f"http://127.0.0.1:{port + 1}"}  # allowed for /mcp, not here
        same_site = {"Origin": own, "Sec-Fetch-Site": "same-site"}
        for headers in (elsewhere, same_site, {"Origin": own, "Sec-Fetch-Site": "cross-site"}):
            status, page = await _post_form(http, first.url, decide, headers)
            assert (status, "must come from the approval page" in page) == (403, True), headers
        status, page = await _post_form(http, second.url, decide)  # signed for the first approval
        assert (status, "out of date" in page) == (403, True)
        tampered = token.replace(token[5], "A" if token[5] != "A" else "B", 1)
        status, page = await _post_form(http, first.url, {**decide, "token": tampered})
        assert (status, "out of date" in page) == (403, True)
        for url in (first.url, second.url):
            async with http.get(url) as response:
                assert "Approved by" not in await response.text()
        status, page = await _post_form(http, first.url, decide)
        assert (status, "Approved by mona" in page) == (200, True)
        status, page = await _decide(http, second.url, "mona", "reject")
        assert "Rejected by mona" in page
    assert _text(first_outcome["result"]) == "42"
    assert _how(second_outcome["result"]) == "rejected"


async def _confirmations(manifold: RunningManifold, outcome: str) -> float:
    headers = {"Authorization": f"Bearer {KEYS['olga'][0]}"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        http.get(manifold.url.replace("/mcp", "/metrics")) as got,
    ):
        assert got.status == 200
        text = await got.text()
    prefix = f'manifold_confirmations_total{{outcome="{outcome}"}} '
    return sum(float(line.removeprefix(prefix)) for line in text.splitlines() if line.startswith(prefix))


def _ended(records: list[dict[str, Any]], arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """How each question about a call with these arguments ended (its confirmation records,
    less "asked"): other tests' questions end meanwhile too."""
    digest = arguments_digest(arguments)
    return [
        r
        for r in records
        if r.get("event") == "confirmation"
        and r.get("arguments_digest") == digest
        and r.get("outcome") != "asked"
    ]


async def test_a_caller_who_gives_up_ends_the_question_as_abandoned_once(manifold: RunningManifold) -> None:
    before = await _confirmations(manifold, "abandoned")
    audit = Path(manifold.log_path).parent / "audit.jsonl"
    seen = len(_audit(audit))
    caller = Caller()
    async with (
        client_as(manifold.url, "alice", "legacy", caller) as client,
        aiohttp.ClientSession() as http,
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "fx.add", {"a": 5, "b": 5005})
            with anyio.fail_after(30):
                await caller.asked.wait()
            token = await _signed_in(http, caller.url, "mona")  # the approver is about to decide
            tg.cancel_scope.cancel()  # the caller gives up: notifications/cancelled
        with anyio.fail_after(10):
            while True:
                async with http.get(caller.url) as response:
                    page = await response.text()
                if "Abandoned" in page:
                    break
                await anyio.sleep(0.05)  # the cancellation travels to Manifold: no event here
        assert "<form" not in page
        assert "alice gave up waiting" in page
        status, page = await _post_form(
            http, caller.url, {"token": token, "step": "decide", "decision": "approve"}
        )
        assert (status, "changed nothing" in page, "Approved by" in page) == (409, True, False)
    with anyio.fail_after(10):  # a worker thread writes the audit log, a moment after the answer
        while not (ended := _ended(_audit(audit)[seen:], {"a": 5, "b": 5005})):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    assert [r["outcome"] for r in ended] == ["abandoned"], ended
    assert await _confirmations(manifold, "abandoned") == before + 1


async def test_a_rejection_on_the_page_refuses_the_call_naming_the_approver(
    manifold: RunningManifold,
) -> None:
    async with (
        waiting_call(manifold, "alice", "legacy") as (caller, outcome),
        aiohttp.ClientSession() as http,
    ):
        status, page = await _decide(http, caller.url, "mona", "reject")
        assert status == 200
        assert "Rejected by mona" in page
    assert _how(outcome["result"]) == "rejected"
    assert "mona rejected it" in _text(outcome["result"])
    audit = Path(manifold.log_path).parent / "audit.jsonl"
    # A worker thread writes the audit log, a moment after the answer; other tests' records
    # (this module's Manifold is shared) may land after this one's: look for alice's.
    with anyio.fail_after(10):
        while not (  # noqa: ASYNC110 (a file has no event to wait on)
            decided := [
                (r["approver"], r["how"])
                for r in _audit(audit)
                if (r.get("outcome"), r.get("identity"), r.get("approver")) == ("rejected", "alice", "mona")
            ]
        ):
            await anyio.sleep(0.05)
    assert decided[-1] == ("mona", "approval_page")


def _audit(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    ("who", "options", "status", "says"),
    [
        pytest.param("mona", {"origin": None}, 403, "must come from the approval page", id="no-origin"),
        pytest.param("mona", {"origin": "https://evil.example"}, 403, "Origin", id="cross-site"),
        pytest.param("mona", {"token": "0" * 64}, 403, "out of date", id="forged-token"),
        pytest.param(None, {"credential": "mfd_not-a-key"}, 401, "not accepted", id="bad-credential"),
        pytest.param("eve", {}, 403, "does not hold the role", id="without-the-role"),
        pytest.param("frank", {}, 403, "cannot approve your own call", id="own-call"),
    ],
)
async def test_a_decision_that_is_not_an_approvers_changes_nothing(
    manifold: RunningManifold, who: str | None, options: dict[str, Any], status: int, says: str
) -> None:
    caller_name = "frank" if who == "frank" else "alice"
    async with (
        waiting_call(manifold, caller_name, "legacy") as (caller, outcome),
        aiohttp.ClientSession() as http,
    ):
        got, page = await _decide(http, caller.url, who, **options)
        assert (got, says in page) == (status, True)
        async with http.get(caller.url) as response:
            assert "Approved by" not in await response.text()
        status, page = await _decide(http, caller.url, "mona", "reject")  # end the wait
        assert "Rejected by mona" in page
    assert _how(outcome["result"]) == "rejected"


async def test_the_page_is_refused_to_a_host_not_allowed(manifold: RunningManifold) -> None:
    async with (
        waiting_call(manifold, "alice", "legacy") as (caller, outcome),
        aiohttp.ClientSession() as http,
    ):
        async with http.get(caller.url, headers={"Host": "evil.example"}) as response:
            assert response.status == 403
        await _decide(http, caller.url, "mona", "reject")
    assert _how(outcome["result"]) == "rejected"


async def test_an_unknown_approval_looks_like_an_expired_one(manifold: RunningManifold) -> None:
    url = manifold.url.removesuffix("/mcp") + "/approvals/nope"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        assert response.status == 404
        assert "not found" in await response.text()


async def test_nobody_deciding_in_time_refuses_the_call(manifold: RunningManifold) -> None:
    async with waiting_call(manifold, "alice", "legacy", tool="fx.tool_000") as (_, outcome):
        pass  # the rule's timeout is 2 s
    assert _how(outcome["result"]) == "timeout"


async def test_a_caller_who_will_not_open_the_link_is_refused(manifold: RunningManifold) -> None:
    async with waiting_call(manifold, "alice", "legacy", action="decline") as (_, outcome):
        pass
    assert _how(outcome["result"]) == "declined"


# ---- 2026-07-28, raw: the state names the approval, and is good once --------------------------


def _call(
    arguments: dict[str, Any],
    responses: Any = None,
    state: str | None = None,
    url_mode: bool = True,
    tool: str = "fx.add",
) -> Any:
    params: dict[str, Any] = {
        "name": tool,
        "arguments": arguments,
        "_meta": {
            stateless.PROTOCOL_VERSION_KEY: V,
            stateless.CLIENT_CAPABILITIES_KEY: {"elicitation": {"form": {}, "url": {}} if url_mode else {}},
            stateless.CLIENT_INFO_KEY: {"name": "raw", "version": "0"},
        },
    }
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


async def _post(http: aiohttp.ClientSession, manifold: RunningManifold, body: Any) -> tuple[int, Any]:
    headers = {
        "MCP-Protocol-Version": V,
        "Mcp-Method": "tools/call",
        "Mcp-Name": body["params"]["name"],
        "Authorization": f"Bearer {KEYS['alice'][0]}",
    }
    status, _, answer = await post(http, manifold.url, body, headers)
    return status, answer


async def test_an_approved_stateless_retry_runs_once_and_its_replay_is_refused(
    manifold: RunningManifold,
) -> None:
    arguments = {"a": 1, "b": 1}
    async with aiohttp.ClientSession() as http:
        status, first = await _post(http, manifold, _call(arguments))
        assert status == 200
        request = first["result"]["inputRequests"]["manifold-confirm"]
        assert request["params"]["mode"] == "url"
        url, state = request["params"]["url"], first["result"]["requestState"]
        assert (await _decide(http, url, "mona"))[0] == 200
        opened = {"manifold-confirm": {"action": "accept"}}
        status, done = await _post(http, manifold, _call(arguments, opened, state))
        assert (status, done["result"]["content"][0]["text"]) == (200, "2")
        status, again = await _post(http, manifold, _call(arguments, opened, state))
    assert (status, again["error"]["code"]) == (400, -32602)


async def test_a_stateless_caller_who_never_comes_back_ends_the_question_as_abandoned_once(
    manifold: RunningManifold,
) -> None:
    """A 2026-07-28 caller is asked (input_required with the page's link) and never retries: once
    the deadline (2 s here) and the grace pass, the question ends as abandoned, once."""
    before = await _confirmations(manifold, "abandoned")
    audit = Path(manifold.log_path).parent / "audit.jsonl"
    seen = len(_audit(audit))
    async with aiohttp.ClientSession() as http:
        status, first = await _post(http, manifold, _call({"a": 3, "b": 4004}, tool="fx.tool_000"))
        assert status == 200
        url = first["result"]["inputRequests"]["manifold-confirm"]["params"]["url"]
        with anyio.fail_after(30):  # 2 s to the deadline, GRACE after it
            while True:
                async with http.get(url) as response:
                    page = await response.text()
                if "Abandoned" in page:
                    break
                await anyio.sleep(0.2)  # a deadline on the wall clock: nothing to wait on
        assert "<form" not in page
    with anyio.fail_after(10):
        while not (ended := _ended(_audit(audit)[seen:], {"a": 3, "b": 4004})):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    assert [(r["outcome"], r["how"]) for r in ended] == [("abandoned", "approval_page")], ended
    assert await _confirmations(manifold, "abandoned") == before + 1


async def test_a_stateless_client_without_url_elicitation_is_refused(manifold: RunningManifold) -> None:
    async with aiohttp.ClientSession() as http:
        status, answer = await _post(http, manifold, _call({"a": 1, "b": 2}, url_mode=False))
    assert status == 200
    assert answer["result"]["_meta"]["dev.manifold/confirmation"] == "unavailable"


# ---- two replicas sharing Redis: the page on one, the waiting call on the other ----------------


@pytest.fixture(scope="module")
async def replicas(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[list[RunningManifold]]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (needed for approvals shared by replicas)")
    tmp = tmp_path_factory.mktemp("approval-replicas")
    (tmp / "policy.yaml").write_text(POLICY)
    for directory in ("redis", "one", "two"):
        (tmp / directory).mkdir()
    async with running_redis(tmp / "redis") as redis:
        config = {
            "auth": {"api_keys": [{"name": n, "key": _stored(k), "roles": r} for n, (k, r) in KEYS.items()]},
            "servers": {"fx": fixture_server("fx", tools=2)},
            "sessions": {"secret": "approval-replicas-share-this-secret-32+"},
            "rate_limits": {"backend": "redis", "redis_url": redis.url},
            "policy": {"files": [str(tmp / "policy.yaml")], "pins": {"mode": "off"}},
        }
        async with (
            running_manifold(tmp / "one", config) as one,
            running_manifold(tmp / "two", config) as two,
        ):
            yield [one, two]


def _on(replica: RunningManifold, url: str) -> str:
    return replica.url.removesuffix("/mcp") + "/approvals/" + url.rsplit("/approvals/", 1)[1]


async def test_a_decision_on_one_replica_releases_the_call_waiting_on_another(
    replicas: list[RunningManifold],
) -> None:
    one, two = replicas
    async with waiting_call(one, "alice", "legacy") as (caller, outcome), aiohttp.ClientSession() as http:
        status, page = await _decide(http, _on(two, caller.url), "mona")
        assert (status, "Approved by mona" in page) == (200, True)
    assert _text(outcome["result"]) == "42"


async def test_a_stateless_retry_on_another_replica_is_approved_once(replicas: list[RunningManifold]) -> None:
    one, two = replicas
    arguments = {"a": 20, "b": 22}
    opened = {"manifold-confirm": {"action": "accept"}}
    async with aiohttp.ClientSession() as http:
        status, first = await _post(http, one, _call(arguments))
        request = first["result"]["inputRequests"]["manifold-confirm"]
        url, state = request["params"]["url"], first["result"]["requestState"]
        assert (await _decide(http, _on(two, url), "mona"))[0] == 200
        status, done = await _post(http, two, _call(arguments, opened, state))
        assert (status, done["result"]["content"][0]["text"]) == (200, "42")
        status, again = await _post(http, one, _call(arguments, opened, state))  # replayed elsewhere
    assert (status, again["error"]["code"]) == (400, -32602)
