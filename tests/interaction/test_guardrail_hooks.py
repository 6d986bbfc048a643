"""End to end, external inspection services: ``effect: inspect`` rules POST what they select to
a hook service of ours, run as its own process on loopback, which allows, denies, redacts with
edits or asks; and which hangs, crashes, answers garbage, answers huge, answers an error status,
or edits the arguments into ones the tool's schema refuses. A failure lands on that one request,
closed or open as the hook is configured; the next request is served.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.types import ElicitRequestParams, ElicitResult, TextContent

from tests.fixtures.spawn import free_port
from tests.interaction.harness import REPO, RunningManifold, running_manifold
from tests.interaction.test_guardrails import guard_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HOOK = str(REPO / "tests" / "fixtures" / "hook_service.py")
TOKEN = "hook-token-0123456789abcdef"
POLICY = """\
version: 1
default: allow
guardrails:
  rules:
    - id: dlp-out
      effect: inspect
      hook: dlp
      match: {directions: [tool_arguments], tools: ["g.record", "g.typed"]}
    - id: lenient-out
      effect: inspect
      hook: lenient
      match: {directions: [tool_arguments], tools: ["g.answer"]}
    - id: no-keys-out
      effect: deny
      match: {directions: [tool_arguments], detectors: [aws_access_key]}
"""


@contextmanager
def hook_service(tmp: Path, token: str = TOKEN, tls: tuple[Path, Path, Path] | None = None) -> Iterator[str]:
    """The hook service as its own process; yields its URL once it answers."""
    port = free_port()
    args = [sys.executable, HOOK, "--port", str(port), "--token", token, "--log", str(tmp / "hook.jsonl")]
    if tls is not None:
        args += ["--tls", *map(str, tls)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with _health(port, tls is not None):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.05)  # a port that is not open yet has no event to wait on
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}/inspect"
    finally:
        process.kill()
        process.wait(timeout=5)


@contextmanager
def _health(port: int, tls: bool = False) -> Iterator[None]:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
        if tls:  # listening is ready enough: the handshake itself needs a client certificate
            yield
            return
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        if not conn.recv(64).startswith(b"HTTP/1.1 200"):
            raise OSError("not ready")
    yield


def manifold_config(tmp: Path, url: str, token: str = TOKEN) -> dict[str, Any]:
    (tmp / "policy.yaml").write_text(POLICY)
    hook = {"url": url, "timeout": 1, "concurrency": 4, "bearer_token": token}
    return {
        "servers": {"g": guard_server(tmp, poison=None)},
        "policy": {
            "files": [str(tmp / "policy.yaml")],
            "pins": {"mode": "off", "path": str(tmp / "pins.json")},
            "audit": {"path": str(tmp / "audit.jsonl")},
            "guardrails": {
                "hooks": {
                    "dlp": {**hook, "failure": "closed", "cache": {"entries": 100, "ttl": 60}},
                    "lenient": {**hook, "failure": "open", "cache": {"entries": 0}},
                }
            },
        },
    }


@pytest.fixture(scope="module")
async def manifold(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningManifold]:
    tmp = tmp_path_factory.mktemp("hooks")
    with hook_service(tmp) as url:
        async with running_manifold(tmp, manifold_config(tmp, url)) as running:
            yield running


def _files(manifold: RunningManifold, name: str) -> list[dict[str, Any]]:
    return _files_in(Path(manifold.log_path).parent, name)


def _files_in(directory: Path, name: str) -> list[dict[str, Any]]:
    path = directory / name
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def received(manifold: RunningManifold) -> list[dict[str, Any]]:
    return _files(manifold, "received.jsonl")


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def call(manifold: RunningManifold, tool: str, arguments: dict[str, Any], era: str = "legacy") -> Any:
    options: dict[str, Any] = {"mode": "legacy"} if era == "legacy" else {"mode": "2026-07-28", "cache": None}
    with anyio.fail_after(30):
        async with Client(manifold.url, **options) as session:
            return await session.call_tool(tool, arguments)


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_an_allowing_hook_is_sent_the_contract_and_the_call_goes_through(
    manifold: RunningManifold, era: str
) -> None:
    before = len(received(manifold))
    result = await call(manifold, "g.record", {"note": f"hello {era}"}, era)
    assert not result.is_error, text_of(result)
    assert received(manifold)[before:] == [{"note": f"hello {era}"}]
    sent = next(
        s
        for s in reversed(_files(manifold, "hook.jsonl"))
        if s["content"]["arguments"]["note"] == f"hello {era}"
    )
    assert sent["version"] == "manifold.guardrails/v1"
    assert (sent["rule"], sent["direction"], sent["server"], sent["kind"], sent["name"]) == (
        "dlp-out",
        "tool_arguments",
        "g",
        "tool",
        "g.record",
    )
    assert sent["identity"]["name"] == "anonymous"
    assert isinstance(sent["findings"], list)


async def test_a_denying_hook_refuses_the_call_with_its_reason(manifold: RunningManifold) -> None:
    before = len(received(manifold))
    result = await call(manifold, "g.record", {"mode": "deny", "note": "x"})
    assert result.is_error
    assert "the DLP service refuses this" in text_of(result)
    assert "dlp" in text_of(result)
    assert received(manifold)[before:] == []


async def test_a_hook_edit_is_what_the_server_receives(manifold: RunningManifold) -> None:
    before = len(received(manifold))
    result = await call(manifold, "g.record", {"mode": "redact", "note": "card 4111 1111 1111 1111"})
    assert not result.is_error
    assert received(manifold)[before:] == [{"mode": "redact", "note": "[EDITED]"}]


async def test_a_hook_edit_the_tool_schema_refuses_is_refused_with_a_clear_error(
    manifold: RunningManifold,
) -> None:
    before = len(received(manifold))
    result = await call(manifold, "g.typed", {"mode": "invalid", "note": "x"})
    assert result.is_error
    assert "no longer fit its inputSchema" in text_of(result)
    assert received(manifold)[before:] == []


@pytest.mark.parametrize("mode", ["hang", "garbage", "huge", "status"])
async def test_a_failing_hook_fails_closed_on_that_call_only(manifold: RunningManifold, mode: str) -> None:
    started = time.monotonic()
    result = await call(manifold, "g.record", {"mode": mode, "note": "x"})
    assert result.is_error
    assert "gave no usable answer" in text_of(result)
    assert time.monotonic() - started < 10  # the hook's timeout (1 s), not the client's
    fine = await call(manifold, "g.record", {"note": f"after {mode}"})
    assert not fine.is_error


@pytest.mark.parametrize("mode", ["hang", "garbage", "foreign"])
async def test_a_failing_hook_configured_open_lets_the_call_through(
    manifold: RunningManifold, mode: str
) -> None:
    result = await call(manifold, "g.answer", {"mode": mode, "blocks": ["ok"], "note": "n"})
    assert not result.is_error, text_of(result)
    assert text_of(result) == "ok"


async def test_identical_content_is_answered_from_the_cache(manifold: RunningManifold) -> None:
    arguments = {"note": "cache me, same every time"}
    for _ in range(3):
        assert not (await call(manifold, "g.record", arguments)).is_error
    sent = [s for s in _files(manifold, "hook.jsonl") if s["content"]["arguments"] == arguments]
    assert len(sent) == 1


async def test_a_hook_that_asks_puts_a_person_in_the_loop(manifold: RunningManifold) -> None:
    asked: list[str] = []

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})

    before = len(received(manifold))
    with anyio.fail_after(30):
        async with Client(manifold.url, mode="legacy", elicitation_callback=person) as session:
            result = await session.call_tool("g.record", {"mode": "confirm", "note": "send it"})
    assert not result.is_error, text_of(result)
    assert len(asked) == 1
    assert "dlp" in asked[0]
    assert received(manifold)[before:] == [{"mode": "confirm", "note": "send it"}]


async def test_a_wrong_bearer_token_fails_closed(tmp_path: Path) -> None:
    with hook_service(tmp_path, token="another-token-entirely-000") as url:
        async with running_manifold(tmp_path, manifold_config(tmp_path, url)) as running:
            refused = await call(running, "g.record", {"note": "x"})
    assert refused.is_error  # 401: no usable answer, and dlp fails closed
    assert "gave no usable answer" in text_of(refused)


async def test_a_hook_that_crashes_fails_each_call_by_its_own_mode(tmp_path: Path) -> None:
    with hook_service(tmp_path) as url:
        async with running_manifold(tmp_path, manifold_config(tmp_path, url)) as running:
            opened = await call(running, "g.answer", {"mode": "crash", "blocks": ["ok"]})
            after = await call(running, "g.record", {"note": "y"})
            healthy = await call(running, "g.answer", {"blocks": ["still served"]})
    assert not opened.is_error  # the hook died answering; lenient fails open
    assert after.is_error  # it is gone now; dlp fails closed
    assert "gave no usable answer" in text_of(after)
    assert text_of(healthy) == "still served"


async def test_a_hook_edit_that_brings_in_what_the_rules_refuse_is_refused(manifold: RunningManifold) -> None:
    before = len(received(manifold))
    result = await call(manifold, "g.record", {"mode": "smuggle", "note": "harmless"})
    assert result.is_error
    assert "no-keys-out" in text_of(result)
    assert received(manifold)[before:] == []


def _pki(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def issue(name: str, key: Any, issuer: Any, issuer_key: Any, *, ca: bool, ip: bool = False) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ip:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    files: dict[str, Path] = {}

    def write(label: str, cert: Any, key: Any) -> None:
        files[f"{label}.pem"] = directory / f"{label}.pem"
        files[f"{label}.pem"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files[f"{label}.key"] = directory / f"{label}.key"
        files[f"{label}.key"].write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test ca")])
    write("ca", issue("test ca", ca_key, ca_name, ca_key, ca=True), ca_key)
    for label, ip in (("server", True), ("client", False)):
        key = ec.generate_private_key(ec.SECP256R1())
        write(label, issue(label, key, ca_name, ca_key, ca=False, ip=ip), key)
    return files


async def test_mtls_to_the_hook_with_our_certificate_and_its_ca(tmp_path: Path) -> None:
    pki = _pki(tmp_path)
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    with hook_service(tmp_path, tls=(pki["server.pem"], pki["server.key"], pki["ca.pem"])) as url:
        trusted = manifold_config(tmp_path, url)
        mtls = {"cert": str(pki["client.pem"]), "key": str(pki["client.key"]), "ca": str(pki["ca.pem"])}
        trusted["policy"]["guardrails"]["hooks"]["dlp"]["tls"] = mtls
        async with running_manifold(tmp_path / "with", trusted) as running:
            allowed = await call(running, "g.record", {"note": "over mtls"})
            denied = await call(running, "g.record", {"mode": "deny", "note": "over mtls"})
        without = manifold_config(tmp_path, url)
        without["policy"]["guardrails"]["hooks"]["dlp"]["tls"] = {"ca": str(pki["ca.pem"])}
        async with running_manifold(tmp_path / "without", without) as running:
            refused = await call(running, "g.record", {"note": "no client certificate"})
    assert not allowed.is_error, text_of(allowed)
    assert "the DLP service refuses this" in text_of(denied)
    assert refused.is_error  # the hook refused the handshake: no usable answer, failure closed
    assert "gave no usable answer" in text_of(refused)


async def test_the_hook_never_has_more_requests_in_flight_than_its_concurrency(tmp_path: Path) -> None:
    with hook_service(tmp_path) as url:
        config = manifold_config(tmp_path, url)
        config["policy"]["guardrails"]["hooks"]["dlp"].update({"concurrency": 1, "timeout": 10})
        async with running_manifold(tmp_path, config) as running:
            results: list[Any] = []

            async def one(index: int) -> None:
                results.append(await call(running, "g.record", {"mode": "slow", "note": f"call {index}"}))

            async with anyio.create_task_group() as tg:
                for index in range(3):
                    tg.start_soon(one, index)
    assert [result.is_error for result in results] == [False, False, False]  # each waited for the slot
    sent = [
        line
        for line in _files_in(tmp_path, "hook.jsonl")
        if line["content"]["arguments"].get("mode") == "slow"
    ]
    assert len(sent) == 3
    assert max(line["in_flight"] for line in sent) == 1
