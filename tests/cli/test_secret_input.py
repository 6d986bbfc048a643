"""``--secret-stdin`` takes one line, all of it, or refuses: nothing is dropped and reported stored."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from proxy.cli import main
from proxy.cli.secret_input import MAX_SECRET_CHARS, read_secret
from proxy.core.redaction import remember_secrets
from proxy.credentials.sealing import new_key

SECRET = "ghp_first-line-of-two-7777"


@pytest.mark.parametrize("given", ["tok", "tok\n", "tok\r\n"])
def test_one_line_with_or_without_its_end_of_line_is_the_secret(given: str) -> None:
    assert read_secret(io.StringIO(given)) == "tok"


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("tok\nmore\n", "more than one line"),
        ("tok\n\n", "more than one line"),
        ("-----BEGIN KEY-----\nabc\n-----END KEY-----\n", "more than one line"),
        ("tok\rmore", "more than one line"),
        ("", "no secret"),
        ("\n", "no secret"),
        ("x" * (MAX_SECRET_CHARS + 1), "longer than"),
    ],
    ids=[
        "two lines",
        "a blank second line",
        "a PEM block",
        "a bare CR",
        "nothing",
        "an empty line",
        "too long",
    ],
)
def test_anything_but_one_line_is_refused_without_showing_it(given: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as raised:
        read_secret(io.StringIO(given))
    assert "tok" not in str(raised.value)
    assert "abc" not in str(raised.value)


def test_the_longest_secret_is_taken_whole() -> None:
    assert read_secret(io.StringIO("x" * MAX_SECRET_CHARS + "\n")) == "x" * MAX_SECRET_CHARS


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    remember_secrets(())


def test_set_refuses_a_multi_line_secret_with_exit_2_and_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "manifold.yaml"
    data = {
        "credentials": {"key": new_key(), "path": "creds.json"},
        "servers": {"gh": {"url": "http://127.0.0.1:9/mcp", "credentials": {"mode": "secret"}}},
    }
    config.write_text(yaml.safe_dump(data))
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{SECRET}\nsecond-line\n"))

    code = main(
        ["credentials", "set", "-c", str(config), "--server", "gh", "--identity", "a", "--secret-stdin"]
    )

    said = capsys.readouterr()
    assert code == 2
    assert "more than one line" in said.err
    assert "stored" not in said.out
    assert SECRET not in said.out + said.err
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["credentials", "list", "-c", str(config)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == []  # the column headers, and no entry
