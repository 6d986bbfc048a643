"""The raw exchanges in docs/reference/protocol.md are what ``manifold serve`` answers.

The page shows one request and answer per era, captured from ``manifold serve`` on
``examples/manifold.yaml``. Here each documented request is sent as written (its headers and
body; the session id is the one this run's ``initialize`` got) to a real ``manifold serve`` on
that config, and each answer must be the documented one: the status, the headers shown, and the
body as JSON.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.interaction.harness import REPO
from tests.interaction.test_user_files import serving

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PAGE = REPO / "docs" / "reference" / "protocol.md"
_BLOCK = re.compile(r"^```http\n(.*?)^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Message:
    start: str  # request line or status line
    headers: dict[str, str]  # lower-case names
    body: Any  # decoded JSON, or None

    @classmethod
    def parse(cls, block: str) -> Message:
        head, _, body = block.partition("\n\n")
        start, *lines = head.splitlines()
        headers = {
            name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)
        }
        return cls(start, headers, orjson.loads(body) if body.strip() else None)


def documented() -> list[tuple[Message, Message]]:
    """The page's (request, answer) pairs, in order."""
    messages = [Message.parse(block) for block in _BLOCK.findall(PAGE.read_text(encoding="utf-8"))]
    pairs = list(zip(messages[::2], messages[1::2], strict=True))
    assert all(
        request.start.startswith("POST ") and answer.start.startswith("HTTP/1.1 ")
        for request, answer in pairs
    )
    return pairs


async def test_the_documented_exchanges_are_what_manifold_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}")
    pairs = documented()
    assert len(pairs) == 3  # 2026-07-28 tools/call; initialize; tools/call in the session
    async with serving(REPO / "examples" / "manifold.yaml", tmp_path / "m.log") as manifold:
        session: str | None = None
        async with aiohttp.ClientSession() as http:
            for request, answer in pairs:
                headers = {k: v for k, v in request.headers.items() if k != "host"}
                if "mcp-session-id" in headers:
                    assert session is not None
                    headers["mcp-session-id"] = session
                    async with http.post(
                        manifold.url,
                        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                        headers={**headers, "content-type": "application/json"},
                    ) as initialized:
                        assert initialized.status == 202  # as the page says
                async with http.post(manifold.url, data=orjson.dumps(request.body), headers=headers) as got:
                    status = f"HTTP/1.1 {got.status} {got.reason}"
                    body = orjson.loads(await got.read())
                    if "mcp-session-id" in got.headers:
                        session = got.headers["mcp-session-id"]
                assert status == answer.start
                assert got.headers["content-type"] == answer.headers["content-type"]
                assert ("mcp-session-id" in got.headers) == ("mcp-session-id" in answer.headers)
                assert body == answer.body
