"""The authorize stage: the policy decides each request, denials are answered or hidden, and
every decision is counted and written to the audit log with how the call ended."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.config.policy import AuditSettings
from proxy.core.errors import (
    INVALID_PARAMS,
    RESOURCE_NOT_FOUND,
    HiddenByPolicy,
    ResourceNotFound,
    ServerTimeout,
)
from proxy.core.redaction import remember_key_digests, remember_secrets
from proxy.enforce.access import Access, ServedTools
from proxy.observe.logs import REDACTED
from proxy.observe.metrics import Metrics
from proxy.pipeline.context import tool_error
from proxy.pipeline.stages.authorize import AuditLog, Authorize
from proxy.policy.engine import Subject
from proxy.policy.model import Identity
from proxy.tracing import active as tracing
from tests.pipeline.stages.contexts import (
    ALICE,
    Recorder,
    access_for,
    call_context,
    cancelled_mid_call,
    sample,
    served_tools,
    ticks,
    tool_context,
)

pytestmark = pytest.mark.anyio

DECISIONS = "manifold_policy_decisions_total"
READ_ONLY_HINTS = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": True,
    "source": "server",
}


class World:
    """A stage over the test policy, its metrics, and the audit file it writes."""

    def __init__(self, tmp_path: Path, *, dry_run: bool = False, include_arguments: bool = False) -> None:
        self.access: Access = access_for(tmp_path, dry_run=dry_run)
        self.served: ServedTools = served_tools(self.access)
        self.metrics = Metrics(process_metrics=False)
        self.audit_path = tmp_path / "audit.jsonl"
        self.audit = AuditLog(AuditSettings(path=str(self.audit_path), include_arguments=include_arguments))
        self.stage = Authorize(self.access, self.audit, self.metrics, clock=ticks(10.0, 10.0125))

    def records(self) -> list[dict[str, Any]]:
        """The audit lines queued so far, written out, parsed, each checked for and stripped of its
        timestamp."""
        self.audit.lines.drain()
        records = [json.loads(line) for line in self.audit_path.read_text().splitlines()]
        for record in records:
            stamp = record.pop("ts")
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", stamp), stamp
            assert abs((datetime.now(UTC) - datetime.fromisoformat(stamp)).total_seconds()) < 60
        return records

    def decisions(self, effect: str, rule: str) -> float | None:
        return sample(self.metrics.registry, DECISIONS, effect=effect, rule=rule)


MakeWorld = Callable[..., World]


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[MakeWorld]:
    made: list[World] = []

    def make(**options: Any) -> World:
        made.append(World(tmp_path, **options))
        return made[-1]

    yield make
    for world in made:
        world.audit.close()


@pytest.fixture
def world(make_world: MakeWorld) -> World:
    return make_world()


async def test_an_allowed_call_is_passed_on_and_audited_with_its_rule_annotations_and_latency(
    world: World,
) -> None:
    ctx = tool_context(world.served, "gh.get_issue", arguments={"number": 1})
    call_next = Recorder()

    result = await world.stage(ctx, call_next)

    assert result is call_next.result
    assert call_next.seen == [ctx]
    assert world.decisions("allow", "readers-read") == 1.0
    assert world.records() == [
        {
            "identity": "alice",
            "roles": ["reader"],
            "source": "api_key",
            "issuer": "",
            "subject": "alice",
            "method": "tools/call",
            "name": "gh.get_issue",
            "server": "gh",
            "effect": "allow",
            "enforced": "allow",
            "rules": ["readers-read"],
            "reason": "allowed by rule readers-read: readers may use read-only tools",
            "outcome": "ok",
            "latency_ms": 12.5,
            "annotations": READ_ONLY_HINTS,
        }
    ]


async def test_a_tool_the_policy_denies_but_shows_is_answered_with_the_reason_and_not_called(
    world: World,
) -> None:
    call_next = Recorder()

    result = await world.stage(tool_context(world.served, "gh.delete_repo"), call_next)

    assert result == tool_error(
        "Manifold's policy does not let 'alice' call 'gh.delete_repo': denied by rule no-deleting: "
        "nobody deletes repositories. Use another tool, or ask an operator to change the policy.",
        outcome="denied",
    )
    assert call_next.seen == []
    assert world.decisions("deny", "no-deleting") == 1.0
    [record] = world.records()
    assert (record["effect"], record["enforced"], record["rules"], record["outcome"]) == (
        "deny",
        "deny",
        ["no-deleting"],
        "denied",
    )


@pytest.mark.parametrize(
    ("tool", "rule", "rules"),
    [("gh.secret_dump", "hide-secrets", ["hide-secrets"]), ("gh.create_issue", "default", [])],
)
async def test_a_tool_the_policy_hides_is_refused_as_unknown_and_audited_as_denied(
    world: World, tool: str, rule: str, rules: list[str]
) -> None:
    call_next = Recorder()

    with pytest.raises(HiddenByPolicy) as raised:
        await world.stage(tool_context(world.served, tool), call_next)

    assert (raised.value.code, raised.value.message) == (INVALID_PARAMS, f"unknown tool: {tool}")
    assert call_next.seen == []
    assert world.decisions("deny", rule) == 1.0
    [record] = world.records()
    assert (record["name"], record["effect"], record["enforced"], record["rules"], record["outcome"]) == (
        tool,
        "deny",
        "deny",
        rules,
        "denied",
    )


@pytest.mark.parametrize("method", ["prompts/get", "completion/complete"])
async def test_a_denied_prompt_is_unknown_even_when_its_rule_would_show_it(world: World, method: str) -> None:
    call_next = Recorder()
    subject = Subject("prompt", "gh.delete_notes", "gh")
    ctx = call_context(method=method, name="gh.delete_notes", subject=subject)

    with pytest.raises(HiddenByPolicy) as raised:
        await world.stage(ctx, call_next)

    assert raised.value.message == "unknown prompt: gh.delete_notes"
    assert call_next.seen == []
    [record] = world.records()
    assert (record["method"], record["rules"], record["outcome"]) == (method, ["no-deleting"], "denied")
    assert "annotations" not in record


@pytest.mark.parametrize("method", ["resources/read", "completion/complete"])
async def test_a_denied_resource_reads_as_not_found_exactly_like_a_missing_one(
    world: World, method: str
) -> None:
    uri = "file:///docs/secret.txt"
    call_next = Recorder()
    ctx = call_context(method=method, name=uri, subject=Subject.resource(uri, "gh"))

    with pytest.raises(ResourceNotFound) as raised:
        await world.stage(ctx, call_next)

    missing = ResourceNotFound.of(uri)
    assert (raised.value.code, raised.value.message, raised.value.data) == (
        RESOURCE_NOT_FOUND,
        missing.message,
        missing.data,
    )
    assert call_next.seen == []
    assert [record["outcome"] for record in world.records()] == ["denied"]


async def test_an_allowed_resource_read_is_passed_on_and_audited_without_annotations(world: World) -> None:
    uri = "file:///docs/guide.md"
    ctx = call_context(
        method="resources/read", name=uri, params={"uri": uri}, subject=Subject.resource(uri, "gh")
    )
    call_next = Recorder({"contents": []})

    assert await world.stage(ctx, call_next) == {"contents": []}

    assert call_next.seen == [ctx]
    assert world.records() == [
        {
            "identity": "alice",
            "roles": ["reader"],
            "source": "api_key",
            "issuer": "",
            "subject": "alice",
            "method": "resources/read",
            "name": uri,
            "server": "gh",
            "effect": "allow",
            "enforced": "allow",
            "rules": ["readers-prompts-and-docs"],
            "reason": "allowed by rule readers-prompts-and-docs",
            "outcome": "ok",
            "latency_ms": 12.5,
        }
    ]


async def test_a_request_without_a_subject_is_passed_on_undecided_and_unaudited(world: World) -> None:
    stage = Authorize(world.access, world.audit, world.metrics, clock=ticks())  # reading it would raise
    ctx = call_context(method="resources/subscribe", name="file:///docs/secret.txt")
    call_next = Recorder({})

    assert await stage(ctx, call_next) == {}

    assert call_next.seen == [ctx]
    assert world.records() == []
    assert [
        s for family in world.metrics.registry.collect() for s in family.samples if s.name == DECISIONS
    ] == []


async def test_in_a_dry_run_a_would_be_denial_is_logged_audited_and_let_through(
    make_world: MakeWorld, caplog: pytest.LogCaptureFixture
) -> None:
    world = make_world(dry_run=True)
    call_next = Recorder()
    ctx = tool_context(world.served, "gh.secret_dump")

    with caplog.at_level(logging.WARNING, logger="proxy.pipeline.stages.authorize"):
        result = await world.stage(ctx, call_next)

    assert result is call_next.result
    assert call_next.seen == [ctx]
    assert [r.getMessage() for r in caplog.records if r.name == "proxy.pipeline.stages.authorize"] == [
        "dry run: would deny tools/call gh.secret_dump to alice: denied by rule hide-secrets"
    ]
    assert world.decisions("deny", "hide-secrets") == 1.0
    [record] = world.records()
    assert (record["effect"], record["enforced"], record["outcome"]) == ("deny", "allow", "ok")


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [({"content": [], "isError": True}, "tool_error"), ({"resultType": "input_required"}, "input_required")],
)
async def test_the_audit_record_says_how_an_allowed_call_ended(
    world: World, answer: dict[str, Any], outcome: str
) -> None:
    assert await world.stage(tool_context(world.served, "gh.get_issue"), Recorder(answer)) is answer
    assert [record["outcome"] for record in world.records()] == [outcome]


async def test_an_exception_from_the_call_propagates_unchanged_and_is_audited_by_its_kind(
    world: World,
) -> None:
    error = ServerTimeout("gh", "tools/call", 60.0)

    with pytest.raises(ServerTimeout) as raised:
        await world.stage(tool_context(world.served, "gh.get_issue"), Recorder(raises=error))

    assert raised.value is error
    assert [(record["outcome"], record["latency_ms"]) for record in world.records()] == [("timeout", 12.5)]


async def test_a_cancelled_call_is_audited_as_cancelled_and_the_cancellation_goes_on(world: World) -> None:
    reached_the_caller = await cancelled_mid_call(
        lambda call_next: world.stage(tool_context(world.served, "gh.get_issue"), call_next)
    )

    assert reached_the_caller == ["cancelled"]
    assert [record["outcome"] for record in world.records()] == ["cancelled"]


async def test_arguments_are_audited_when_the_operator_asks_and_roles_come_sorted(
    make_world: MakeWorld,
) -> None:
    world = make_world(include_arguments=True)
    admin = Identity("root", frozenset({"admin", "ops", "billing"}), "jwt")
    world.stage = Authorize(world.access, world.audit, world.metrics, clock=ticks(0.0, 0.0, 0.0, 0.0))

    await world.stage(
        tool_context(world.served, "gh.create_issue", identity=admin, arguments={"title": "x"}), Recorder()
    )
    await world.stage(tool_context(world.served, "gh.get_issue"), Recorder())

    first, second = world.records()
    assert (first["identity"], first["roles"], first["arguments"]) == (
        "root",
        ["admin", "billing", "ops"],
        {"title": "x"},
    )
    assert (second["identity"], second["arguments"]) == ("alice", {})


async def test_audited_arguments_are_redacted_as_log_lines_are(make_world: MakeWorld) -> None:
    """Issue #27: Manifold's own API key (held hashed), a configured secret, and a secret-looking
    field arrive in a call's arguments; the audit log writes none of them."""
    key = "mfd_" + "k" * 43
    remember_secrets(["configured-server-secret"])
    remember_key_digests([hashlib.sha256(b"plain-operator-key-0123456789").digest()])
    try:
        world = make_world(include_arguments=True)
        arguments = {
            "title": f"leak {key}",
            "body": "plain-operator-key-0123456789 and configured-server-secret",
            "password": "hunter2",
            "nested": [{"note": "configured-server-secret"}],
        }
        admin = Identity("root", frozenset({"admin"}), "jwt")
        called = tool_context(world.served, "gh.create_issue", identity=admin, arguments=arguments)
        await world.stage(called, Recorder())
        [record] = world.records()
    finally:
        remember_secrets(())
        remember_key_digests(())
    assert record["arguments"] == {
        "title": f"leak {REDACTED}",
        "body": f"{REDACTED} and {REDACTED}",
        "password": REDACTED,
        "nested": [{"note": REDACTED}],
    }


async def test_without_an_audit_log_the_stage_still_decides_and_counts(world: World) -> None:
    stage = Authorize(world.access, None, world.metrics, clock=ticks(0.0, 0.0))

    with pytest.raises(HiddenByPolicy):
        await stage(tool_context(world.served, "gh.secret_dump", identity=ALICE), Recorder())

    assert world.decisions("deny", "hide-secrets") == 1.0
    assert world.records() == []


# ---- the audit log itself ---------------------------------------------------------------------


async def test_the_audit_file_is_appended_to_by_the_writer_task_one_line_per_record(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b'{"earlier": true}\n')
    log = AuditLog(AuditSettings(path=str(path)))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(log.run)
            log.write({"n": 1, "text": "é"})
            while log.lines.batches < 1:  # noqa: ASYNC110 (the writer's progress is a counter)
                await anyio.sleep(0.005)
            flushed = path.read_bytes()  # the writer flushes each batch
            log.write({"n": 2})
            tg.cancel_scope.cancel()  # shutdown writes what is left, then closes the file

    assert flushed == b'{"earlier": true}\n{"n":1,"text":"\xc3\xa9"}\n'
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"earlier": True},
        {"n": 1, "text": "é"},
        {"n": 2},
    ]


def test_an_audit_log_on_stdout_writes_there_and_closing_it_leaves_stdout_open(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = AuditLog(AuditSettings(path="-"))

    log.write({"n": 1})
    log.lines.drain()
    log.close()

    assert not sys.stdout.buffer.closed
    assert capsys.readouterr().out == '{"n":1}\n'


def test_an_audit_record_written_while_a_request_is_traced_names_the_trace(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = AuditLog(AuditSettings(path="-"))

    class Traced:
        trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"

    log.write({"n": 1})  # tracing off: nothing added
    monkeypatch.setattr(tracing, "tracer", object())
    token = tracing.CURRENT.set(Traced())  # type: ignore[arg-type]
    try:
        log.write({"n": 2})
    finally:
        tracing.CURRENT.reset(token)
    log.lines.drain()
    log.close()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [{"n": 1}, {"n": 2, "trace_id": Traced.trace_id, "span_id": Traced.span_id}]
