"""Headless Chromium (the Debian ``chromium`` package), driven over the Chrome DevTools Protocol
with aiohttp's websocket client: enough to open a page, type, click and read it back."""

from __future__ import annotations

import base64
import itertools
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson

__all__ = ["Browser", "chromium", "headless"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One page of a running headless Chromium."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One CDP command; its result (events that arrive meanwhile are kept)."""
        command_id = next(self._ids)
        # CDP reads text frames only.
        await self._ws.send_str(orjson.dumps({"id": command_id, "method": method, "params": params}).decode())
        while True:
            message = orjson.loads((await self._ws.receive()).data)
            if message.get("id") == command_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self._events.append(message)

    async def event(self, method: str) -> dict[str, Any]:
        for index, event in enumerate(self._events):
            if event.get("method") == method:
                return self._events.pop(index)
        while True:
            message = orjson.loads((await self._ws.receive()).data)
            if message.get("method") == method:
                found: dict[str, Any] = message
                return found
            self._events.append(message)

    async def open(self, url: str) -> None:
        self._events = [e for e in self._events if e.get("method") != "Page.loadEventFired"]
        await self.send("Page.navigate", url=url)
        await self.event("Page.loadEventFired")

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def type_into(self, selector: str, text: str) -> None:
        await self.evaluate(f"document.querySelector({orjson.dumps(selector).decode()}).focus()")
        await self.send("Input.insertText", text=text)

    async def click_and_wait(self, selector: str) -> None:
        """Click what submits a form, and wait for the page it leads to."""
        self._events = [e for e in self._events if e.get("method") != "Page.loadEventFired"]
        await self.evaluate(f"document.querySelector({orjson.dumps(selector).decode()}).click()")
        await self.event("Page.loadEventFired")

    async def screenshot(self) -> bytes:
        """The page as a PNG."""
        shot = await self.send("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])


@asynccontextmanager
async def headless(profile: Path) -> AsyncIterator[Browser]:
    """A headless Chromium with its own profile directory; closed on exit."""
    binary = chromium()
    assert binary is not None
    process = subprocess.Popen(  # noqa: ASYNC220 (started once; its end is awaited below, bounded)
        [
            binary,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            "--window-size=1000,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        with anyio.fail_after(30):
            while not port_file.exists() or not port_file.read_text().strip():  # noqa: ASYNC110
                await anyio.sleep(0.05)  # Chromium writes the file once it listens: nothing to wait on
        port = port_file.read_text().split()[0]
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            page = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024) as ws:
                browser = Browser(ws)
                await browser.send("Page.enable")
                yield browser
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
