"""``manifold credentials``: what it refuses, and that it never prints a secret."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from proxy.cli.commands import main
from proxy.core.redaction import remember_secrets
from proxy.credentials.sealing import new_key

SECRET = "ghp_cli-secret-token-9999"


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """``main`` sets up Manifold's logging, as a process does; the next test gets pytest's back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    remember_secrets(())


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "manifold.yaml"
    data = {
        "credentials": {"key": new_key(), "path": "creds.json"},
        "servers": {
            "gh": {"url": "http://127.0.0.1:9/mcp", "credentials": {"mode": "secret"}},
            "plain": {"url": "http://127.0.0.1:9/other"},
        },
    }
    path.write_text(yaml.safe_dump(data))
    return path


def run(monkeypatch: pytest.MonkeyPatch, *args: str, stdin: str = "") -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    return main(["credentials", *args])


def test_set_list_and_revoke_never_print_the_secret(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        run(
            monkeypatch,
            "set",
            "-c",
            str(config),
            "--server",
            "gh",
            "--identity",
            "alice",
            "--secret-stdin",
            stdin=f"{SECRET}\n",
        )
        == 0
    )
    assert run(monkeypatch, "list", "-c", str(config)) == 0
    assert run(monkeypatch, "revoke", "-c", str(config), "--server", "gh", "--identity", "alice") == 0
    said = capsys.readouterr()
    assert "gh\tsecret\tapi_key\t-\talice" in said.out
    assert "SERVER\tKIND\tSOURCE\tISSUER\tSUBJECT\ngh\tsecret" in said.out  # list's column headers
    assert "revoked secret of alice (api_key) to server gh" in said.out
    assert SECRET not in said.out + said.err
    assert SECRET not in (config.parent / "creds.json").read_text()


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("--server", "nope", "--identity", "a"), "no server 'nope' is configured"),
        (("--server", "plain", "--identity", "a"), "server 'plain' has credentials.mode 'shared'"),
        (
            ("--server", "gh", "--identity", "a", "--issuer", "https://id"),
            "say --source jwt or --source oauth",
        ),
        (("--server", "gh", "--identity", "a", "--source", "jwt"), "needs --issuer"),
        (("--server", "gh", "--identity", "a", "--source", "api_key", "--issuer", "x"), "has no issuer"),
    ],
)
def test_set_refuses_what_names_no_server_or_no_identity_clearly(
    config: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    problem: str,
) -> None:
    assert run(monkeypatch, "set", "-c", str(config), *args, "--secret-stdin", stdin=f"{SECRET}\n") == 2
    assert problem in capsys.readouterr().err


def test_a_secret_with_a_control_character_is_refused(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(
        monkeypatch,
        "set",
        "-c",
        str(config),
        "--server",
        "gh",
        "--identity",
        "a",
        "--secret-stdin",
        stdin="tok\x1ben\n",
    )
    assert code == 2
    assert "control characters" in capsys.readouterr().err


def test_keygen_prints_a_key_the_config_takes(capsys: pytest.CaptureFixture[str]) -> None:
    from proxy.config.credentials import decode_key

    assert main(["credentials", "keygen"]) == 0
    assert len(decode_key(capsys.readouterr().out.strip())) == 32
