"""The pipeline's order is declared once (proxy/pipeline/order.py) and pinned here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.app.gateway import Gateway
from proxy.config.loading import config_from_mapping
from proxy.pipeline.context import CallContext, Handler, compose
from proxy.pipeline.stages.authorize import Authorize
from proxy.pipeline.stages.confirm import Confirm
from proxy.pipeline.stages.guard import Guard
from proxy.pipeline.stages.metrics import Measure
from proxy.pipeline.stages.ratelimit import RateLimit
from proxy.pipeline.stages.shape import Shape
from proxy.pipeline.stages.switched import SwitchedOff
from proxy.pipeline.stages.validate import Validate

POLICY = "version: 1\ndefault: allow\n"


def stages(tmp_path: Path, servers: dict[str, Any] | None = None, **sections: Any) -> list[type]:
    (tmp_path / "policy.yaml").write_text(POLICY)
    config = config_from_mapping({**sections, "servers": servers or {}})
    return [type(stage) for stage in Gateway(config)._stages()]


def test_with_everything_on_the_order_is_measure_authorize_validate_guard_ratelimit_confirm(
    tmp_path: Path,
) -> None:
    # Confirm runs after authorize (a hidden tool answers as missing, nobody is asked about it)
    # and last (nobody is asked about a call that invalid arguments or a rate limit would stop).
    # Guard reads valid arguments, and its redacted results are validated on their way out.
    policy = {"files": [str(tmp_path / "policy.yaml")], "pins": {"mode": "off"}}
    assert stages(tmp_path, policy=policy) == [Measure, Authorize, Validate, Guard, RateLimit, Confirm]


def test_argument_shaping_runs_after_authorize_and_before_validate(tmp_path: Path) -> None:
    policy = {"files": [str(tmp_path / "policy.yaml")], "pins": {"mode": "off"}}
    shaped = {"gh": {"command": "x", "tools": {"t": {"arguments": {"owner": {"fixed": "acme"}}}}}}
    assert stages(tmp_path, shaped, policy=policy) == [
        Measure,
        Authorize,
        Shape,
        Validate,
        Guard,
        RateLimit,
        Confirm,
    ]
    worded = {"gh": {"command": "x", "tools": {"t": {"description": "no arguments shaped"}}}}
    assert Shape not in stages(tmp_path, worded, policy=policy)


def test_with_the_admin_api_switched_off_tools_are_refused_after_authorize(tmp_path: Path) -> None:
    # After Authorize, so the refusal is audited with the call; before anything that costs more.
    policy = {"files": [str(tmp_path / "policy.yaml")], "pins": {"mode": "off"}}
    assert stages(tmp_path, policy=policy, admin={})[:3] == [Measure, Authorize, SwitchedOff]
    assert SwitchedOff not in stages(tmp_path, policy=policy)


def test_switched_off_stages_are_left_out(tmp_path: Path) -> None:
    off = {"validate_arguments": False, "validate_results": False, "pins": {"mode": "off"}}
    assert stages(tmp_path, policy=off, metrics={"enabled": False}) == []


@pytest.mark.anyio
async def test_compose_runs_the_first_stage_outermost() -> None:
    seen: list[str] = []

    def stage(name: str) -> Any:
        async def run(ctx: CallContext, call_next: Handler) -> Any:
            seen.append(f"{name} in")
            result = await call_next(ctx)
            seen.append(f"{name} out")
            return result

        return run

    async def endpoint(ctx: CallContext) -> str:
        seen.append("endpoint")
        return "done"

    handler = compose([stage("a"), stage("b")], endpoint)
    assert await handler(None) == "done"  # type: ignore[arg-type]
    assert seen == ["a in", "b in", "endpoint", "b out", "a out"]


class _Stepped:
    """A stage that may be stepped over: ``passes`` says so for calls named "skip"."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def passes(self, ctx: Any) -> bool:
        self.seen.append(f"passes {ctx}")
        return bool(ctx == "skip")

    async def __call__(self, ctx: Any, call_next: Handler) -> Any:
        self.seen.append(f"stage {ctx}")
        return await call_next(ctx)


@pytest.mark.anyio
async def test_a_stage_that_passes_a_call_is_stepped_over_and_runs_for_the_others() -> None:
    seen: list[str] = []

    async def endpoint(ctx: CallContext) -> str:
        seen.append(f"endpoint {ctx}")
        return "done"

    handler = compose([_Stepped(seen)], endpoint)
    assert await handler("skip") == "done"  # type: ignore[arg-type]
    assert await handler("run") == "done"  # type: ignore[arg-type]
    assert seen == ["passes skip", "endpoint skip", "passes run", "stage run", "endpoint run"]
