"""Manifold's own file I/O: documents read, state files replaced whole, changes noticed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from proxy.core.errors import ConfigError
from proxy.core.files import read_bytes, read_text, stamps, write_atomically


def test_text_is_read_as_utf8(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_bytes("name: café\n".encode())
    assert read_text(str(path)) == "name: café\n"


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda path: None, r"a\.yaml: file not found"),
        (lambda path: path.write_bytes(b"\xff\xfe"), r"a\.yaml: not UTF-8 text \(invalid start byte"),
        (lambda path: path.mkdir(), r"a\.yaml: cannot read the file"),
    ],
    ids=["missing", "not-utf8", "a-directory"],
)
def test_a_document_that_cannot_be_read_is_a_config_error_naming_it(
    tmp_path: Path, setup: Callable[[Path], object], expected: str
) -> None:
    path = tmp_path / "a.yaml"
    setup(path)
    with pytest.raises(ConfigError, match=expected):
        read_text(str(path))


def test_bytes_of_a_missing_file_are_none_and_of_an_unreadable_one_an_error(tmp_path: Path) -> None:
    assert read_bytes(str(tmp_path / "absent")) is None
    with pytest.raises(ConfigError, match="cannot read the state file"):
        read_bytes(str(tmp_path), what="the state file")


def test_an_atomic_write_creates_the_directory_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state" / "pins.json"
    write_atomically(path, b"one\n")
    write_atomically(path, b"two\n")
    assert path.read_bytes() == b"two\n"
    assert [p.name for p in path.parent.iterdir()] == ["pins.json"]


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "pins.json"
    write_atomically(path, b"old\n")

    def fail(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk on fire"):
        write_atomically(path, b"new\n")

    assert path.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["pins.json"]


def test_stamps_change_when_a_file_changes_appears_or_goes(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    paths = [str(path)]
    absent = stamps(paths)
    assert absent == (None,)

    path.write_text("version: 1\n")
    written = stamps(paths)
    assert written != absent

    path.write_text("version: 1\nrules: []\n")  # a different size: a change even within one mtime tick
    assert stamps(paths) != written

    path.unlink()
    assert stamps(paths) == absent


def test_a_bounded_read_refuses_a_link_to_a_device_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=r"a\.yaml: not a regular file"):
        read_text(str(path), max_bytes=1024)


def test_a_bounded_read_refuses_a_pipe_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    os.mkfifo(path)
    with pytest.raises(ConfigError, match=r"a\.yaml: not a regular file"):
        read_text(str(path), max_bytes=1024)


def test_a_bounded_read_refuses_a_file_one_byte_too_big_and_reads_one_that_fits(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_bytes(b"x" * 1025)
    with pytest.raises(ConfigError, match=r"a\.yaml: larger than 1024 bytes"):
        read_text(str(path), max_bytes=1024)
    path.write_bytes(b"x" * 1024)
    assert read_text(str(path), max_bytes=1024) == "x" * 1024
