"""The validate stage: arguments checked before a call, structured results after it; anything
non-conforming becomes a tool result listing what is wrong, so a model can correct itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.catalog.merge import Entry
from proxy.core.errors import ServerUnavailable
from proxy.enforce.access import ServedTools
from proxy.pipeline.context import CallContext, tool_error
from proxy.pipeline.stages.validate import Validate
from proxy.policy import SchemaValidators
from tests.pipeline.stages.contexts import Recorder, access_for, call_context, served_tools, tool_context

pytestmark = pytest.mark.anyio


@pytest.fixture
def served(tmp_path: Path) -> ServedTools:
    return served_tools(access_for(tmp_path, policy=None))


def both() -> Validate:
    return Validate(SchemaValidators(), arguments=True, results=True)


async def test_valid_arguments_and_a_conforming_result_pass_through_untouched(served: ServedTools) -> None:
    ctx = tool_context(served, "gh.get_issue", arguments={"number": 3})
    call_next = Recorder({"content": [], "structuredContent": {"title": "Bug"}})

    result = await both()(ctx, call_next)

    assert result is call_next.result
    assert call_next.seen == [ctx]


async def test_invalid_arguments_are_answered_with_every_problem_and_the_tool_is_not_called(
    served: ServedTools,
) -> None:
    call_next = Recorder()

    result = await both()(tool_context(served, "gh.get_issue", arguments={"number": "three"}), call_next)

    assert result == tool_error(
        "Invalid arguments for gh.get_issue:\n- arguments.number: 'three' is not of type 'integer'",
        outcome="invalid_arguments",
    )
    assert call_next.seen == []


async def test_missing_arguments_are_checked_as_an_empty_object(served: ServedTools) -> None:
    call_next = Recorder()

    result = await both()(tool_context(served, "gh.get_issue"), call_next)

    assert result == tool_error(
        "Invalid arguments for gh.get_issue:\n- arguments: 'number' is a required property",
        outcome="invalid_arguments",
    )
    assert call_next.seen == []


async def test_a_result_that_breaks_the_output_schema_is_withheld_naming_the_problem(
    served: ServedTools,
) -> None:
    ctx = tool_context(served, "gh.get_issue", arguments={"number": 3})

    result = await both()(ctx, Recorder({"content": [], "structuredContent": {"title": 42}}))

    assert result == tool_error(
        "gh.get_issue returned a result that does not match its outputSchema, so Manifold withheld it:\n"
        "- structuredContent.title: 42 is not of type 'string'",
        outcome="invalid_result",
    )


async def test_a_result_without_structured_content_is_withheld_when_the_tool_declares_an_output_schema(
    served: ServedTools,
) -> None:
    result = await both()(
        tool_context(served, "gh.get_issue", arguments={"number": 3}), Recorder({"content": []})
    )

    assert result == tool_error(
        "gh.get_issue returned a result that does not match its outputSchema, so Manifold withheld it:\n"
        "- structuredContent is missing, but the tool declares an outputSchema",
        outcome="invalid_result",
    )


@pytest.mark.parametrize(
    "answer",
    [
        {"content": [{"type": "text", "text": "failed"}], "isError": True, "structuredContent": {"title": 1}},
        {"resultType": "input_required", "inputRequests": {}},
    ],
)
async def test_error_results_and_input_requests_are_not_held_to_the_output_schema(
    served: ServedTools, answer: dict[str, Any]
) -> None:
    result = await both()(tool_context(served, "gh.get_issue", arguments={"number": 3}), Recorder(answer))

    assert result is answer


async def test_each_check_can_be_turned_off_on_its_own(served: ServedTools) -> None:
    bad_call = tool_context(served, "gh.get_issue", arguments={"number": "three"})
    bad_answer = {"content": [], "structuredContent": {"title": 42}}
    results_only = Validate(SchemaValidators(), arguments=False, results=True)
    arguments_only = Validate(SchemaValidators(), arguments=True, results=False)
    call_next = Recorder(bad_answer)

    assert (await results_only(bad_call, call_next))["_meta"] == {"dev.manifold/outcome": "invalid_result"}
    good_call = tool_context(served, "gh.get_issue", arguments={"number": 3})
    assert await arguments_only(good_call, call_next) is bad_answer
    assert call_next.seen == [bad_call, good_call]


@pytest.mark.parametrize("method", ["prompts/get", "resources/read", "completion/complete"])
async def test_requests_other_than_tool_calls_are_not_validated(served: ServedTools, method: str) -> None:
    entry = served.catalog.by_name["gh.get_issue"]
    ctx = call_context(method=method, params={"arguments": {"number": "three"}}, entry=entry)
    call_next = Recorder({"structuredContent": {"title": 42}})

    assert await both()(ctx, call_next) is call_next.result
    assert call_next.seen == [ctx]


async def test_a_tool_call_without_a_catalog_entry_is_passed_on_unchecked() -> None:
    ctx = call_context(params={"name": "get_issue", "arguments": {"number": "three"}})
    call_next = Recorder()

    assert await both()(ctx, call_next) is call_next.result
    assert call_next.seen == [ctx]


async def test_an_exception_from_the_call_propagates_unchanged(served: ServedTools) -> None:
    error = ServerUnavailable("gh", "the process exited with code 1")

    with pytest.raises(ServerUnavailable) as raised:
        await both()(tool_context(served, "gh.get_issue", arguments={"number": 3}), Recorder(raises=error))

    assert raised.value is error


# ---- nothing slow on the event loop -------------------------------------------------------

CATASTROPHIC = {"type": "object", "properties": {"word": {"type": "string", "pattern": "^(a+)+$"}}}
# The same blow-up, with a lookahead RE2 cannot run: only Python's backtracking re can.
BACKTRACKING = {"type": "object", "properties": {"word": {"type": "string", "pattern": "^(a+)+(?!c)$"}}}
TEXT = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 10}}}


def entry_with(schema: dict[str, Any]) -> Entry:
    return Entry("gh.slow", "gh", "slow", {"name": "gh.slow", "inputSchema": schema})


def slow_context(schema: dict[str, Any], arguments: dict[str, Any]) -> CallContext:
    return call_context(
        name="gh.slow", params={"name": "slow", "arguments": arguments}, entry=entry_with(schema)
    )


async def test_small_arguments_against_a_plain_schema_are_checked_inline() -> None:
    stage = Validate(SchemaValidators(), arguments=True, results=False, in_thread_bytes=1024)
    result = await stage(slow_context(TEXT, {"text": "x" * 11}), Recorder({"content": []}))
    assert "is too long" in result["content"][0]["text"]
    assert stage.threaded == 0


async def test_arguments_larger_than_the_limit_are_checked_on_a_thread_and_still_correctly() -> None:
    stage = Validate(SchemaValidators(), arguments=True, results=False, in_thread_bytes=1024)
    result = await stage(slow_context(TEXT, {"text": "x" * 2000}), Recorder({"content": []}))
    assert result["isError"] is True
    assert "- arguments.text: 'xxx" in result["content"][0]["text"]  # (is too long: cut short)
    valid = await stage(slow_context(TEXT, {"text": "ok", "pad": "y" * 2000}), Recorder({"content": []}))
    assert valid == {"content": []}
    assert stage.threaded == 2


async def test_a_catastrophic_pattern_is_checked_inline_in_linear_time_and_rightly() -> None:
    stage = Validate(SchemaValidators(), arguments=True, results=False)
    word = "a" * 10_000 + "!"  # re: 2**10000 steps
    started = time.perf_counter()
    result = await stage(slow_context(CATASTROPHIC, {"word": word}), Recorder({"content": []}))
    elapsed = time.perf_counter() - started
    assert result["isError"] is True
    assert "- arguments.word: 'aaaa" in result["content"][0]["text"]
    valid = await stage(slow_context(CATASTROPHIC, {"word": "a" * 10_000}), Recorder({"content": []}))
    assert valid == {"content": []}
    assert (stage.in_process, stage.threaded) == (0, 0)
    assert elapsed < 0.5  # RE2 takes well under a millisecond here


@pytest.mark.slow
async def test_a_pattern_re2_cannot_run_is_checked_in_a_worker_process_whatever_the_size() -> None:
    stage = Validate(SchemaValidators(), arguments=True, results=False)
    result = await stage(slow_context(BACKTRACKING, {"word": "b"}), Recorder({"content": []}))
    assert "does not match" in result["content"][0]["text"]
    valid = await stage(slow_context(BACKTRACKING, {"word": "aaa"}), Recorder({"content": []}))
    assert valid == {"content": []}
    assert (stage.in_process, stage.threaded) == (2, 0)


@pytest.mark.slow
async def test_a_backtracking_pattern_grinds_elsewhere_while_the_loop_goes_on_and_is_stopped() -> None:
    stage = Validate(SchemaValidators(), arguments=True, results=False, check_seconds=3)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            # 2**28 steps for re: a minute if it ran here; the process is killed at 3 s.
            result = await stage(
                slow_context(BACKTRACKING, {"word": "a" * 28 + "b"}), Recorder({"content": []})
            )
            tg.cancel_scope.cancel()
    assert "within 3 s" in result["content"][0]["text"]
    assert ticks >= 50  # the loop kept running meanwhile (300 at best; a frozen loop gives 0 or 1)


async def test_a_large_structured_result_is_checked_on_a_thread() -> None:
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    entry = Entry("gh.big", "gh", "big", {"name": "gh.big", "outputSchema": schema})
    ctx = call_context(name="gh.big", params={"name": "big"}, entry=entry)
    stage = Validate(SchemaValidators(), arguments=False, results=True, in_thread_bytes=1024)
    result = await stage(ctx, Recorder({"content": [], "structuredContent": {"body": "z" * 4096}}))
    assert "'title' is a required property" in result["content"][0]["text"]
    assert stage.threaded == 1
