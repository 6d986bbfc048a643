"""The policy's files on disk: policy documents read, the pins file read and written.

:mod:`proxy.policy` decides on data and never touches the disk; this module is where its files
are read (through :mod:`proxy.core.files`) and handed to the pure parsers
(:func:`~proxy.policy.loader.parse_policy_text`, :func:`~proxy.policy.pins.parse_pins`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from proxy.core.errors import ConfigError
from proxy.core.files import read_bytes, read_text, write_atomically
from proxy.policy.loader import combine, parse_policy_text
from proxy.policy.model import Policy, PolicyDocument
from proxy.policy.pins import parse_pins, render_pins

__all__ = ["load_pins", "load_policy", "save_pins"]


def load_policy(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> Policy:
    """Read and combine one or more policy files.

    Raises:
        ConfigError: a file is missing, unreadable, not YAML/JSON, or not a valid policy, or the
            files disagree (duplicate rule ids, different defaults). One line per problem.
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    if not paths:
        raise ConfigError("no policy files given")
    documents: list[tuple[str, PolicyDocument]] = []
    problems: list[str] = []  # every file's, not the first bad file's alone
    for path in paths:
        source = os.fspath(path)
        try:
            documents.append((source, parse_policy_text(read_text(source), source)))
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError("\n".join(problems))
    return combine(documents)


def load_pins(path: str | os.PathLike[str]) -> dict[str, str]:
    """The pins saved at ``path``; ``{}`` when the file does not exist yet.

    Raises:
        ConfigError: the file exists but cannot be read or is not a pins file.
    """
    source = os.fspath(path)
    raw = read_bytes(source, what="the pins file")
    return {} if raw is None else parse_pins(raw, source)


def save_pins(path: str | os.PathLike[str], pins: Mapping[str, str]) -> None:
    """Write ``pins`` to ``path`` atomically: readers see the old file or the new one, never half.

    Raises:
        OSError: the directory is not writable, the disk is full …; ``path`` is then unchanged.
    """
    write_atomically(path, render_pins(pins))
