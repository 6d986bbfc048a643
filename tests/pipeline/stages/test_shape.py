"""The shape stage: a tool override's fixed, default and hidden arguments on the forwarded call."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.catalog.merge import Entry
from proxy.config.model import ServerConfig
from proxy.pipeline.context import tool_error
from proxy.pipeline.stages.shape import Shape
from tests.pipeline.stages.contexts import Recorder, access_for, call_context, served_tools, tool_context

pytestmark = pytest.mark.anyio

GH = ServerConfig.model_validate(
    {
        "id": "gh",
        "command": "gh-server",
        "tools": {
            "get_issue": {"arguments": {"number": {"default": 1}}},
            "list_issues": {"arguments": {"owner": {"fixed": "acme"}, "debug": {"hidden": True}}},
        },
    }
)


def stage() -> Shape:
    shape = Shape.of({"gh": GH})
    assert shape is not None
    return shape


async def test_the_server_gets_the_fixed_value_and_the_defaults(tmp_path: Path) -> None:
    served = served_tools(access_for(tmp_path, policy=None))
    call_next = Recorder()
    await stage()(tool_context(served, "gh.get_issue", arguments={}), call_next)
    await stage()(tool_context(served, "gh.get_issue", arguments={"number": 7}), call_next)
    assert [ctx.arguments for ctx in call_next.seen] == [{"number": 1}, {"number": 7}]


@pytest.mark.parametrize("smuggled", [{"owner": "evil"}, {"debug": True}])
async def test_a_caller_setting_a_fixed_or_hidden_argument_is_refused_before_the_server(
    smuggled: dict[str, object],
) -> None:
    entry = Entry("gh.list_issues", "gh", "list_issues", {"name": "gh.list_issues"}, "gh.list_issues")
    params = {"name": "list_issues", "arguments": {"repo": "r", **smuggled}}
    ctx = call_context(name="gh.list_issues", params=params, entry=entry)
    call_next = Recorder()
    result = await stage()(ctx, call_next)
    assert call_next.seen == []
    name = next(iter(smuggled))
    assert result == tool_error(
        f"Invalid arguments for gh.list_issues: this tool has no argument {name!r}: it is set by the "
        "gateway's configuration, not by callers",
        outcome="invalid_arguments",
    )


def test_no_stage_when_no_override_shapes_arguments() -> None:
    worded = ServerConfig.model_validate({"id": "gh", "command": "x", "tools": {"t": {"title": "T"}}})
    assert Shape.of({"gh": worded}) is None
