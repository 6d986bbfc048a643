"""Draining a server's lists page by page, against a scripted ``fetch``: no server, no link."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from proxy.core.errors import RemoteError, ServerProtocolError
from proxy.outbound.lists import CHANGED, LIST_KINDS, Drained, drain, offered
from proxy.protocol.results import CacheHint

pytestmark = pytest.mark.anyio


class Script:
    """A ``fetch`` that answers with the next of ``answers`` (a result, or an error to raise)."""

    def __init__(self, answers: Sequence[Any]) -> None:
        self._answers = list(answers)
        self.asked: list[tuple[str, dict[str, Any] | None]] = []

    async def __call__(self, method: str, params: dict[str, Any] | None) -> Any:
        self.asked.append((method, params))
        answer = self._answers[min(len(self.asked), len(self._answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def page(names: list[str], cursor: Any = None, **extra: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"tools": [{"name": n} for n in names], **extra}
    if cursor is not None:
        result["nextCursor"] = cursor
    return result


def names(drained: Drained) -> list[str]:
    return [item["name"] for item in drained.items]


async def run(script: Script, kind: str = "tools", max_pages: int = 10) -> Drained:
    return await drain(script, kind, max_pages=max_pages, server_id="s")


def not_found() -> RemoteError:
    return RemoteError("s", {"code": -32601, "message": "Method not found"})


async def test_every_page_is_asked_for_with_the_cursor_the_last_one_gave() -> None:
    script = Script([page(["a", "b"], "c1"), page(["c"], "c2"), page(["d"])])
    drained = await run(script)
    assert (names(drained), drained.ended) == (["a", "b", "c", "d"], True)
    assert script.asked == [
        ("tools/list", None),
        ("tools/list", {"cursor": "c1"}),
        ("tools/list", {"cursor": "c2"}),
    ]


async def test_each_kind_is_read_from_its_own_method_and_result_key() -> None:
    script = Script([{"resourceTemplates": [{"name": "t"}]}])
    drained = await run(script, "resourceTemplates")
    assert (names(drained), script.asked) == (["t"], [("resources/templates/list", None)])


@pytest.mark.parametrize("cursor", ["c1", "", 7])  # repeated, empty, not a string
async def test_a_bad_or_repeated_cursor_ends_the_drain_cut_short_with_what_was_listed(cursor: Any) -> None:
    script = Script([page(["a"], "c1"), page(["b"], cursor), page(["never"])])
    drained = await run(script)
    assert (names(drained), drained.ended) == (["a", "b"], False)


async def test_a_server_that_pages_forever_is_cut_off_at_max_pages() -> None:
    script = Script([page([f"t{i}"], f"c{i + 1}") for i in range(50)])
    drained = await run(script, max_pages=3)
    assert (names(drained), drained.ended, len(script.asked)) == (["t0", "t1", "t2"], False, 3)


async def test_a_list_the_server_does_not_have_is_empty_and_not_ended() -> None:
    drained = await run(Script([not_found()]))
    assert drained == Drained([], ended=False)


async def test_an_empty_first_page_still_lets_a_missing_next_page_mean_empty() -> None:
    drained = await run(Script([page([], "c1"), not_found()]))
    assert drained == Drained([], ended=False)


async def test_a_missing_page_after_items_is_the_servers_error() -> None:
    with pytest.raises(RemoteError):
        await run(Script([page(["a"], "c1"), not_found()]))


async def test_any_other_error_is_the_servers_error() -> None:
    with pytest.raises(RemoteError):
        await run(Script([RemoteError("s", {"code": -32603, "message": "boom"})]))


@pytest.mark.parametrize("result", [{"tools": "a"}, {"prompts": []}, ["a"], None])
async def test_a_page_without_the_lists_array_is_a_protocol_error(result: Any) -> None:
    with pytest.raises(
        ServerProtocolError,
        match="server 's' broke the protocol: it answered tools/list without a 'tools' array",
    ):
        await run(Script([result]))


async def test_the_pages_cache_hints_are_merged() -> None:
    script = Script(
        [page(["a"], "c1", ttlMs=5000, cacheScope="public"), page(["b"], ttlMs=1000, cacheScope="private")]
    )
    assert (await run(script)).hint == CacheHint(1000, "private")


@pytest.mark.parametrize(
    "pages",
    [
        pytest.param([page(["a"], "c1"), page(["b"], ttlMs=5000, cacheScope="public")], id="first"),
        pytest.param([page(["a"], "c1", ttlMs=5000, cacheScope="public"), page(["b"])], id="later"),
    ],
)
async def test_a_page_without_cache_hints_leaves_the_list_without_any(pages: list[Any]) -> None:
    drained = await run(Script(pages))
    assert (drained.items, drained.hint) == ([{"name": "a"}, {"name": "b"}], None)


def test_a_server_offers_the_lists_of_its_capabilities_in_a_fixed_order() -> None:
    assert offered({"resources": {}, "tools": {}}) == ["tools", "resources", "resourceTemplates"]
    assert offered({"logging": {}}) == []


def test_every_list_changed_notification_names_kinds_that_are_listed() -> None:
    assert CHANGED["notifications/resources/list_changed"] == ("resources", "resourceTemplates")
    assert {kind for kinds in CHANGED.values() for kind in kinds} == set(LIST_KINDS)


async def test_a_list_past_max_items_keeps_the_first_ones_asks_for_no_more_pages_and_says_it_was_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = Script([page(["a", "b"], "c1"), page(["c", "d"], "c2"), page(["e"], "c3"), page(["f"])])
    drained = await drain(script, "tools", max_pages=10, server_id="s", max_items=3)
    assert (names(drained), drained.ended, drained.capped) == (["a", "b", "c"], False, True)
    assert len(script.asked) == 2
    warnings = [r.getMessage() for r in caplog.records if "max_server_items" in r.getMessage()]
    assert warnings == [
        "server s: tools/list listed more than 3 tools; keeping the first 3 (limits.max_server_items)"
    ]


async def test_a_list_of_exactly_max_items_that_ends_there_is_whole() -> None:
    drained = await drain(
        Script([page(["a"], "c1"), page(["b"])]), "tools", max_pages=10, server_id="s", max_items=2
    )
    assert (names(drained), drained.ended, drained.capped) == (["a", "b"], True, False)


async def test_a_full_list_whose_server_says_there_is_more_is_cut_without_asking() -> None:
    script = Script([page(["a", "b"], "c1"), page(["c"])])
    drained = await drain(script, "tools", max_pages=10, server_id="s", max_items=2)
    assert (names(drained), drained.capped, len(script.asked)) == (["a", "b"], True, 1)
