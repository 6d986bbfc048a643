"""The TypeScript SDK's tasks client drives ``server-everything``'s task tools (issue #30).

This is the driver proved against the server alone, over Streamable HTTP and stdio: every
scenario it reports on here is what it must also report through Manifold.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.spawn import free_port, running_http_process
from tests.fixtures.tasks_driver import drive_tasks
from tests.interaction.harness import NPM_BIN

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EVERYTHING = str(NPM_BIN / "mcp-server-everything")


def assert_every_task_scenario_worked(report: dict[str, Any]) -> None:
    """What server-everything answers the TypeScript tasks client, scenario by scenario."""
    assert report["serverTasks"]["requests"]["tools"]["call"] == {}, report["serverTasks"]
    assert report["tools"]["simulate-research-query"] == "required"
    # Listed only to a client that declared tasks.requests.{elicitation,sampling}.
    assert "trigger-elicitation-request-async" in report["tools"]
    assert "trigger-sampling-request-async" in report["tools"]
    s = report["scenarios"]

    assert s["research"]["error"] is None, s["research"]
    assert s["research"]["statuses"][-1] == "completed"
    assert "# Research Report: rivers" in s["research"]["result"]["texts"][0]

    asked = s["input_required"]
    assert asked["error"] is None, asked
    assert "input_required" in asked["statuses"], asked["statuses"]
    assert "# Research Report: python (programming)" in asked["result"]["texts"][0]
    related = [r for r in report["requests"] if r["relatedTask"] == asked["taskId"]]
    assert [r["method"] for r in related] == ["elicitation/create"], report["requests"]

    polled = s["polled"]
    assert polled.get("error") is None, polled
    assert polled["statuses"][0] == "working"
    assert polled["statuses"][-1] == "completed"
    assert "# Research Report: tides" in polled["result"]["texts"][0]
    assert (polled["statusAfter"], polled["listed"]) == ("completed", True)

    cancelled = s["cancelled"]
    assert (cancelled["cancelStatus"], cancelled["cancelError"]) == ("cancelled", None), cancelled
    assert cancelled["statuses"][-1] == "cancelled"
    assert cancelled["result"] is None
    assert cancelled["statusAfter"] == "cancelled"
    assert cancelled["resultAfter"] is None
    assert cancelled["resultAfterError"] is not None

    assert "- Name: Ada" in "\n".join(s["elicitation_async"]["result"]["texts"]), s["elicitation_async"]
    assert "a fixed sampled answer" in "\n".join(s["sampling_async"]["result"]["texts"]), s["sampling_async"]
    asked_for_tasks = [(r["method"], r["task"]) for r in report["requests"] if r["relatedTask"] is None]
    assert asked_for_tasks == [("elicitation/create", True), ("sampling/createMessage", True)]

    for method, answer in s["unknown_task"].items():
        assert answer != "answered", method
        assert answer["code"] == -32602, (method, answer)

    created = {s[name]["taskId"] for name in ("research", "input_required", "polled", "cancelled")}
    assert {n["taskId"] for n in report["statusNotifications"]} <= created


async def test_the_driver_runs_every_task_scenario_against_server_everything_over_http() -> None:
    port = free_port()
    async with running_http_process(["env", f"PORT={port}", EVERYTHING, "streamableHttp"], port):
        report = await drive_tasks(url=f"http://127.0.0.1:{port}/mcp")
    assert_every_task_scenario_worked(report)


async def test_the_driver_runs_every_task_scenario_against_server_everything_over_stdio() -> None:
    report = await drive_tasks(stdio=[EVERYTHING, "stdio"])
    assert_every_task_scenario_worked(report)
