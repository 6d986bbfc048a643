"""The secret ``manifold credentials set --secret-stdin`` reads: one line, all of it, or a refusal.

A secret is one line (a token, a key): what a shell pipe, ``printf``, a heredoc or a password
manager gives, with or without its end of line. Anything after the first line is refused, never
dropped: a multi-line paste (a PEM block, two tokens, a token and a stray note) kept as its first
line alone would be stored, reported as stored, and fail at the server much later. So is a
secret longer than :data:`MAX_SECRET_CHARS`, and an empty one.
"""

from __future__ import annotations

from typing import Final, TextIO

__all__ = ["MAX_SECRET_CHARS", "read_secret"]

MAX_SECRET_CHARS: Final = 1024 * 1024  # of one secret; a longer input is refused, not cut


def read_secret(stream: TextIO) -> str:
    """The one line on ``stream`` (its one end of line, ``\\n`` or ``\\r\\n``, taken off).

    Raises:
        ValueError: nothing was given, more than one line was, or more than
            :data:`MAX_SECRET_CHARS` characters. The message never shows the input.
    """
    text = stream.read(MAX_SECRET_CHARS + 3)  # the longest secret and its end of line, and one more
    if text.endswith("\r\n"):
        secret = text[:-2]
    elif text.endswith("\n"):
        secret = text[:-1]
    else:
        secret = text
    if len(secret) > MAX_SECRET_CHARS:
        raise ValueError(
            f"the secret on standard input is longer than {MAX_SECRET_CHARS} characters; refused"
        )
    if "\n" in secret or "\r" in secret:
        raise ValueError(
            "the secret on standard input has more than one line; a secret is one line (nothing was "
            "stored: give only the secret, e.g. printf '%s' \"$TOKEN\" | manifold credentials set …)"
        )
    if not secret:
        raise ValueError("no secret on standard input (nothing was stored)")
    return secret
