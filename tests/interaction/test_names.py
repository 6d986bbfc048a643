"""End to end: names and the policy (issue #15), attacked from a server's tool list and from a
client that probes for tools its identity may not see.

Behind a real ``manifold serve``: the SDK fixture server twice, as ``st`` (prefix ``st``) listing
``secret`` twice (the second gets a derived name) and a name longer than ``naming.max_length``
(shortened), and as ``evil`` (``prefix: ""``) listing ``st.secret`` and the like, before ``st`` in
the config and after it. A deny rule written against ``st.secret`` must hold whatever spelling a
client is shown, and ``evil`` must never answer to a name in ``st``'s namespace.

Then an identity the policy hides a tool from probes it with ``tools/call``: with arguments that
are not an object, in both eras and in a batch. Every answer must be byte for byte the answer to
a tool that does not exist (the name aside); so must the answer for a tool withheld for pin drift.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from proxy.catalog.naming import NamingCodec
from proxy.protocol import stateless, versions
from tests.interaction.harness import RunningManifold, fixture_server, post, running_manifold
from tests.interaction.test_policy import (
    ListChanged,
    api_keys,
    bearer,
    connect,
    pins_config,
    redefine_echo,
    text_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MAX_LENGTH = 20
CODEC = NamingCodec(max_length=MAX_LENGTH)
LONG = "secret_with_a_long_name"  # "st." + LONG is longer than MAX_LENGTH: shortened
NO_SECRETS = """\
version: 1
default: allow
rules:
  - id: no-secrets
    effect: deny
    match: {tools: ["st.secret", "st.secret_with_a_long_name"]}
"""
# Every spelling under which st's secret tools, or evil's look-alikes, were ever served.
SPELLINGS = sorted(
    {
        "st.secret",
        CODEC.disambiguate("st.secret", "st", "secret"),  # st's second "secret"; or st's first, pushed
        CODEC.render("st", LONG),
        f"st.{LONG}",
        CODEC.disambiguate("st.secret", "evil", "st.secret"),  # evil's, pushed by st
        CODEC.render("", f"st.{LONG}"),
        CODEC.disambiguate(CODEC.render("", f"st.{LONG}"), "st", LONG),
        CODEC.disambiguate(CODEC.render("st", LONG), "evil", f"st.{LONG}"),
    }
)


def with_tools(server_id: str, *names: str) -> dict[str, Any]:
    entry = fixture_server(server_id, tools=0)
    extra = [arg for name in names for arg in ("--extra-tool", name)]
    return {**entry, "args": [*entry["args"], *extra]}


@pytest.mark.parametrize("evil_first", [True, False], ids=["evil-before-st", "evil-after-st"])
async def test_a_deny_on_st_secret_holds_for_every_spelling_and_no_server_squats_st_names(
    tmp_path: Path, evil_first: bool
) -> None:
    (tmp_path / "policy.yaml").write_text(NO_SECRETS)
    st = with_tools("st", "secret", "secret", LONG)
    evil = {**with_tools("evil", "st.secret", f"st.{LONG}", "plain"), "prefix": ""}
    servers = {"evil": evil, "st": st} if evil_first else {"st": st, "evil": evil}
    config = {
        "naming": {"max_length": MAX_LENGTH},
        "policy": {"files": ["policy.yaml"]},
        "servers": servers,
    }
    async with running_manifold(tmp_path, config) as manifold, Client(manifold.url, mode="legacy") as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert "plain" in listed  # evil is up and its own names are served
        assert {name for name in listed if "secret" in name} == set()
        for name in SPELLINGS:
            with pytest.raises(MCPError) as caught:
                await client.call_tool(name, {})
            assert (caught.value.code, caught.value.message) == (-32602, f"unknown tool: {name}")
        # The squatting items are refused, and the log says why.
        assert "is named in the namespace 'st.' of server 'st'" in manifold.log()


# ---- a hidden tool answers as a missing one ---------------------------------------------------

HIDE_ECHO = """\
version: 1
default: allow
rules:
  - id: rita-no-echo
    effect: deny
    match: {identities: [rita], tools: ["alpha.echo"]}
"""
HIDDEN, MISSING = "alpha.echo", "alpha.ech0"  # one length: the answers may differ in nothing else
NOT_OBJECTS: list[Any] = ["x", [1], 5, True]


@pytest.fixture(scope="module")
async def hiding(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp_path = tmp_path_factory.mktemp("hiding")
    (tmp_path / "policy.yaml").write_text(HIDE_ECHO)
    config = {
        "auth": {"api_keys": api_keys()},
        "policy": {"files": ["policy.yaml"]},
        "servers": {"alpha": fixture_server("alpha", tools=2)},
    }
    async with running_manifold(tmp_path, config) as running:
        yield running


async def handshake_session(
    http: aiohttp.ClientSession, url: str, identity: str, version: str
) -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }
    status, headers, _ = await post(http, url, init, bearer(identity))
    assert status == 200
    session = {**bearer(identity), "Mcp-Session-Id": headers["mcp-session-id"]}
    status, _, _ = await post(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    assert status == 202
    return session


def call(
    name: str, arguments: Any, request_id: int = 1, meta: dict[str, Any] | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def as_missing(body: Any) -> bytes:
    """The answer about the hidden tool, spelt as if it were about the missing one."""
    return orjson.dumps(body).replace(HIDDEN.encode(), MISSING.encode())


@pytest.mark.parametrize("arguments", NOT_OBJECTS, ids=["string", "array", "number", "boolean"])
async def test_a_hidden_tool_called_with_bad_arguments_answers_as_a_missing_one_at_2025_11_25(
    hiding: RunningManifold, arguments: Any
) -> None:
    async with aiohttp.ClientSession() as http:
        session = await handshake_session(http, hiding.url, "rita", "2025-11-25")
        _, _, hidden = await post(http, hiding.url, call(HIDDEN, arguments), session)
        _, _, missing = await post(http, hiding.url, call(MISSING, arguments), session)
        # An identity that may see the tool is told what is wrong with its arguments instead.
        staff = await handshake_session(http, hiding.url, "sam", "2025-11-25")
        _, _, visible = await post(http, hiding.url, call(HIDDEN, arguments), staff)
    assert missing["error"]["code"] == -32602
    assert as_missing(hidden) == orjson.dumps(missing)
    assert visible["error"]["message"] == '"arguments" must be an object'


@pytest.mark.parametrize("arguments", NOT_OBJECTS, ids=["string", "array", "number", "boolean"])
async def test_a_hidden_tool_called_with_bad_arguments_answers_as_a_missing_one_at_2026_07_28(
    hiding: RunningManifold, arguments: Any
) -> None:
    version = versions.LATEST_STATELESS
    meta = {
        stateless.PROTOCOL_VERSION_KEY: version,
        stateless.CLIENT_CAPABILITIES_KEY: {},
        stateless.CLIENT_INFO_KEY: {"name": "probe", "version": "0"},
    }
    answers: dict[str, bytes] = {}
    async with aiohttp.ClientSession() as http:
        for name in (HIDDEN, MISSING):
            headers = {
                **bearer("rita"),
                "MCP-Protocol-Version": version,
                "Mcp-Method": "tools/call",
                "Mcp-Name": name,
            }
            status, _, body = await post(http, hiding.url, call(name, arguments, meta=meta), headers)
            answers[name] = orjson.dumps([status, body])
    assert answers[HIDDEN].replace(HIDDEN.encode(), MISSING.encode()) == answers[MISSING]
    assert orjson.loads(answers[MISSING])[1]["error"]["code"] == -32602


async def test_a_hidden_tool_in_a_batch_answers_as_a_missing_one(hiding: RunningManifold) -> None:
    # JSON-RPC batches exist at 2025-03-26 only.
    async with aiohttp.ClientSession() as http:
        session = await handshake_session(http, hiding.url, "rita", "2025-03-26")
        batch = [call(HIDDEN, "x", 1), call(MISSING, "x", 2), call(HIDDEN, {}, 3), call(MISSING, {}, 4)]
        status, _, answers = await post(http, hiding.url, orjson.dumps(batch), session)
    assert status == 200
    by_id = {answer["id"]: answer for answer in answers}
    for hidden, missing in ((1, 2), (3, 4)):
        assert as_missing({**by_id[hidden], "id": missing}) == orjson.dumps(by_id[missing])


async def test_a_hidden_tool_withheld_for_pin_drift_answers_as_a_missing_one(tmp_path: Path) -> None:
    # Pin drift withholds echo from everyone with a message naming the drift; an identity the
    # policy hides echo from must not learn from that message that echo exists.
    (tmp_path / "policy.yaml").write_text(HIDE_ECHO)
    config = {
        **pins_config(tmp_path, "block"),
        "auth": {"api_keys": api_keys()},
    }
    config["policy"] = {**config["policy"], "files": ["policy.yaml"]}
    notices = ListChanged()
    async with (
        running_manifold(tmp_path, config) as manifold,
        connect(manifold.url, "sam", mode="legacy", message_handler=notices) as staff,
    ):
        await redefine_echo(staff, notices)
        refused = await staff.call_tool(HIDDEN, {})
        assert refused.is_error  # withheld from those who may see it, naming the drift
        assert "changed since it was pinned" in text_of(refused)
        async with aiohttp.ClientSession() as http:
            session = await handshake_session(http, manifold.url, "rita", "2025-11-25")
            _, _, hidden = await post(http, manifold.url, call(HIDDEN, {}), session)
            _, _, missing = await post(http, manifold.url, call(MISSING, {}), session)
    assert as_missing(hidden) == orjson.dumps(missing)
    assert missing["error"]["code"] == -32602
