"""Manifold's own file I/O: documents read, state files written whole, changes noticed.

The pure cores (protocol, catalog, policy, the rate-limit arithmetic) never touch the disk;
callers read and write here and hand the cores text, bytes and data. Read failures become
:class:`~proxy.core.errors.ConfigError` naming the file: a file Manifold reads is one an operator
wrote or pointed it at, so fixing it is theirs.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

from proxy.core.errors import ConfigError

__all__ = ["Stamp", "read_bytes", "read_text", "stamps", "write_atomically"]

# What polling compares to notice a change: (modification time, size), or None for no file.
Stamp: TypeAlias = tuple[float, int] | None


def read_text(source: str, *, max_bytes: int | None = None) -> str:
    """A document's text; with ``max_bytes``, only from a regular file of at most that many
    bytes (a file swapped for a link to ``/dev/zero``, a pipe or a huge file is refused, and
    never read whole).

    Raises:
        ConfigError: the file is missing, unreadable, not UTF-8, or (``max_bytes``) not a
            regular file or larger than that, naming it.
    """
    try:
        if max_bytes is not None:
            return _read_bounded(source, max_bytes).decode("utf-8")
        return Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the file ({exc.strerror or exc})") from None


def _read_bounded(source: str, max_bytes: int) -> bytes:
    # Non-blocking open: opening a FIFO for reading would otherwise wait for a writer.
    descriptor = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise ConfigError(f"{source}: not a regular file (a device, a pipe or a directory)")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{source}: larger than {max_bytes} bytes; refused")
    return data


def read_bytes(source: str, *, what: str = "the file") -> bytes | None:
    """A file's bytes; None when it does not exist (yet), for files Manifold creates itself.

    Raises:
        ConfigError: the file exists but cannot be read, naming it and ``what`` it is.
    """
    try:
        return Path(source).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read {what} ({exc.strerror or exc})") from None


def write_atomically(path: str | os.PathLike[str], body: bytes) -> None:
    """Replace ``path`` with ``body``: readers see the old file or the new one, never half.

    A temporary file in the same directory is written, flushed to disk and renamed over the
    target, so a crash leaves the old file; the directory is created when missing.

    Raises:
        OSError: the directory is not writable, the disk is full …; ``path`` is then unchanged
            and no temporary file is left behind.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(body)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def stamps(paths: Sequence[str]) -> tuple[Stamp, ...]:
    """One :data:`Stamp` per path, for a poller to compare (polled: inotify is not portable)."""
    found: list[Stamp] = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            found.append(None)
        else:
            found.append((stat.st_mtime, stat.st_size))
    return tuple(found)
