"""Discovery's state in memory: answers from the caller's own view, an index per view shared by
identities that see the same tools, promotions per session, bounded, told to that session alone."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.clients.session import ClientSession, InboundRequest
from proxy.config.discovery import DiscoverySettings
from proxy.core.errors import InvalidParams
from proxy.enforce.access import Access, ServedTools
from proxy.policy.model import Identity
from proxy.views.discovery import Call, Discovery
from tests.enforce.test_access import ALICE, ROOT, make_access, tools

META = ["manifold.search_tools", "manifold.describe_tools", "manifold.call_tool"]
ROOT2 = Identity("root2", frozenset({"admin"}), "api_key")


def setup(tmp_path: Path, **settings: Any) -> tuple[Discovery, Access, ServedTools]:
    access = make_access(tmp_path)
    discovery = Discovery(DiscoverySettings(**{"mode": "search", **settings}), access, separator=".")
    return discovery, access, access.serve_tools(tools())


def request(identity: Identity, session_id: str = "s1", *, initialized: bool = True) -> InboundRequest:
    session = ClientSession(id=session_id, transport="http", identity=identity, initialized=initialized)
    return InboundRequest(session)


def decoded(result: Any) -> Any:
    assert not result["isError"], result
    return json.loads(result["content"][0]["text"])


def test_the_list_is_the_meta_tools_named_with_the_separator(tmp_path: Path) -> None:
    discovery, _, served = setup(tmp_path)
    assert [t["name"] for t in discovery.page(served, request(ROOT), None)["tools"]] == META
    dunder = Discovery(DiscoverySettings(mode="search"), make_access(tmp_path), separator="__")
    assert [t["name"] for t in dunder.tools(served, request(ROOT))] == [m.replace(".", "__") for m in META]
    with pytest.raises(InvalidParams, match="invalid cursor"):
        discovery.page(served, request(ROOT), "a-cursor")


def test_search_and_describe_answer_from_the_callers_view_and_hidden_answers_as_missing(
    tmp_path: Path,
) -> None:
    discovery, _, served = setup(tmp_path)
    search = "manifold.search_tools"
    # root sees everything but *.secret_* (hidden by a deny that is not shown).
    assert "gh.secret_dump" not in [
        t["name"]
        for t in decoded(discovery.answer(served, request(ROOT), search, {"query": "secret dump"}))["tools"]
    ]
    described = decoded(
        discovery.answer(
            served,
            request(ROOT),
            "manifold.describe_tools",
            {"names": ["gh.secret_dump", "gh.nope", "gh.get_issue"]},
        )
    )
    assert [t["name"] for t in described["tools"]] == ["gh.get_issue"]
    assert described["unknown"] == ["gh.secret_dump", "gh.nope"]
    # alice (reader) sees the read-only tools, and delete_repo (denied, but shown: show: true).
    found = decoded(discovery.answer(served, request(ALICE), search, {"query": "issue repo file"}))
    assert {t["name"] for t in found["tools"]} == {"gh.get_issue", "fs.read_file", "gh.delete_repo"}


def test_call_tool_is_handed_back_as_a_call_and_bad_arguments_are_a_tool_error(tmp_path: Path) -> None:
    discovery, _, served = setup(tmp_path)
    call = discovery.answer(
        served, request(ROOT), "manifold.call_tool", {"name": "gh.get_issue", "arguments": {"n": 1}}
    )
    assert call == Call("gh.get_issue", {"n": 1})
    refused = discovery.answer(served, request(ROOT), "manifold.call_tool", {"arguments": {}})
    assert isinstance(refused, dict)
    assert refused["isError"]
    assert refused["_meta"] == {"dev.manifold/outcome": "invalid_arguments"}


def test_identities_with_the_same_view_share_one_index(tmp_path: Path) -> None:
    discovery, _, served = setup(tmp_path)
    first = discovery._indexed(served, request(ROOT))
    assert discovery._indexed(served, request(ROOT2)) is first
    assert discovery._indexed(served, request(ALICE)) is not first
    assert discovery._indexed(served, request(ROOT)) is first


def test_promote_adds_found_tools_to_that_session_only_bounded_and_tells_it(tmp_path: Path) -> None:
    discovery, _, served = setup(tmp_path, mode="promote", max_promoted=2)
    mine, other = request(ROOT, "s1"), request(ROOT, "s2")
    assert isinstance(mine.session, ClientSession)
    discovery.answer(served, mine, "manifold.search_tools", {"query": "get issue", "limit": 1})
    assert [t["name"] for t in discovery.tools(served, mine)] == [*META, "gh.get_issue"]
    assert [t["name"] for t in discovery.tools(served, other)] == META
    assert mine.session.standalone.pending  # notifications/tools/list_changed
    assert not other.session.standalone.pending  # type: ignore[union-attr]
    discovery.answer(served, mine, "manifold.search_tools", {"query": "create issue", "limit": 1})
    discovery.answer(served, mine, "manifold.search_tools", {"query": "read file", "limit": 1})
    assert [t["name"] for t in discovery.tools(served, mine)] == [*META, "gh.create_issue", "fs.read_file"]


@pytest.mark.anyio
async def test_an_ended_session_s_promotions_are_forgotten(tmp_path: Path) -> None:
    discovery, _, served = setup(tmp_path, mode="promote")
    mine = request(ROOT)
    discovery.answer(served, mine, "manifold.search_tools", {"query": "get issue", "limit": 1})
    assert isinstance(mine.session, ClientSession)
    await discovery.ended(mine.session)
    assert discovery._promoted == {}


def test_every_answer_is_told_with_a_fixed_tool_label_and_outcome_whatever_the_separator(
    tmp_path: Path,
) -> None:
    told: list[tuple[str, str]] = []
    access = make_access(tmp_path)
    discovery = Discovery(
        DiscoverySettings(mode="search"),
        access,
        separator="__",
        on_answer=lambda tool, outcome: told.append((tool, outcome)),
    )
    served = access.serve_tools(tools())
    ask = functools.partial(discovery.answer, served, request(ROOT))
    ask("manifold__search_tools", {"query": "get issue"})
    ask("manifold__search_tools", {"query": "zzzz qqqq"})
    ask("manifold__search_tools", {"query": 5})
    ask("manifold__describe_tools", {"names": ["gh.get_issue"]})
    ask("manifold__describe_tools", {"names": ["nope"]})
    ask("manifold__call_tool", {"name": "anything"})
    ask("manifold__call_tool", {"name": 7})
    assert told == [
        ("search_tools", "ok"),
        ("search_tools", "no_results"),
        ("search_tools", "invalid_arguments"),
        ("describe_tools", "ok"),
        ("describe_tools", "no_results"),
        ("call_tool", "ok"),
        ("call_tool", "invalid_arguments"),
    ]


@pytest.mark.anyio
async def test_prepare_builds_the_index_once_in_a_worker_thread_and_answer_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from proxy.views import discovery as service
    from proxy.views.search_index import build_index

    discovery, _, served = setup(tmp_path)
    built: list[int] = []
    real = build_index

    def counting(*args: Any) -> Any:
        built.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(service, "build_index", counting)
    await discovery.prepare(served, request(ROOT))
    await discovery.prepare(served, request(ROOT2))  # the same view: the same index
    assert len(built) == 1
    assert built[0] != threading.get_ident()  # off the event loop's thread
    decoded(discovery.answer(served, request(ROOT), "manifold.search_tools", {"query": "issue"}))
    assert len(built) == 1


def test_semantic_off_never_loads_the_model(tmp_path: Path) -> None:
    discovery, _, served = setup(tmp_path, semantic="off")
    found = decoded(discovery.answer(served, request(ROOT), "manifold.search_tools", {"query": "issue"}))
    assert all("meaning" not in tool["matched"] for tool in found["tools"])
    assert discovery._semantic is None


@pytest.mark.anyio
async def test_warming_the_vectors_returns_at_once_when_search_is_by_words_alone(tmp_path: Path) -> None:
    discovery, _, _ = setup(tmp_path, semantic="off")
    followed: list[object] = []

    class Catalogs:
        served = None

        def follow(self, follower: object) -> None:
            followed.append(follower)

    with anyio.fail_after(1):
        await discovery.warm(Catalogs())  # type: ignore[arg-type]
    assert followed == []
