"""The conformance suite's *client* under test: Manifold, driven by the official SDK client.

    node_modules/.bin/conformance client --scenario tools_call \\
        --command "/abs/.venv/bin/python /abs/tests/conformance/client_wrapper.py"

The suite starts a test server for the scenario and runs ``<command> <server-url>`` with
``MCP_CONFORMANCE_SCENARIO`` set. This wrapper starts Manifold with that URL as its only server
(``prefix: ""``, so tool names pass through), connects to Manifold's ``/mcp`` with the SDK
``Client`` (which answers elicitation with the schema's defaults, and sampling with a fixed
text), and makes the one call the scenario expects. What the suite then judges is Manifold's
*outbound* side: its ``initialize``, its ``tools/call``, how it relays a server's
``elicitation/create`` back to the client, and how it resumes an SSE stream (``sse-retry``).

Exit status: 0 when the call went through, 1 otherwise (the suite's checks are the verdict).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext

if not __package__:  # run as a script (as the suite does): make `tests.conformance` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.conformance.run import MANIFOLD_READY, manifold_command, started, until_ready

__all__ = ["main"]

TIMEOUT: Final = 25.0  # the suite kills the client after 30 s by default
# scenario -> (tool, arguments); a scenario not listed only lists tools.
CALLS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}


def manifold_config(path: Path, url: str) -> Path:
    config = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "log_level": "debug",
        "servers": {
            # required: the wrapper waits on /readyz for it (serve listens before it connects).
            "target": {
                "url": url,
                "prefix": "",
                "connect_timeout": 15,
                "request_timeout": 15,
                "required": True,
            },
        },
    }
    path.write_text(json.dumps(config, indent=2))
    return path


async def accept_with_defaults(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult | types.ErrorData:
    """Accept a form, filling every field from its schema's ``default`` (SEP-1034)."""
    if not isinstance(params, types.ElicitRequestFormParams):
        return types.ElicitResult(action="decline")
    properties = params.requested_schema.get("properties", {})
    content = {name: schema["default"] for name, schema in properties.items() if "default" in schema}
    return types.ElicitResult(action="accept", content=content)


async def sample(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult | types.ErrorData:
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="a sampled answer"),
        model="conformance-wrapper",
        stop_reason="endTurn",
    )


async def drive(manifold_url: str, scenario: str) -> bool:
    async with Client(
        manifold_url,
        mode="legacy",
        elicitation_callback=accept_with_defaults,
        sampling_callback=sample,
        client_info=types.Implementation(name="manifold-conformance-wrapper", version="1.0.0"),
    ) as client:
        tools = await client.list_tools()
        print(f"tools via Manifold: {[t.name for t in tools.tools]}")
        if scenario not in CALLS:
            return True
        name, arguments = CALLS[scenario]
        result = await client.call_tool(name, arguments)
        text = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
        print(f"{name} -> isError={result.is_error}: {text}")
        return not result.is_error


async def run(server_url: str, scenario: str, work: Path) -> int:
    config = manifold_config(work / "manifold.json", server_url)
    log = work / "manifold.log"
    try:
        with anyio.fail_after(TIMEOUT):
            command = manifold_command(config)
            async with started(command, MANIFOLD_READY, log, "Manifold", cwd=work) as manifold:
                await until_ready(manifold.url)
                ok = await drive(manifold.url, scenario)
    except Exception as exc:  # RunnerError, TimeoutError, MCPError…: reported; the suite judges
        print(f"client_wrapper: {scenario}: {type(exc).__name__}: {exc}", file=sys.stderr)
        ok = False
    finally:
        # The suite keeps our stderr (stderr.txt with -o): Manifold's log is the useful part.
        sys.stderr.write(log.read_text() if log.exists() else "")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: client_wrapper.py SERVER_URL   (MCP_CONFORMANCE_SCENARIO names the scenario)")
        return 2
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    with tempfile.TemporaryDirectory(prefix="manifold-conformance-client-") as work:
        return anyio.run(run, args[0], scenario, Path(work))


if __name__ == "__main__":
    raise SystemExit(main())
